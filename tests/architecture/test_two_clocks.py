"""One engine, two clocks: a workload replayed through the simulator (virtual clock) and through the service
(its runner, store and simulated backend, with a clock the test moves by hand) gets the same decisions, the
same job ends and the same KPIs — because both are the same host (rackscale.host) with a different caller.

The cluster (3 NVLink racks of 4 nodes x 4 GPUs, 48 GPUs):

    rack r000 (16 GPUs)     rack r001 (16 GPUs)     rack r002 (16 GPUs)
    +-----------------+     +-----------------+     +-----------------+
    | n00 n01 n02 n03 |     | n00 n01 n02 n03 |     | n00 n01 n02 n03 |
    +--------+--------+     +--------+--------+     +--------+--------+
      one RDMA uplink per rack (so two cross-rack gangs oversubscribe the one they share)

The workload makes each mechanism happen at least once (the test checks it did): two gangs too big for a
rack that cross the uplinks of the rack they share (each one's speed depends on the other: contention), a
whole-cluster gang that waits with a reservation while a small job runs in the gap, a high-priority gang
that preempts (the victim restarts from scratch), and a job that can never fit (it fails with the reason).
Not covered here: autoscaling, failures of parts and drains (each has its own tests through both callers:
tests/host, tests/service/test_runner_health.py, tests/service/test_nodes_api.py, tests/sim).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.service.conftest import HandClock

from rackscale.backends.sim import SimBackend
from rackscale.host.changes import Change, ChangeKind
from rackscale.model.specs import job_from_dict
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobSpec
from rackscale.service.live import LiveCluster
from rackscale.service.runner import Runner, spec_of
from rackscale.service.store import Store
from rackscale.sim.records import SimConfig
from rackscale.sim.simulator import Simulator

HEAVY = {"bytesPerStep": 4.0e10, "computeSecondsPerStep": 0.5}

# (submit time, job document): the same documents go to both clocks.
WORKLOAD: list[tuple[float, dict[str, Any]]] = [
    (0.0, {"name": "x20", "kind": "training", "gpus": 20, "durationEstimateSeconds": 900, "comm": HEAVY}),
    (0.0, {"name": "y20", "kind": "training", "gpus": 20, "durationEstimateSeconds": 700, "comm": HEAVY}),
    (1.0, {"name": "p6", "kind": "training", "gpus": 6, "durationEstimateSeconds": 2000}),
    (2.0, {"name": "whole", "kind": "training", "gpus": 48, "durationEstimateSeconds": 400}),
    (3.0, {"name": "short", "kind": "batch", "tasks": 1, "gpus": 2, "durationEstimateSeconds": 100}),
    (300.0, {"name": "never", "kind": "batch", "tasks": 1, "gpus": 8, "durationEstimateSeconds": 10}),
    (
        400.0,
        {"name": "urgent", "kind": "training", "gpus": 16, "priority": 1000, "durationEstimateSeconds": 200},
    ),
    (900.0, {"name": "late", "kind": "training", "gpus": 12, "durationEstimateSeconds": 500}),
]


def cluster() -> GPUCluster:
    return GPUCluster.uniform(racks_per_region=3, nodes_per_rack=4, gpus_per_node=4, uplinks_per_rack=1)


def specs() -> list[JobSpec]:
    return [replace(job_from_dict({**doc, "queue": "q"}), submit_time=t) for t, doc in WORKLOAD]


class RecordingSimulator(Simulator):
    """The simulator, keeping the changes its host reports (it has no use for them itself)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log: list[Change] = []

    def cycle(self, now: float) -> list[Change]:
        out = super().cycle(now)
        self.log += out
        return out

    def finish(self, name: str, now: float, **kwargs: Any) -> Change | None:
        ch = super().finish(name, now, **kwargs)
        if ch is not None:
            self.log.append(ch)
        return ch


