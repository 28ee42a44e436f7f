"""The collector's shortcuts for big clusters give the values of the long way: per-rack uplink utilisation
from the racks that carry flows only (the rest read 0), pending counts and ages per queue from the queue's
per-priority lists, and inference capacities kept while a service's spec and placement stay the same.

Three racks; a 144-GPU LLM gang over two of them, the third idle (the service models no RDMA flow for
this gang, so every uplink reads 0 both ways: loaded uplinks are covered by the monitor's own tests)::

    r000 [gang ......]   r001 [gang ......]   r002 [          ]   pending: team-x, team-y (too big to fit)
"""

from __future__ import annotations

import math

from tests.service.conftest import LiveService, serve_in_thread, small_cluster, wait_for

from rackscale.service.app import ServiceConfig
from rackscale.service.metrics import StateCollector

LONG = 1e7


def _samples(collector: StateCollector, name: str) -> dict[tuple[str, ...], float]:
    for fam in collector.collect():
        if fam.name == name:
            return {tuple(s.labels.values()): s.value for s in fam.samples}
    raise AssertionError(f"{name} not collected")


def test_shortcuts_agree_with_the_long_way(tmp_path: object) -> None:
    cfg = ServiceConfig(data_dir=tmp_path / "data", cluster=small_cluster(3), speed=1000.0, interval_s=0.01)  # type: ignore[operator]
    with serve_in_thread(cfg) as svc:
        _check(svc)


def _check(svc: LiveService) -> None:
    c = svc.client()
    gang = {
        "name": "gang",
        "kind": "training",
        "gpus": 144,
        "gpusPerWorker": 4,
        "durationEstimateSeconds": LONG,
        "llm": {"model": "llama-3.1-70b", "tp": 4},
    }
    assert c.post("/v1/jobs", json=gang).status_code == 201, "gang"
    chat = {"name": "chat", "kind": "inference", "replicas": 2, "gpusPerReplica": 2}
    assert c.post("/v1/jobs", json=chat).status_code == 201
    wait_for(lambda: c.get("/v1/cluster").json()["running"] == 2, what="gang and chat running")
    big = {"kind": "training", "gpus": 216, "durationEstimateSeconds": LONG}  # never fits beside the gang
    for name, queue, prio in (("x0", "team-x", 0), ("x2", "team-x", 0), ("x1", "team-x", 0), ("y0", "team-y", 0)):
        assert c.post("/v1/jobs", json=big | {"name": name, "queue": queue, "priority": prio}).status_code == 201
    wait_for(lambda: c.get("/v1/cluster").json()["pending"] == 4, what="all four jobs waiting")

    collector = StateCollector(svc.svc.ctx.runner)
    uplinks = _samples(collector, "rackscale_uplink_utilization_ratio")
    pending = _samples(collector, "rackscale_pending_jobs")
    oldest = _samples(collector, "rackscale_oldest_pending_job_age_seconds")
    with svc.svc.ctx.runner.reading() as live:
        now = svc.svc.ctx.runner.clock.now()
        long_way = {(r.name,): live.monitor.uplink_utilisation(r.index) for r in live.cluster.racks}
        counts: dict[str, int] = {}
        first: dict[str, float] = {}
        for spec in live.pending:
            counts[spec.queue] = counts.get(spec.queue, 0) + 1
            first[spec.queue] = min(first.get(spec.queue, math.inf), spec.submit_time)
    assert uplinks == long_way
    assert pending == {(q,): n for q, n in counts.items()}
    assert len(pending) >= 2, pending  # several queues (and priorities) waiting
    assert oldest.keys() == {(q,) for q in first}
    for (q,), age in oldest.items():
        assert age >= now - first[q] - 1.0  # the clock moved on between the scrape and the walk

    # A capacity is kept while the service's spec and placement are the same objects; a new one is computed.
    tps = _samples(collector, "rackscale_inference_tokens_per_second")
    spec, placement, capacity = collector.capacities["chat"]
    assert tps[("chat",)] <= capacity
    collector.capacities["chat"] = (spec, placement, capacity * 1000)  # a kept value is what is served
    assert _samples(collector, "rackscale_inference_tokens_per_second")[("chat",)] >= tps[("chat",)]
    collector.capacities["chat"] = (object(), placement, -1.0)  # another spec: computed again
    assert _samples(collector, "rackscale_inference_tokens_per_second") == tps
    assert collector.capacities["chat"][2] == capacity
    assert c.delete("/v1/jobs/chat").status_code == 200
    wait_for(lambda: c.get("/v1/jobs/chat").json()["status"] == "cancelled", what="chat cancelled")
    # The store says cancelled as the API commits it; the live model lets the service go at the runner's next step.
    wait_for(lambda: c.get("/v1/cluster").json()["running"] == 1, what="chat gone from the live model")
    _samples(collector, "rackscale_inference_tokens_per_second")
    assert "chat" not in collector.capacities
