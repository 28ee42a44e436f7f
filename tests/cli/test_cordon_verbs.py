"""``rackscale cordon|drain|uncordon node|rack NAME`` against the real service, and ``get nodes`` STATUS."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.service.conftest import LiveService, serve_in_thread, small_cluster, wait_for
from typer.testing import CliRunner

from rackscale.cli.app import app
from rackscale.service.app import ServiceConfig

runner = CliRunner()


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveService]:
    for var in ("RACKSCALE_SERVER", "RACKSCALE_TOKEN", "RACKSCALE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cfg = ServiceConfig(data_dir=tmp_path / "data", cluster=small_cluster(), speed=1000.0, interval_s=0.01)
    with serve_in_thread(cfg) as live:
        assert live.admin_token is not None
        monkeypatch.setenv("RACKSCALE_TOKEN", live.admin_token)
        monkeypatch.setenv("RACKSCALE_SERVER", live.url)
        yield live


def status_of(node: str) -> str:
    out = runner.invoke(app, ["get", "nodes", "-o", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    items = doc["items"] if isinstance(doc, dict) else doc
    return next(n.get("mode") or "schedulable" for n in items if n["name"] == node)


def test_cordon_drain_uncordon_round_trip(service: LiveService) -> None:
    out = runner.invoke(app, ["cordon", "node", "r000-n00", "--reason", "watch"])
    assert out.exit_code == 0, out.output
    assert "node/r000-n00 cordoned (1 node(s))" in out.output and "watch" in out.output
    wait_for(lambda: status_of("r000-n00") == "cordoned", what="cordoned")
    table = runner.invoke(app, ["get", "nodes"])
    assert "STATUS" in table.output and "cordoned" in table.output
    out = runner.invoke(app, ["drain", "rack", "r001", "--grace", "10m", "-o", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["verb"] == "drain" and len(doc["items"]) == 18 and doc["items"][0]["mode"] == "draining"
    wait_for(lambda: status_of("r001-n00") == "drained", what="an empty node drained at once")
    out = runner.invoke(app, ["uncordon", "rack", "r001"])
    assert out.exit_code == 0 and "uncordoned" in out.output
    wait_for(lambda: status_of("r001-n00") == "schedulable", what="uncordoned")


def _running_rack(live: LiveService) -> str:
    """Submit a long 4-GPU job and return the rack it runs in."""
    doc = {"name": "long", "kind": "training", "gpus": 4, "durationEstimateSeconds": 1e9}
    live_api = httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {live.admin_token}"})
    with live_api:
        assert live_api.post("/v1/jobs", json=doc).status_code == 201

        def rack() -> str | None:
            job = live_api.get("/v1/jobs/long").json()
            placement = job.get("placement") or {}
            return placement["racks"][0] if job.get("status") == "running" and placement.get("racks") else None

        wait_for(lambda: rack() is not None, what="the job running")
        got = rack()
    assert got is not None
    return got


def test_drain_waits_until_the_nodes_are_empty(service: LiveService) -> None:
    rack = _running_rack(service)
    # A 10-minute grace of the service's clock (1,000 x the wall's): the job is stopped, requeued elsewhere.
    out = runner.invoke(app, ["drain", "rack", rack, "--grace", "10m", "--timeout", "30"])
    assert out.exit_code == 0, out.output
    assert f"rack/{rack} drained" in out.output
    assert all(status_of(f"{rack}-n{i:02d}") == "drained" for i in range(3))


def test_drain_gives_up_waiting_after_its_timeout(service: LiveService) -> None:
    rack = _running_rack(service)
    out = runner.invoke(app, ["drain", "rack", rack, "--grace", "100h", "--timeout", "1"])
    assert out.exit_code == 1, out.output
    assert "not drained after 1 s" in out.output and "still run jobs" in out.output
    out = runner.invoke(app, ["drain", "rack", rack, "--grace", "100h", "--no-wait"])
    assert out.exit_code == 0 and "draining" in out.output  # --no-wait: asked, not waited for


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["drain", "node", "r000-n00", "--grace", "soon"], 2, "--grace"),
        (["cordon", "node", "nope"], 1, "no node named 'nope'"),
        (["uncordon", "rack", "nope"], 1, "no rack named 'nope'"),
        (["cordon", "shelf", "r000"], 2, ""),
        # A NAME with a newline printed a second line (its prefix was not escaped); an empty one was a 404.
        (["cordon", "node", "r000-n00\nok"], 1, "node/r000-n00\\x0aok: no node named"),
        (["drain", "rack", "r000\x1b[2J"], 1, "rack/r000\\x1b[2J: no rack named"),
        (["cordon", "node", ""], 2, "NAME is empty"),
        (["uncordon", "rack", ""], 2, "NAME is empty"),
    ],
    ids=[
        "bad-grace",
        "unknown-node",
        "unknown-rack",
        "bad-target",
        "newline-name",
        "ansi-name",
        "empty-node",
        "empty-rack",
    ],
)
def test_bad_input(service: LiveService, args: list[str], code: int, says: str) -> None:
    out = runner.invoke(app, args)
    assert out.exit_code == code, out.output
    assert says in out.output
    if says:
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert status_of("r000-n00") == "schedulable"  # bad input touches no node
