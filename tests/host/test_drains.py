"""Drains under the host (either clock): cordon, the grace, then stop-and-requeue with the work since the
last checkpoint lost (none with ``checkpointOnPreempt``), and uncordon.

The cluster is 2 racks of 2 nodes of 4 GPUs; a 4-GPU job ``a`` runs on one node (N), which is drained::

    region-0
    ├── r000: N [aaaa] n [....]
    └── r001: n [....] n [....]
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from rackscale.host.changes import ChangeKind
from rackscale.host.drains import DrainError, HoldVerb, NodeHold, NodeMode, merged
from rackscale.host.host import ClusterHost
from rackscale.host.runs import RunStatus
from rackscale.model import GPUCluster, JobSpec, training


def started(spec: JobSpec) -> tuple[ClusterHost, int]:
    host = ClusterHost(GPUCluster.uniform(racks_per_region=2, nodes_per_rack=2, gpus_per_node=4))
    host.submit(spec)
    host.cycle(0.0)
    rj = host.state.running[spec.name]
    (node,) = {a.node for a in rj.placement.allocs}
    return host, node


JOB = training("a", 4, checkpoint_interval_s=100.0, duration_estimate_s=10_000.0)


@pytest.mark.parametrize(
    ("spec", "lost_s"),
    [(JOB, 50.0), (replace(JOB, checkpoint_on_preempt=True), None)],
    ids=["checkpoints-every-100s", "checkpoint-on-preempt"],
)
def test_drain_stops_after_the_grace_and_requeues(spec: JobSpec, lost_s: float | None) -> None:
    host, node = started(spec)
    told = host.drain([node], now=200.0, reason="firmware", grace_s=50.0)  # told (a NOTICE); still running
    assert [(c.job, c.type) for c in told] == [("a", ChangeKind.NOTICE)]
    assert host.node_mode(node) is NodeMode.DRAINING
    assert host.drain_notices() == {"a": "firmware"}
    host.cycle(249.0)  # within the grace: it goes on
    assert "a" in host.state.running
    changes = host.cycle(250.0)
    stop = changes[0]
    assert (stop.job, stop.type, stop.reason) == ("a", ChangeKind.PREEMPTED, "Drained")
    assert stop.message.startswith("drained: firmware")
    # Requeued and placed again in the same cycle, on another node.
    placed = [c for c in changes if c.type is ChangeKind.SCHEDULED]
    assert [c.job for c in placed] == ["a"]
    assert node not in {a.node for a in host.state.running["a"].placement.allocs}
    assert host.node_mode(node) is NodeMode.DRAINED
    assert host.runs["a"].restarts == 1 and host.drain_stops == 1
    assert host.kpi.preemptions == 0  # no job asked for its GPUs
    # 250 s run, a checkpoint every 100 s: 50 s of 4 GPUs lost; on the signal: the save only.
    want = (lost_s if lost_s is not None else min(50.0, host.options.defaults.save_s)) * 4
    assert host.kpi.lost_gpu_s == pytest.approx(want)
    host.state.check_invariants()


def test_grace_zero_stops_now_and_an_empty_node_is_drained_at_once() -> None:
    host, node = started(JOB)
    other = next(n for n in range(4) if n != node)
    changes = host.drain([node, other], now=10.0, reason="reboot", grace_s=0.0)
    assert [(c.job, c.type) for c in changes] == [("a", ChangeKind.PREEMPTED)]
    assert host.runs["a"].status is RunStatus.PENDING
    assert host.node_mode(node) is NodeMode.DRAINED and host.node_mode(other) is NodeMode.DRAINED
    host.state.check_invariants()


def test_uncordon_in_the_grace_calls_the_drain_off() -> None:
    host, node = started(JOB)
    host.drain([node], now=10.0, reason="oops", grace_s=60.0)
    host.uncordon([node], now=20.0)
    assert host.node_mode(node) is None
    assert host.cycle(100.0) == [] and host.runs["a"].status is RunStatus.RUNNING
    assert host.state.node_whole[node] == 0 and host.state.cordoned_idle_count == 0
    host.state.check_invariants()


def test_cordon_keeps_the_job_and_the_node_gets_no_new_one() -> None:
    host, node = started(JOB)
    host.cordon(range(4), now=5.0, reason="all")
    host.submit(training("b", 1))
    host.cycle(6.0)
    assert "b" not in host.state.running and "a" in host.state.running
    assert host.node_mode(node) is NodeMode.CORDONED
    host.uncordon([3], now=7.0)
    host.cycle(7.0)
    assert {a.node for a in host.state.running["b"].placement.allocs} == {3}


@pytest.mark.parametrize(
    ("old", "verb", "now", "grace", "want"),
    [
        (None, HoldVerb.CORDON, 5.0, 0.0, NodeHold(reason="r", since=5.0)),
        (NodeHold(reason="old", since=1.0), HoldVerb.CORDON, 5.0, 0.0, NodeHold(reason="old", since=1.0)),
        (NodeHold(reason="old", since=1.0), HoldVerb.DRAIN, 5.0, 10.0, NodeHold(reason="r", since=1.0, deadline=15.0)),
        (
            NodeHold(reason="old", since=1.0, deadline=8.0),
            HoldVerb.DRAIN,
            5.0,
            10.0,
            NodeHold(reason="old", since=1.0, deadline=8.0),
        ),
        (
            NodeHold(reason="old", since=1.0, deadline=8.0),
            HoldVerb.CORDON,
            5.0,
            0.0,
            NodeHold(reason="old", since=1.0, deadline=8.0),
        ),
        (NodeHold(reason="old", since=1.0), HoldVerb.UNCORDON, 5.0, 0.0, None),
    ],
    ids=["cordon", "cordon-again", "drain-a-cordoned", "drain-again-keeps-sooner", "cordon-a-draining", "uncordon"],
)
def test_merged(old: NodeHold | None, verb: HoldVerb, now: float, grace: float, want: NodeHold | None) -> None:
    assert merged(old, verb, now=now, reason="r", grace_s=grace) == want


@pytest.mark.parametrize("grace", [-1.0, float("inf"), float("nan")], ids=["negative", "inf", "nan"])
def test_bad_grace_is_refused(grace: float) -> None:
    with pytest.raises(DrainError):
        merged(None, HoldVerb.DRAIN, now=0.0, reason="r", grace_s=grace)
