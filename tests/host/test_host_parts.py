"""Failed parts in the host (host/parts.py): a health report fails nodes and GPUs, the jobs on them stop and
go back to the queue with a PREEMPTED change (FAILED at the restart limit), a later report recovers them.

The cluster of every test (2 racks x 2 nodes x 4 GPUs)::

    r000: n0000 [....] n0001 [....]
    r001: n0002 [....] n0003 [....]
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from rackscale.host.changes import ChangeKind
from rackscale.host.host import ClusterHost, HostOptions
from rackscale.host.parts import NodeHealth, NodeState
from rackscale.host.runs import RunStatus
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobSpec, batch, training

CLUSTER = GPUCluster.uniform(name="parts", racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)
NODES = [n.name for n in CLUSTER.nodes]


def host(max_restarts: int | None = None) -> ClusterHost:
    return ClusterHost(CLUSTER, options=HostOptions(max_restarts=max_restarts))


def nodes_of(h: ClusterHost, job: str) -> list[str]:
    return sorted(CLUSTER.nodes[a.node].name for a in h.state.running[job].placement.allocs)


def started(h: ClusterHost, *specs: JobSpec, now: float = 0.0) -> None:
    for s in specs:
        h.submit(s)
    h.cycle(now)


@pytest.mark.parametrize(
    ("state", "stops"),
    [
        (NodeState.DOWN, True),
        (NodeState.FAIL, True),
        (NodeState.DRAIN, False),
        (NodeState.NOT_RESPONDING, False),
        (NodeState.TAINTED, False),
    ],
    ids=["down", "fail", "drain", "not-responding", "tainted"],
)
def test_a_gone_node_stops_its_jobs_a_closed_one_lets_them_run(state: NodeState, stops: bool) -> None:
    h = host()
    started(h, training("g", 8, gpus_per_worker=4, duration_estimate_s=1000))
    on = nodes_of(h, "g")
    changes = h.apply_health([NodeHealth(node=on[0], state=state, reason="Not responding")], now=100.0)
    if stops:
        assert [(c.job, c.type, c.reason) for c in changes] == [("g", ChangeKind.PREEMPTED, "NodeFailed")]
        assert changes[0].message.startswith(f"node {on[0]} {state.name} (Not responding)")
        assert "g" in h.pending and "g" not in h.state.running
        assert h.runs["g"].status is RunStatus.PENDING and h.runs["g"].restarts == 1
    else:
        assert changes == [] and nodes_of(h, "g") == on
    # Either way the node takes no new work: a 4-GPU job goes to one of the two other nodes... or waits.
    started(h, batch("b", gpus=4, duration_estimate_s=10), now=101.0)
    assert on[0] not in nodes_of(h, "b")


def test_the_stopped_gang_is_placed_elsewhere_and_the_node_comes_back() -> None:
    h = host()
    started(h, training("g", 8, gpus_per_worker=4, duration_estimate_s=1000))
    on = nodes_of(h, "g")
    h.apply_health([NodeHealth(node=on[0], state=NodeState.DOWN)], now=10.0)
    placed = h.cycle(11.0)
    assert [(c.job, c.type) for c in placed] == [("g", ChangeKind.SCHEDULED)]
    assert on[0] not in nodes_of(h, "g")
    assert h.state.failed_gpus_count == 4 and h.health_marks()[on[0]].down
    assert h.apply_health([], now=20.0) == []  # absent from the report: healthy again
    assert h.state.failed_gpus_count == 0 and h.health_marks() == {}
    assert not h.state.node_down[CLUSTER.nodes[NODES.index(on[0])].index]


def test_a_failed_gpu_stops_only_the_job_that_held_it() -> None:
    h = host()
    started(h, batch("a", gpus=2, duration_estimate_s=100), batch("b", gpus=2, duration_estimate_s=100))
    [na] = nodes_of(h, "a")
    [ga] = [a.gpus for a in h.state.running["a"].placement.allocs]
    changes = h.apply_health([NodeHealth(node=na, failed_gpus=(ga[0],), reason="XID 79")], now=5.0)
    assert [(c.job, c.type) for c in changes] == [("a", ChangeKind.PREEMPTED)]
    assert changes[0].message.startswith(f"GPU {ga[0]} of node {na} failed (XID 79)")
    assert "b" in h.state.running and h.state.failed_gpus_count == 1
    h.apply_health([NodeHealth(node=na, failed_gpus=(ga[0],))], now=6.0)  # the same report again: no change
    assert h.state.failed_gpus_count == 1
    h.apply_health([], now=7.0)
    assert h.state.failed_gpus_count == 0


def test_a_job_stopped_more_than_max_restarts_fails() -> None:
    h = host(max_restarts=0)
    started(h, batch("a", gpus=4, duration_estimate_s=100))
    [na] = nodes_of(h, "a")
    changes = h.apply_health([NodeHealth(node=na, state=NodeState.DOWN)], now=5.0)
    assert [(c.job, c.type, c.reason) for c in changes] == [("a", ChangeKind.FAILED, "RestartLimit")]
    assert "a" not in h.pending and "gave up" in changes[0].message


@pytest.mark.parametrize("on_preempt", [False, True], ids=["checkpoints", "checkpoint-on-preempt"])
def test_a_stopped_training_job_keeps_only_what_its_last_checkpoint_saved(on_preempt: bool) -> None:
    """A failed part gives no stop signal: even ``checkpointOnPreempt`` loses the work since the last
    periodic checkpoint (as in the simulator)."""
    h = host()
    spec = training("g", 4, gpus_per_worker=4, duration_estimate_s=10_000, checkpoint_interval_s=600)
    started(h, replace(spec, checkpoint_on_preempt=on_preempt))
    r = h.runs["g"]
    rate = r.rate
    [n] = nodes_of(h, "g")
    h.apply_health([NodeHealth(node=n, state=NodeState.DOWN)], now=1000.0)
    # 1000 s at ``rate``; the checkpoint at 600 s kept 600 s of it.
    assert r.done == pytest.approx(600 * rate)


def test_a_node_failed_by_someone_else_is_never_recovered_by_a_report() -> None:
    h = host()
    h.part_failed(node=NODES[0], now=0.0, why="operator")
    h.apply_health([NodeHealth(node=NODES[0], state=NodeState.DOWN)], now=1.0)
    h.apply_health([], now=2.0)
    assert h.state.node_down[0] and h.state.failed_gpus_count == 4


def test_unknown_nodes_are_ignored_and_bad_gpus_refused() -> None:
    h = host()
    assert h.apply_health([NodeHealth(node="nope", state=NodeState.DOWN)], now=0.0) == []
    with pytest.raises(ValueError, match="no GPU 9"):
        h.part_failed(node=NODES[0], gpus=[9], now=0.0, why="x")
    with pytest.raises(KeyError, match="nope"):
        h.part_recovered(node="nope", now=0.0)
