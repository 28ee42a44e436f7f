"""A placer's bug is the job's ``Code.ERROR``, never "InsufficientGPUs", and never the cycle's end.

A placer is a plugin. One that raises, or returns slices the state refuses (a GPU that is taken, a node
the cluster does not have), gives that job ``Status(Code.ERROR, Reason.INTERNAL_ERROR, ...)``: it stays
pending, nobody is preempted for it, no reservation is planned for it, whatever the placer changed is
rolled back, and the other jobs of the cycle are placed as if nothing happened. Each test builds a
profile around a deliberately broken placer that is wrong for the job named ``bad`` only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from builders import ClusterBuilder, placed_names, snapshot

from rackscale.model import NodeAlloc, training
from rackscale.model.view import StateView
from rackscale.scheduler import Code, Profile, Reason, ResourceScheduler
from rackscale.scheduler.framework import PLACERS
from rackscale.scheduler.placement.request import GroupRequest
from rackscale.scheduler.placement.topology_pack import TopologyPack

Breakage = Callable[[StateView, GroupRequest, list[NodeAlloc] | None], list[NodeAlloc] | None]


class BrokenForOneJob:
    """TopologyPack, except for job ``bad``: there ``breakage`` decides what comes back."""

    name = "broken"

    def __init__(self, breakage: Breakage) -> None:
        self.inner = TopologyPack()
        self.breakage = breakage
        self.calls: list[str] = []

    def place(self, state: StateView, req: GroupRequest) -> list[NodeAlloc] | None:
        self.calls.append(req.job)
        got = self.inner.place(state, req)
        return self.breakage(state, req, got) if req.job == "bad" else got


def _raises(state: StateView, req: GroupRequest, got: list[NodeAlloc] | None) -> list[NodeAlloc] | None:
    raise ZeroDivisionError("a bug in the scorer")


def _taken_gpu(state: StateView, req: GroupRequest, got: list[NodeAlloc] | None) -> list[NodeAlloc] | None:
    return [NodeAlloc(0, (0,))]  # held by "busy"


def _no_such_node(state: StateView, req: GroupRequest, got: list[NodeAlloc] | None) -> list[NodeAlloc] | None:
    return [NodeAlloc(len(state.cluster.nodes), (0,))]


def _negative_gpu(state: StateView, req: GroupRequest, got: list[NodeAlloc] | None) -> list[NodeAlloc] | None:
    return [NodeAlloc(2, (-1,))]  # would wrap to the node's last GPU


def _not_slices(state: StateView, req: GroupRequest, got: list[NodeAlloc] | None) -> list[NodeAlloc] | None:
    return [object()]  # type: ignore[list-item]


def _second_group_refused(state: StateView, req: GroupRequest, got: list[NodeAlloc] | None) -> list[NodeAlloc] | None:
    """Replicas are one group each: the first is fine (and admitted), the second names a held GPU."""
    return got if not state.running.get("bad") else [NodeAlloc(0, (0,))]


BREAKAGES = [
    pytest.param(_raises, "raised ZeroDivisionError: a bug in the scorer", id="placer-raises"),
    pytest.param(_taken_gpu, "returned an invalid placement", id="a-gpu-that-is-taken"),
    pytest.param(_no_such_node, "returned an invalid placement", id="a-node-the-cluster-lacks"),
    pytest.param(_negative_gpu, "returned an invalid placement", id="a-negative-gpu-index"),
    pytest.param(_not_slices, "returned an invalid placement", id="not-slices-at-all"),
]


@pytest.fixture
def with_placer(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[BrokenForOneJob], Profile]]:
    """Register a broken placer (for this test only) and give the profile that uses it."""

    def use(placer: BrokenForOneJob) -> Profile:
        monkeypatch.setitem(PLACERS, placer.name, lambda seed: placer)
        return Profile(name="broken", placer=placer.name)

    yield use


def busy_cluster() -> ClusterBuilder:
    # r000: n00 [xxxx] n01 [....]    "busy", priority 0, preemptible
    # r001: n00 [....] n01 [....]
    return ClusterBuilder().racks(2).nodes_per_rack(2).gpus_per_node(4).with_running("busy", gpus=4, rack=0)


@pytest.mark.parametrize(("breakage", "says"), BREAKAGES)
def test_a_broken_placement_is_the_jobs_internal_error_and_the_cycle_goes_on(
    with_placer: Callable[[BrokenForOneJob], Profile], breakage: Breakage, says: str
) -> None:
    state = busy_cluster().build()
    placer = BrokenForOneJob(breakage)
    sched = ResourceScheduler(profile=with_placer(placer))
    before = snapshot(state)
    jobs = [
        training("first", 2, priority=5),
        training("bad", 2, priority=5, submit_time=1.0),
        training("after", 2, priority=5, submit_time=2.0),
    ]
    d = sched.schedule(state, jobs, 0.0)
    assert snapshot(state) == before, "the broken placement was not rolled back"
    state.check_invariants()
    assert placed_names(d) == ["first", "after"]  # the cycle went on past the bad job
    st = d.pending_status("bad")
    assert st is not None
    assert (st.code, st.reason, st.plugin) == (Code.ERROR, Reason.INTERNAL_ERROR, "broken")
    assert says in st.message and "'bad'" in st.message
    assert d.preemptions == ()  # a bug is no reason to evict "busy", though "bad" outranks it
    assert d.reservation is None  # nor to hold racks for the job
    assert placer.calls.count("bad") == 1


def test_a_refused_later_group_rolls_back_the_groups_admitted_before_it(
    with_placer: Callable[[BrokenForOneJob], Profile],
) -> None:
    """An inference job's replicas are placed group by group: the refusal of the second must undo the first."""
    from rackscale.model import inference

    state = busy_cluster().build()
    sched = ResourceScheduler(profile=with_placer(BrokenForOneJob(_second_group_refused)))
    before = snapshot(state)
    d = sched.schedule(state, [inference("bad", replicas=2, gpus_per_replica=1), training("after", 2)], 0.0)
    assert snapshot(state) == before
    assert placed_names(d) == ["after"]
    st = d.pending_status("bad")
    assert st is not None and st.code is Code.ERROR


