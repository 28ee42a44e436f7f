"""``/v1/schedules`` through the real service (HTTP, runner thread, SQLite store): an admin puts, replaces,
lists, reads and deletes ScalingSchedules; hostile bodies get one answer each naming the field (non-admin
403, bad YAML or a bad field 422, a huge body 413, a Deployment target on a non-Kubernetes backend 422);
a tenant sees only the schedules of its queues; a schedule survives a restart; /metrics has its series.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.service.conftest import LiveService, serve_in_thread, small_cluster, wait_for

from rackscale.service.app import ServiceConfig

ADMIN, TENANT = "ops-token-0123456789abcdef", "team-a-token-0123456789abcdef"
TOKENS = f"""
tokens:
  - {{name: ops, role: admin, token: {ADMIN}}}
  - {{name: team-a, role: tenant, queues: [team-a], token: {TENANT}}}
"""
NIGHTS = """\
apiVersion: rackscale.io/v1
kind: ScalingSchedule
metadata: {name: training-nights}
spec:
  timeZone: Europe/Berlin
  target: {queue: team-a}
  steps:
    - {cron: "0 2 * * *", quotaGpus: 0}
    - {cron: "0 8 * * *", quotaGpus: 72}
"""
# The request guard takes changing requests as application/json only (service/guard.py: no CORS-simple type
# reaches a route); the route reads the text as JSON, else as YAML, so a YAML document goes as it is.
YAML = {"Content-Type": "application/json"}


def doc(name: str = "s", target: Any = None, steps: Any = None) -> dict[str, Any]:
    return {
        "apiVersion": "rackscale.io/v1",
        "kind": "ScalingSchedule",
        "metadata": {"name": name},
        "spec": {
            "target": target or {"queue": "batch"},
            "steps": steps or [{"cron": "*/5 * * * *", "quotaGpus": 8}],
        },
    }


def config(tmp_path: Path) -> ServiceConfig:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    return ServiceConfig(
        data_dir=tmp_path / "data", cluster=small_cluster(2), speed=1.0, interval_s=0.01, tokens_file=tokens
    )


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveService]:
    with serve_in_thread(config(tmp_path)) as svc:
        yield svc


def test_put_replace_list_get_delete(live: LiveService) -> None:
    with live.client(ADMIN) as c:
        r = c.post("/v1/schedules", content=NIGHTS, headers=YAML)
        assert r.status_code == 201, r.text
        got = r.json()
        assert (got["name"], got["targetKind"], got["target"], got["timeZone"]) == (
            "training-nights",
            "queue",
            "team-a",
            "Europe/Berlin",
        )
        assert got["next"]["step"] in (0, 1) and got["next"]["at"] > live.svc.ctx.runner.clock.now()
        # The step in force is applied by the runner's next step: the queue gets a quota (0 or 72).
        wait_for(lambda: (q := live.svc.ctx.runner.live.sched.queues.get("team-a")) and q.quota_gpus in (0.0, 72.0))
        wait_for(lambda: c.get("/v1/schedules/training-nights").json()["lastFired"], what="the step in force")
        replaced = json.loads(json.dumps(doc("training-nights", {"queue": "team-a"})))
        r = c.post("/v1/schedules", json=replaced)
        assert r.status_code == 200 and r.json()["steps"] == [{"cron": "*/5 * * * *", "quotaGpus": 8}]
        assert c.post("/v1/schedules", json=doc("other")).status_code == 201  # queue batch: created by the step
        names = [s["name"] for s in c.get("/v1/schedules").json()["items"]]
        assert names == ["other", "training-nights"]
        one = c.get("/v1/schedules/training-nights").json()
        assert one["history"] and one["history"][-1] == one["lastFired"]
        assert c.delete("/v1/schedules/other").json() == {"deleted": "other"}
        assert c.get("/v1/schedules/other").status_code == 404
        assert c.delete("/v1/schedules/other").status_code == 404
        wait_for(lambda: "other" not in live.svc.ctx.runner.live.schedules, what="the runner to forget it")


HOSTILE = [
    ("not-yaml", b"spec: [unclosed", 422, ["body"], "invalid YAML"),
    ("not-a-mapping", b"- 1\n- 2\n", 422, ["body"], "expected a mapping"),
    ("not-utf8", b"\xff\xfe\x00", 422, ["body"], "not UTF-8"),
    (
        "six-field-cron",
        json.dumps(doc(steps=[{"cron": "0 0 2 * * *", "quotaGpus": 0}])).encode(),
        422,
        ["body", "spec", "steps", 0, "cron"],
        "fields",
    ),
    (
        "wrong-field-for-target",
        json.dumps(doc(steps=[{"cron": "0 2 * * *", "replicas": 0}])).encode(),
        422,
        ["body", "spec", "steps", 0, "replicas"],
        "",
    ),
    (
        "unknown-zone",
        json.dumps({**doc(), "spec": {**doc()["spec"], "timeZone": "Mars/Olympus"}}).encode(),
        422,
        ["body", "spec", "timeZone"],
        "Mars/Olympus",
    ),
    (
        "deployment-on-sim",
        json.dumps(
            doc(
                target={"deployment": {"namespace": "default", "name": "trainer"}},
                steps=[{"cron": "0 2 * * *", "replicas": 0}],
            )
        ).encode(),
        422,
        ["body", "spec", "target", "deployment"],
        "kube-scheduler",
    ),
    ("huge", b"x" * (65 * 1024), 413, None, "over"),
]


@pytest.mark.parametrize(("body", "status", "loc", "words"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_hostile_bodies_get_one_answer_naming_the_field(
    live: LiveService, body: bytes, status: int, loc: list[Any] | None, words: str
) -> None:
    with live.client(ADMIN) as c:
        r = c.post("/v1/schedules", content=body, headers=YAML)
        assert r.status_code == status, r.text
        detail = r.json()["detail"]
        if loc is None:
            assert words in detail
        else:
            assert any(p["loc"] == loc and words in p["msg"] + p["fix"] for p in detail), detail
        assert c.get("/v1/schedules").json()["items"] == []


def test_a_yaml_media_type_is_refused_by_the_request_guard(live: LiveService) -> None:
    with live.client(ADMIN) as c:
        r = c.post("/v1/schedules", content=NIGHTS, headers={"Content-Type": "application/yaml"})
        assert r.status_code == 415 and "application/json" in r.json()["detail"]


def test_only_an_admin_changes_schedules_and_a_tenant_sees_its_queues_only(live: LiveService) -> None:
    with live.client(ADMIN) as admin, live.client(TENANT) as tenant, live.client(None) as anonymous:
        assert admin.post("/v1/schedules", content=NIGHTS, headers=YAML).status_code == 201
        assert admin.post("/v1/schedules", json=doc("batch-nights")).status_code == 201
        r = tenant.post("/v1/schedules", content=NIGHTS, headers=YAML)
        assert r.status_code == 403 and "admin" in r.json()["detail"]
        bad = tenant.post("/v1/schedules", content=b"spec: [unclosed", headers=YAML)
        assert bad.status_code == 403  # the token is checked before the body is read
        assert tenant.delete("/v1/schedules/training-nights").status_code == 403
        assert anonymous.get("/v1/schedules").status_code == 401
        assert [s["name"] for s in tenant.get("/v1/schedules").json()["items"]] == ["training-nights"]
        assert tenant.get("/v1/schedules/batch-nights").status_code == 404
        assert tenant.get("/v1/schedules/training-nights").status_code == 200


def test_schedules_survive_a_restart_and_show_in_metrics(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    with serve_in_thread(cfg) as first, first.client(ADMIN) as c:
        assert c.post("/v1/schedules", content=NIGHTS, headers=YAML).status_code == 201
        before = wait_for(lambda: c.get("/v1/schedules/training-nights").json()["lastFired"], what="in force")
    with serve_in_thread(cfg) as second, second.client(ADMIN) as c:
        got = c.get("/v1/schedules/training-nights").json()
        assert got["lastFired"] == before and len(got["history"]) == 1
        wait_for(lambda: (q := second.svc.ctx.runner.live.sched.queues.get("team-a")) and q.quota_gpus is not None)
        text = c.get("/metrics").text
        assert 'rackscale_schedule_next_fire_timestamp_seconds{schedule="training-nights"}' in text
        assert 'rackscale_schedule_fired_total{schedule="training-nights"} 0.0' in text  # re-applied, not fired
        assert len(c.get("/v1/schedules/training-nights").json()["history"]) == 1
