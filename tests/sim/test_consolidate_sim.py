"""Consolidation in the host and the simulator (the service runs the same host): a move is a preemption, with
its lost work counted, followed at once by a start elsewhere, and the gang starts in one rack at once.

Three racks of 2 nodes x 4 GPUs. At t=0 six 4-GPU jobs fill them; the short ones (a2, b2, c2) end at t=100::

    region-0
    ├── r000: n00 [aaaa] n01 [....]   a: 0 .. 10,000 s
    ├── r001: n00 [bbbb] n01 [....]   b: 0 .. 10,000 s
    └── r002: n00 [cccc] n01 [....]   c: 0 .. 10,000 s
    big (8 GPUs, one rack) arrives at t=200: 12 GPUs are free, 4 in each rack.

Without consolidation big waits until t=10,000; with it, one of a, b, c moves next to another (losing its
200 s since its start, on 4 GPUs) and big starts at t=200 in the rack it left.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from rackscale.host.changes import ChangeKind
from rackscale.host.host import ClusterHost
from rackscale.model import GPUCluster, JobSpec, Level, TopologyConstraint, training
from rackscale.scheduler.framework import PROFILES, Profile
from rackscale.sim import SimConfig, Simulator

RACK = TopologyConstraint(required=Level.RACK)
WITHOUT = replace(PROFILES["rackscale"], name="rackscale-no-consolidation", consolidate=False)


def cluster() -> GPUCluster:
    return GPUCluster.uniform(name="three", racks_per_region=3, nodes_per_rack=2, gpus_per_node=4)


def jobs() -> list[JobSpec]:
    out = []
    for r in "abc":
        out.append(training(r, 4, topology=RACK, duration_estimate_s=10_000.0, submit_time=0.0))
        out.append(training(f"{r}2", 4, topology=RACK, duration_estimate_s=100.0, submit_time=0.0))
    out.append(training("big", 8, topology=RACK, duration_estimate_s=1_000.0, submit_time=200.0))
    return out


@pytest.mark.parametrize(
    ("policy", "start"),
    [
        pytest.param("rackscale-consolidate", 200.0, id="consolidation-starts-it-at-once"),
        pytest.param(WITHOUT, 10_000.0, id="without-it-waits-for-a-rack-to-drain"),
    ],
)
def test_the_gang_starts_earlier_in_one_rack_with_consolidation(policy: str | Profile, start: float) -> None:
    r = Simulator(cluster(), jobs(), SimConfig(policy=policy)).run()
    big = r.jobs["big"]
    assert big.first_start == pytest.approx(start)
    assert big.layout is not None and big.layout.racks == 1
    assert all(j.status.value == "completed" for j in r.jobs.values())
    moved = [n for n in "abc" if r.jobs[n].restarts]
    if start == 200.0:
        assert len(moved) == 1 and r.kpis.preemptions == 1
        assert r.kpis.lost_gpu_hours * 3600 == pytest.approx(200 * 4)  # no checkpoint: its whole run so far
        assert r.jobs[moved[0]].first_start == 0.0  # restarted, not started anew
    else:
        assert moved == [] and r.kpis.preemptions == 0 and r.kpis.lost_gpu_hours == 0


def test_a_move_is_a_preemption_then_a_start_elsewhere_in_the_hosts_changes() -> None:
    host = ClusterHost(cluster(), policy="rackscale-consolidate")
    for j in jobs()[:-1]:
        host.submit(j)
    host.cycle(0.0)
    for name in ("a2", "b2", "c2"):
        host.finish(name, 100.0)
    host.cycle(100.0)
    host.submit(replace(jobs()[-1], queue="other"))  # another tenant's: the mover is not told its name
    changes = host.cycle(200.0)
    kinds = [(c.job, c.type) for c in changes]
    assert len(changes) == 3, kinds
    stop, again, big = changes
    assert stop.type is ChangeKind.PREEMPTED and again.type is ChangeKind.SCHEDULED and again.job == stop.job
    assert stop.message.startswith("preempted by a job of another queue (moved to rack(s) r00"), stop.message
    assert "big" not in stop.message, stop.message
    assert again.message.startswith("moved (consolidation) on"), again.message
    assert (big.job, big.type) == ("big", ChangeKind.SCHEDULED) and big.message.startswith("placed on")
    # The mover's work since its start is lost (the host's preemption path), and it runs again.
    assert host.kpi.lost_gpu_s == pytest.approx(200 * 4)
    assert stop.job in host.state.running and host.runs[stop.job].restarts == 1
    host.state.check_invariants()
