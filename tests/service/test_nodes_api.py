"""Cordon, drain and uncordon through the real service (HTTP, runner thread, SQLite store), and across a
restart. The cluster is 2 NVL72 racks (r000, r001: 18 nodes x 4 GPUs each); one 8-GPU job runs in one::

    r000 [jjjjjjjj......]  <- drained: the job is stopped after the grace, requeued, and runs in r001
    r001 [..............]
"""

from __future__ import annotations

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


def config(tmp_path: Path) -> ServiceConfig:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    return ServiceConfig(
        data_dir=tmp_path / "data", cluster=small_cluster(2), speed=1000.0, interval_s=0.01, tokens_file=tokens
    )


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveService]:
    with serve_in_thread(config(tmp_path)) as svc:
        yield svc


def running_rack(c: Any, name: str) -> str:
    job = wait_for(lambda: (j := c.get(f"/v1/jobs/{name}").json())["status"] == "running" and j, what=name)
    assert isinstance(job, dict)
    racks = {s["rack"] for s in job["placement"]["nodes"]}
    assert len(racks) == 1
    return str(racks.pop())


def nodes_of(c: Any, rack: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = c.get("/v1/nodes", params={"rack": rack}).json()["items"]
    return items


def test_drain_a_rack_moves_the_job_and_survives_a_restart(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    with serve_in_thread(cfg) as svc, svc.client(ADMIN) as c:
        doc = {"name": "j", "kind": "training", "gpus": 8, "durationEstimateSeconds": 1e7, "queue": "team-a"}
        assert c.post("/v1/jobs", json=doc).status_code == 201
        rack = running_rack(c, "j")
        r = c.post(f"/v1/racks/{rack}/drain", json={"reason": "firmware", "grace": "30s"})
        assert r.status_code == 200, r.text
        assert {i["mode"] for i in r.json()["items"]} == {"draining"} and len(r.json()["items"]) == 18
        # 30 s of service time at 1000x: the job is stopped, requeued and runs in the other rack.
        other = wait_for(
            lambda: (j := c.get("/v1/jobs/j").json())["restarts"] == 1 and j["status"] == "running" and j,
            what="the drained job to run again",
        )
        assert isinstance(other, dict)
        assert {s["rack"] for s in other["placement"]["nodes"]} == {"r001" if rack == "r000" else "r000"}
        events = c.get("/v1/jobs/j/events").json()["items"]
        assert any(e["type"] == "preempted" and e["message"].startswith("drained: firmware") for e in events)
        drained = nodes_of(c, rack)
        assert {n["mode"] for n in drained} == {"drained"} and {n["reason"] for n in drained} == {"firmware"}
        assert all(n["failed"] == 0 for n in drained)  # out of service, not failed
        metrics = c.get("/metrics").text
        assert "rackscale_nodes_cordoned 18.0" in metrics
    with serve_in_thread(cfg) as svc, svc.client(ADMIN) as c:  # a restart: the drain holds
        assert {n["mode"] for n in nodes_of(c, rack)} == {"drained"}
        assert c.post(f"/v1/racks/{rack}/uncordon").status_code == 200
        wait_for(lambda: all(n["mode"] is None for n in nodes_of(c, rack)), what="uncordon")
    with serve_in_thread(cfg) as svc, svc.client(ADMIN) as c:
        assert all(n["mode"] is None for n in nodes_of(c, rack))


def test_cordon_keeps_the_job_and_a_new_one_goes_elsewhere(live: LiveService) -> None:
    with live.client(ADMIN) as c:
        assert (
            c.post(
                "/v1/jobs", json={"name": "a", "kind": "training", "gpus": 4, "durationEstimateSeconds": 1e7}
            ).status_code
            == 201
        )
        rack = running_rack(c, "a")
        assert c.post(f"/v1/racks/{rack}/cordon", json={"reason": "watch"}).status_code == 200
        wait_for(lambda: {n["mode"] for n in nodes_of(c, rack)} == {"cordoned"}, what="cordon")
        assert (
            c.post(
                "/v1/jobs", json={"name": "b", "kind": "training", "gpus": 4, "durationEstimateSeconds": 1e7}
            ).status_code
            == 201
        )
        assert running_rack(c, "b") != rack
        assert c.get("/v1/jobs/a").json()["status"] == "running"


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v1/nodes/no-such-node/cordon", None, 404),
        ("/v1/racks/no-such-rack/drain", None, 404),
        ("/v1/nodes/r000-n00/explode", None, 422),
        ("/v1/nodes/r000-n00/drain", {"grace": "soon"}, 422),
        ("/v1/nodes/r000-n00/drain", {"grace": -5}, 422),
        ("/v1/nodes/r000-n00/drain", {"grace": "9999d"}, 422),
        ("/v1/nodes/r000-n00/cordon", {"grace": "10m"}, 422),
        ("/v1/nodes/r000-n00/cordon", {"reason": "x" * 201}, 422),
        ("/v1/nodes/r000-n00/cordon", {"reason": 5, "extra": 1}, 422),
        ("/v1/nodes/r000-n00/cordon", [1, 2], 422),
        ("/v1/nodes/" + "n" * 5000 + "/cordon", None, 404),
        ("/v1/nodes/r000-n00/cordon", {"reason": "a\u0000b"}, 422),
        ("/v1/nodes/r000-n00/cordon", {"reason": "a\u202eb"}, 422),
        ("/v1/nodes/r000-n00/cordon", {"reason": "a\x1b[31mb"}, 422),
        ("/v1/nodes/r000-n00/drain", {"grace": "1\u0000m"}, 422),
        ("/v1/nodes/r000-n00/cordon", {"reason": {"a": [[[[[[[[1]]]]]]]]}}, 422),
    ],
    ids=[
        "node",
        "rack",
        "verb",
        "grace-text",
        "grace-negative",
        "grace-huge",
        "grace-on-cordon",
        "long-reason",
        "extra-field",
        "not-an-object",
        "long-name",
        "nul-reason",
        "bidi-reason",
        "control-reason",
        "nul-grace",
        "deep-reason",
    ],
)
def test_bad_requests_are_clear_4xx(live: LiveService, path: str, body: Any, status: int) -> None:
    with live.client(ADMIN) as c:
        r = c.post(path, json=body) if body is not None else c.post(path)
        assert r.status_code == status, r.text
        assert "detail" in r.json()


@pytest.mark.parametrize("token", [TENANT, None, "wrong-token-0123456789"], ids=["tenant", "none", "unknown"])
def test_only_an_admin_may_cordon(live: LiveService, token: str | None) -> None:
    with live.client(token) as c:
        r = c.post("/v1/racks/r000/cordon", json={"reason": "mine now"})
        assert r.status_code == (403 if token == TENANT else 401)
    with live.client(ADMIN) as c:
        assert all(n["mode"] is None for n in nodes_of(c, "r000"))
