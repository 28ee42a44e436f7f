"""``rackscale apply -f``, ``get schedules`` and ``delete schedule`` against the real service; bad files are
refused here (file:line: field: message, exit 2) before anything is sent; ``kube-scheduler --schedule``
refuses a schedule that does not target a Deployment before it connects."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.service.conftest import LiveService, serve_in_thread, small_cluster
from typer.testing import CliRunner

from rackscale.cli.app import app
from rackscale.service.app import ServiceConfig

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUOTA = """\
apiVersion: rackscale.io/v1
kind: ScalingSchedule
metadata: {name: interns-nights}
spec:
  target: {queue: interns}
  steps:
    - {cron: "0 2 * * *", quotaGpus: 0}
    - {cron: "0 8 * * *", quotaGpus: null}
---
name: intern-job
kind: training
gpus: 4
queue: interns
"""


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveService]:
    for var in ("RACKSCALE_SERVER", "RACKSCALE_TOKEN", "RACKSCALE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cfg = ServiceConfig(data_dir=tmp_path / "data", cluster=small_cluster(), speed=1.0, interval_s=0.01)
    with serve_in_thread(cfg) as live:
        assert live.admin_token is not None
        monkeypatch.setenv("RACKSCALE_TOKEN", live.admin_token)
        monkeypatch.setenv("RACKSCALE_SERVER", live.url)
        yield live


def test_apply_get_and_delete_a_schedule_with_a_job_in_the_same_file(service: LiveService, tmp_path: Path) -> None:
    f = tmp_path / "nights.yaml"
    f.write_text(QUOTA)
    out = runner.invoke(app, ["apply", "-f", str(f)])
    assert out.exit_code == 0, out.output
    assert "schedule/interns-nights created" in out.output and "job/intern-job submitted (queue interns)" in out.output
    again = runner.invoke(app, ["apply", "-f", str(EXAMPLES / "schedule-training-quota.yaml")])
    assert again.exit_code == 0 and "schedule/interns-nights configured" in again.output
    table = runner.invoke(app, ["get", "schedules"])
    assert table.exit_code == 0, table.output
    header, row = table.output.splitlines()[:2]
    assert header.split() == ["NAME", "TARGET", "NEXT", "STEP", "LAST", "FIRED"]
    assert row.startswith("interns-nights") and "queue interns" in row and "UTC" in row
    doc = json.loads(runner.invoke(app, ["get", "schedule", "interns-nights", "-o", "json"]).output)
    assert doc["name"] == "interns-nights" and doc["target"] == "interns" and len(doc["steps"]) == 2
    out = runner.invoke(app, ["delete", "schedule", "interns-nights"])
    assert out.exit_code == 0 and "schedule/interns-nights deleted" in out.output
    gone = runner.invoke(app, ["get", "schedule", "interns-nights"])
    assert gone.exit_code == 1 and "no schedule named 'interns-nights'" in gone.output
    assert "No schedules found." in runner.invoke(app, ["get", "schedules"]).output


BAD = [
    ("bad-cron", 'steps:\n    - {cron: "61 2 * * *", quotaGpus: 0}', ":7: spec.steps[0].cron"),
    ("wrong-field", "steps:\n    - {cron: '0 2 * * *', replicas: 0}", "spec.steps[0].replicas"),
    ("no-steps", "steps: []", "spec.steps"),
]


@pytest.mark.parametrize(("steps", "where"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_file_is_refused_here_naming_file_line_and_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steps: str, where: str
) -> None:
    monkeypatch.setenv("RACKSCALE_SERVER", "http://127.0.0.1:9")  # nothing listens: nothing may be sent
    f = tmp_path / "bad.yaml"
    f.write_text(
        "apiVersion: rackscale.io/v1\nkind: ScalingSchedule\nmetadata: {name: s}\nspec:\n  target: {queue: q}\n"
        f"  {steps}\n"
    )
    out = runner.invoke(app, ["apply", "-f", str(f)])
    assert out.exit_code == 2, out.output
    assert f"{f}" in out.output and where in out.output and "nothing was applied" in out.output
    assert "Traceback" not in out.output


def test_the_service_refuses_a_deployment_target_and_apply_says_why(service: LiveService) -> None:
    out = runner.invoke(app, ["apply", "-f", str(EXAMPLES / "schedule-training-nights.yaml")])
    assert out.exit_code == 1, out.output
    assert "schedule/training-nights rejected (422)" in out.output and "kube-scheduler" in out.output


@pytest.mark.parametrize(
    ("text", "words"),
    [(QUOTA.split("---")[0], "Deployments only"), (QUOTA.split("---")[1], "ScalingSchedule documents only")],
    ids=["queue-target", "a-job"],
)
def test_kube_scheduler_refuses_what_it_cannot_scale_before_connecting(tmp_path: Path, text: str, words: str) -> None:
    pytest.importorskip("kubernetes")
    f = tmp_path / "s.yaml"
    f.write_text(text)
    out = runner.invoke(app, ["kube-scheduler", "--schedule", str(f), "--kubeconfig", str(tmp_path / "none")])
    assert out.exit_code == 2 and words in out.output, out.output