def test_the_job_of_an_internal_error_is_tried_again_next_cycle(
    with_placer: Callable[[BrokenForOneJob], Profile],
) -> None:
    failures = iter([True])  # the bug strikes once

    def flaky(state: StateView, req: GroupRequest, got: list[NodeAlloc] | None) -> list[NodeAlloc] | None:
        if next(failures, False):
            raise RuntimeError("transient")
        return got

    state = busy_cluster().build()
    sched = ResourceScheduler(profile=with_placer(BrokenForOneJob(flaky)))
    first = sched.schedule(state, [training("bad", 2)], 0.0)
    assert first.placed == () and first.pending[0].status.code is Code.ERROR
    second = sched.schedule(state, [training("bad", 2)], 1.0)
    assert placed_names(second) == ["bad"]


def test_an_error_during_preemption_rolls_back_the_victims_and_preempts_nobody(
    with_placer: Callable[[BrokenForOneJob], Profile],
) -> None:
    """The placer works for "bad" until the cluster is full; the attempt on the room a victim frees fails."""

    def only_when_preempting(
        state: StateView, req: GroupRequest, got: list[NodeAlloc] | None
    ) -> list[NodeAlloc] | None:
        if req.only_racks is not None:
            raise RuntimeError("a bug on the preemption path")
        return got

    # r000: n00 [xxxx] n01 [xxxx]    "low", priority 0, preemptible
    # r001: n00 [xxxx] n01 [xxxx]    "low2", likewise
    state = (
        ClusterBuilder()
        .racks(2)
        .nodes_per_rack(2)
        .gpus_per_node(4)
        .with_running("low", gpus=8, rack=0)
        .with_running("low2", gpus=8, rack=1)
        .build()
    )
    sched = ResourceScheduler(profile=with_placer(BrokenForOneJob(only_when_preempting)))
    before = snapshot(state)
    d = sched.schedule(state, [training("bad", 4, priority=10)], 0.0)
    assert snapshot(state) == before
    assert d.preemptions == () and d.placed == ()
    st = d.pending_status("bad")
    assert st is not None and st.code is Code.ERROR and "preemption path" in st.message
