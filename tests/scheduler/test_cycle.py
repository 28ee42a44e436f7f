"""The cycle's structure: named actions in KAI-Scheduler's order, and the shape cache's key."""

from __future__ import annotations

import pytest

from rackscale.model import ClusterState, GPUCluster, Placement, Transaction, training
from rackscale.scheduler import PendingQueue, Profile, ResourceScheduler
from rackscale.scheduler.cycle import Attempt, Cycle, JobShape
from rackscale.scheduler.decisions import Placed, Resized, ResizeKind
from rackscale.scheduler.framework import CycleContext
from rackscale.scheduler.status import Reason


def test_the_actions_run_least_disruptive_first() -> None:
    assert [a.name for a in ResourceScheduler().actions] == [
        "allocate",
        "backfill",
        "lend",
        "reclaim",
        "shrink",
        "preempt",
    ]
    assert [a.name for a in ResourceScheduler(profile="rackscale-consolidate").actions][-1] == "consolidate"
    assert [a.name for a in ResourceScheduler(profile="first-fit").actions] == ["allocate", "backfill", "preempt"]


def test_a_profile_without_victims_has_no_preempt_action() -> None:
    sched = ResourceScheduler(profile=Profile(name="no-preemption", victims=""))
    assert [a.name for a in sched.actions] == ["allocate", "backfill"]


def test_jobs_that_differ_only_in_size_and_name_share_a_shape() -> None:
    a = Attempt(training("a", 8), frozenset(), False, True)
    b = Attempt(training("b", 16, submit_time=5.0), frozenset(), False, True)
    assert a.shape == b.shape and hash(a.shape) == hash(b.shape)
    fenced = Attempt(training("c", 8), frozenset({1}), True, True)
    no_split = Attempt(training("d", 8), frozenset(), False, False)
    higher = Attempt(training("e", 8, priority=5), frozenset(), False, True)
    assert len({a.shape, fenced.shape, no_split.shape, higher.shape}) == 4


def test_a_shape_is_immutable_and_named() -> None:
    shape = Attempt(training("a", 8), frozenset(), True, True).shape
    with pytest.raises(AttributeError):
        shape.fenced = False  # type: ignore[misc]
    assert isinstance(shape, JobShape) and shape.fenced and shape.may_split and shape.may_preempt


# Admission remembers, per queued job and across cycles, its static filters' answer and its shapes
# (admission._JobMemo). What it remembers must follow the job's spec and the cluster, never its name alone.
#
#   4-GPU nodes:  r000: n00 [....] n01 [....]      8-GPU nodes:  r000: n00 [........] n01 [........]


def _small() -> GPUCluster:
    return GPUCluster.uniform(racks_per_region=1, nodes_per_rack=2, gpus_per_node=4)


def _wide() -> GPUCluster:
    return GPUCluster.uniform(racks_per_region=1, nodes_per_rack=2, gpus_per_node=8)


def test_a_job_queued_again_under_its_name_with_another_spec_is_read_again() -> None:
    sched, state = ResourceScheduler(), ClusterState(_small())
    too_wide = training("a", 8, gpus_per_worker=8)  # a worker larger than any node: refused for good
    first = sched.schedule(state, PendingQueue([too_wide]), 0.0)
    assert not first.placed and first.pending[0].status.reason == Reason.NODE_TOO_SMALL
    fits = training("a", 8, gpus_per_worker=4)  # the same name, a spec that fits
    second = sched.schedule(state, PendingQueue([fits]), 1.0)
    assert [p.spec.name for p in second.placed] == ["a"]


def test_the_static_answers_are_forgotten_on_another_cluster() -> None:
    sched, job = ResourceScheduler(), training("a", 8, gpus_per_worker=8)
    queue = PendingQueue([job])  # one queue kept across cycles, as the host keeps it
    assert not sched.schedule(ClusterState(_small()), queue, 0.0).placed
    assert [p.spec.name for p in sched.schedule(ClusterState(_wide()), queue, 1.0).placed] == ["a"]


def test_the_per_job_memo_stays_near_the_queue_size() -> None:
    sched, state = ResourceScheduler(), ClusterState(_small())
    for i in range(6):  # 6 cycles of 600 new jobs each, none of which can run (workers wider than a node)
        queue = PendingQueue([training(f"j{i}-{k}", 8, gpus_per_worker=8) for k in range(600)])
        sched.schedule(state, queue, float(i))
        assert len(sched.admission._job_memo) <= 2 * len(queue) + 1024 + len(queue)


def test_protected_is_every_job_placed_or_resized_so_far_however_often_it_is_asked() -> None:
    # The preemption step asks for the jobs it may not stop after each placement it follows; the answer is
    # extended from the last one, so a stale answer (a job placed or resized since) would let it stop a job
    # the cycle has just decided to run.
    state = ClusterState(_small())
    cycle = Cycle(
        tx=Transaction(state),
        queue=PendingQueue([]),
        ctx=CycleContext(now=0.0, queues={}, models=state.cluster.gpu_models),
        reservation=None,
        min_demand=0,
    )
    assert cycle.protected() == frozenset()

    def placed(name: str) -> Placed:
        return Placed(training(name, 1), Placement(name, (), 1), None)

    cycle.placed.append(placed("a"))
    assert cycle.protected() == {"a"}
    cycle.placed += [placed("b"), placed("c")]
    assert cycle.protected() == {"a", "b", "c"}
    cycle.resized["g"] = Resized(training("g", 2), Placement("g", (), 2), 4, ResizeKind.SHRUNK, "")
    assert cycle.protected() == {"a", "b", "c", "g"}
    assert cycle.protected() == {"a", "b", "c", "g"}  # asked again, nothing new
    cycle.placed.append(placed("d"))
    cycle.resized["h"] = Resized(training("h", 2), Placement("h", (), 2), 1, ResizeKind.GROWN, "")
    assert cycle.protected() == {"a", "b", "c", "d", "g", "h"}