def decisions(changes: list[Change]) -> list[tuple[float, str, ChangeKind, Any]]:
    """What was decided, when, for whom, and where (the waiting reasons are the service's alone)."""
    return [
        (round(c.time, 6), c.job, c.type, c.placement)
        for c in changes
        if c.type
        in (ChangeKind.SCHEDULED, ChangeKind.PREEMPTED, ChangeKind.RESIZED, ChangeKind.COMPLETED, ChangeKind.FAILED)
    ]


def run_service(
    tmp_path: Path, workload: list[tuple[float, dict[str, Any]]] = WORKLOAD
) -> tuple[list[Change], dict[str, tuple[str, float | None]], LiveCluster, float]:
    """The workload through the service: runner, SQLite store and simulated backend, the clock moved by hand
    from each arrival or backend end to the next."""
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    backend = SimBackend(cluster())
    clock = HandClock()
    live = LiveCluster(cluster())
    runner = Runner(live, store, backend, clock)  # type: ignore[arg-type]
    runner.recover()
    arrivals = sorted(workload, key=lambda x: x[0])
    committed: list[Change] = []
    i = 0
    while True:
        ends = backend.next_end()
        candidates = [t for t in (arrivals[i][0] if i < len(arrivals) else None, ends) if t is not None]
        if not candidates:
            break
        clock.t = min(candidates)
        while i < len(arrivals) and arrivals[i][0] == clock.t:
            doc = {**arrivals[i][1], "queue": "q"}
            row = store.insert_job(
                name=doc["name"], queue="q", kind=doc["kind"], gpus=0, priority=0, doc=doc, submitted=clock.t
            )
            runner.submitted(spec_of(row), row.seq)
            i += 1
        committed += runner.step()
    ended = {r.name: (str(r.status), r.ended) for r in store.jobs(limit=1000)}
    store.close()
    return committed, ended, live, clock.t


def test_the_simulator_and_the_service_decide_end_and_account_alike(tmp_path: Path) -> None:
    sim = RecordingSimulator(cluster(), specs(), SimConfig(record_series=False))
    result = sim.run()
    committed, ended, live, last = run_service(tmp_path)

    # The same decisions, at the same instants, on the same GPUs.
    assert decisions(committed) == decisions(sim.log)
    # The same ends: every job completed or failed at the same time.
    sim_ends = {n: (str(r.status), round(r.end or -1.0, 6)) for n, r in result.jobs.items()}
    svc_ends = {n: (st, round(e if e is not None else -1.0, 6)) for n, (st, e) in ended.items()}
    assert svc_ends == sim_ends
    # The same KPIs (the service's accumulator is the simulator's; floats summed over the same intervals).
    start = min(t for t, _ in WORKLOAD)
    kpis = live.kpi.kpis(
        makespan_s=last - start,
        cluster_gpus=live.cluster.total_gpus,
        price_per_gpu_hour=live.cluster.pricing.per_gpu_hour,
    )
    for key, value in result.kpis.items():
        if key == "events":
            continue  # the simulator's own count of heap events
        assert (kpis[key] is None) == (value is None), key
        if value is not None:
            assert kpis[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key

    # The workload did exercise what it claims to.
    kinds = {(c.job, c.type) for c in sim.log}
    assert ("x20", ChangeKind.PREEMPTED) in kinds and ("never", ChangeKind.FAILED) in kinds
    racks_of = {
        c.job: {sim.cluster.nodes[a.node].rack for a in c.placement.allocs}
        for c in sim.log
        if c.type is ChangeKind.SCHEDULED and c.placement is not None
    }
    assert racks_of["x20"] & racks_of["y20"], "two cross-rack gangs share a rack's uplinks"
    assert len(racks_of["x20"]) == len(racks_of["y20"]) == 2
    started = {c.job: c.time for c in sim.log if c.type is ChangeKind.SCHEDULED}
    assert started["short"] < started["whole"], "a later, smaller job ran while the older gang waited"
    assert result.kpis["rdma_bytes"] and result.kpis["preemptions"] == 1
