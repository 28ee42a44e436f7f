"""Consolidation: small running jobs are moved out of one rack so that a waiting gang gets it whole.

The cluster of most tests: 4 racks of 18 nodes x 4 GPUs (72, an NVL72's), one cell per node
(``x``: its 4 GPUs in use, ``.``: free), every job priority 0 and ending at t=10,000 unless said::

    region-0
    ├── r000: xx................   s0: 8 GPUs      64 free
    ├── r001: x.................   s1: 4 GPUs      68 free
    ├── r002: xxxx..............   s2: 16 GPUs     56 free
    └── r003: xxxxxxxxxxxxxxxxxx   full: 72 GPUs (as large as the gang: never moved), ends at t=20,000

"llm" (72 GPUs in workers of 4, one rack required) arrives: 188 GPUs are free, no rack has 72. Moving s1
(4 GPUs) frees r001 for it, where waiting would take until t=10,000 (72 x 9,700 GPU-s spared at t=300).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from builders import ClusterBuilder, placed, placed_names, racks_of, run_cycle

from rackscale.model import (
    ClusterState,
    CommProfile,
    JobSpec,
    Level,
    PreemptionPolicy,
    TopologyConstraint,
    inference,
    training,
)
from rackscale.scheduler import PreemptionCause, ResourceScheduler
from rackscale.scheduler.consolidate import MAX_MOVER_RUNS, RESTART_S
from rackscale.scheduler.decisions import Reservation
from rackscale.scheduler.framework import PROFILES, AttainedService

CONSOLIDATE = "rackscale-consolidate"  # the default profile with the consolidate action

RACK = TopologyConstraint(required=Level.RACK)
NOW = 300.0

Layout = Callable[[ClusterBuilder], ClusterBuilder]


def nvl72(*jobs: tuple[str, int, int, dict[str, Any]], full: bool = True) -> ClusterState:
    """4 NVL72-shaped racks with the jobs ``(name, gpus, rack, builder options)``; r003 full unless not."""
    b = ClusterBuilder().racks(4).nodes_per_rack(18).gpus_per_node(4)
    for name, gpus, rack, kw in jobs:
        kw = {"expected_end": 10_000.0, **kw}
        b = b.with_running(name, gpus=gpus, rack=rack, **kw)
    if full:
        b = b.with_running("full", gpus=72, rack=3, expected_end=20_000.0)
    return b.build()


def fragmented(**kw: Any) -> ClusterState:
    """The module docstring's cluster; ``kw`` applies to s0, s1 and s2."""
    return nvl72(("s0", 8, 0, kw), ("s1", 4, 1, kw), ("s2", 16, 2, kw))


def llm(**kw: Any) -> JobSpec:
    kw.setdefault("topology", RACK)
    return training("llm", 72, gpus_per_worker=4, submit_time=0.0, **kw)


# (the cluster, the rack llm should get, the jobs moved out of it)
MOVES = [
    pytest.param(fragmented(), 1, {"s1"}, id="the-rack-with-the-fewest-gpus-to-move"),
    pytest.param(
        # s0 and s1 hold 4 GPUs each: s1 saved 50 s ago, s0 never (300 s of work lost): r001 is cheaper
        nvl72(("s0", 4, 0, {}), ("s1", 4, 1, {"checkpointed_at": 250.0}), ("s2", 16, 2, {})),
        1,
        {"s1"},
        id="equal-gpus-the-least-lost-work",
    ),
    pytest.param(
        # r000: two 2-GPU jobs (4 GPUs to move) beat r001's single 8-GPU job
        nvl72(("s0a", 2, 0, {}), ("s0b", 2, 0, {"on": {(0, 0): 2}}), ("s1", 8, 1, {}), ("s2", 16, 2, {})),
        0,
        {"s0a", "s0b"},
        id="two-small-jobs-before-one-larger",
    ),
]


@pytest.mark.parametrize(("state", "rack", "movers"), MOVES)
def test_consolidation_moves_the_cheapest_racks_jobs_and_places_the_gang_there(
    state: ClusterState, rack: int, movers: set[str]
) -> None:
    others = {n: rj.placement for n, rj in state.running.items() if n not in movers}
    used = state.used_milli
    d = run_cycle(state, [llm()], now=NOW, profile=CONSOLIDATE)  # applied to ``state``, invariants checked
    gang = placed(d, "llm")
    assert racks_of(state, gang.placement) == [rack] and not gang.moved
    assert {p.victim for p in d.preemptions} == movers
    assert {p.preemptor for p in d.preemptions} == {"llm"}
    # Each mover is stopped (a preemption) and started again, off the rack, in the same cycle: the
    # movers' placements come before the gang's, which is last.
    assert placed_names(d)[-1] == "llm" and set(placed_names(d)[:-1]) == movers
    for name in movers:
        p = placed(d, name)
        assert p.moved and not p.backfilled and rack not in racks_of(state, p.placement)
        assert name in state.running
    for pre in d.preemptions:
        assert "moved to rack(s)" in pre.reason and f"free rack r00{rack} whole" in pre.reason, pre.reason
        assert pre.cause is PreemptionCause.CONSOLIDATION
        assert "llm" not in pre.reason and pre.victim not in pre.reason, pre.reason  # no job names
    # Nobody else was touched; nothing was freed or lost in net: only llm's 72 GPUs were added.
    assert {n: state.running[n].placement for n in others} == others
    assert state.used_milli == used + 72_000


def test_a_gang_that_prefers_a_rack_and_would_rather_wait_than_split_is_consolidated() -> None:
    """Only required racks above: a gang that merely prefers one, whose split would cost more than its wait
    (its ring on the NIC for 50,000 s), is not split by allocate but consolidated."""
    state = fragmented()
    talk = CommProfile(bytes_per_step=4e9, compute_s_per_step=0.5)
    job = llm(topology=TopologyConstraint(), comm=talk, duration_estimate_s=50_000.0)
    d = run_cycle(state, [job], now=NOW, profile=CONSOLIDATE)
    assert racks_of(state, placed(d, "llm").placement) == [1]
    assert [p.victim for p in d.preemptions] == ["s1"]


@pytest.mark.parametrize(
    ("held", "mover_to"),
    [
        pytest.param(None, 2, id="no-reservation-the-fullest-rack-that-fits"),
        pytest.param(Reservation(job="other", racks=frozenset({2}), start=5_000.0), 0, id="kept-off-reserved-racks"),
        # s1 would end before the holder starts: it may use the reserved rack (as admission lets it)
        pytest.param(Reservation(job="other", racks=frozenset({2}), start=30_000.0), 2, id="ends-before-the-start"),
    ],
)
def test_the_mover_keeps_off_racks_a_reservation_holds_from_it(held: Reservation | None, mover_to: int) -> None:
    """A reservation from an earlier cycle holds r002 for another job from ``start``. llm ends before it
    starts (it is not fenced: it may use any rack); s1 (10,000 s more) is placed again as a pending job of
    its priority would be: off r002 when it would run past the start."""
    state = nvl72(
        ("s0", 8, 0, {}), ("s1", 4, 1, {"spec": training("s1", 4, duration_estimate_s=10_000.0)}), ("s2", 16, 2, {})
    )
    d = ResourceScheduler(profile=CONSOLIDATE).schedule(
        state, [llm(duration_estimate_s=1_000.0)], NOW, reservation=held
    )
    assert racks_of(state, placed(d, "s1").placement) == [mover_to]
    assert racks_of(state, placed(d, "llm").placement) == [1]


def _unmovable_elsewhere() -> ClusterState:
    """r000's free GPUs are two per node (p0 holds the others, at a higher priority); s1 needs 4 on one
    node (one worker); r002 and r003 are full: s1 can go nowhere but back to r001."""
    end = 10_000.0
    return (
        ClusterBuilder()
        .racks(4)
        .nodes_per_rack(18)
        .gpus_per_node(4)
        .with_running("p0", on={(0, n): 2 for n in range(18)}, priority=10, expected_end=end)
        .with_running("s1", gpus=4, rack=1, spec=training("s1", 4, gpus_per_worker=4), expected_end=end)
        .with_running("p2", gpus=72, rack=2, priority=10, expected_end=end)
        .with_running("p3", gpus=72, rack=3, priority=10, expected_end=end)
        .build()
    )


def _split_elsewhere() -> ClusterState:
    """s1 (4 GPUs in r001) would have to be split 2 + 2 over r000 and r002: a move never spreads a job."""
    hi = {"priority": 10, "expected_end": 10_000.0}
    return nvl72(("p0", 70, 0, hi), ("s1", 4, 1, {}), ("p2", 70, 2, hi))


def _inference_only() -> ClusterState:
    return nvl72(
        *(
            (name, gpus, rack, {"spec": inference(name, gpus, gpus_per_replica=1)})
            for name, gpus, rack in (("s0", 8, 0), ("s1", 4, 1), ("s2", 16, 2))
        )
    )


# s0 and s2 end after s1 in the cost rows (else their estimates, overrun at t=14,400, say nothing of the wait).
LATE = {"expected_end": 30_000.0}

# (the cluster, the waiting gang, the profile, now): nothing may be moved
NOT_MOVED = [
    pytest.param(_unmovable_elsewhere(), llm(), CONSOLIDATE, NOW, id="a-mover-cannot-be-placed-again"),
    pytest.param(_split_elsewhere(), llm(), CONSOLIDATE, NOW, id="a-mover-would-be-split-over-racks"),
    pytest.param(
        # s1 ran 4 h without a checkpoint (57,600 GPU-s lost if moved) and ends in 2 min: llm waits 2 min
        nvl72(("s0", 8, 0, LATE), ("s1", 4, 1, {"expected_end": 14_400.0 + 120}), ("s2", 16, 2, LATE)),
        llm(),
        CONSOLIDATE,
        14_400.0,
        id="cost-exceeds-gain",
    ),
    pytest.param(fragmented(priority=5), llm(), CONSOLIDATE, NOW, id="movers-of-higher-priority"),
    pytest.param(fragmented(preemptible=False), llm(), CONSOLIDATE, NOW, id="movers-not-preemptible"),
    # A Kubernetes pod no controller recreates (kube.snapshot): a stop would lose it.
    pytest.param(fragmented(movable=False), llm(), CONSOLIDATE, NOW, id="movers-not-movable"),
    pytest.param(_inference_only(), llm(), CONSOLIDATE, NOW, id="inference-is-never-moved"),
    pytest.param(
        fragmented(), llm(preemption_policy=PreemptionPolicy.NEVER), CONSOLIDATE, NOW, id="gang-may-not-preempt"
    ),
    pytest.param(fragmented(), llm(), "first-fit", NOW, id="profile-first-fit"),
    pytest.param(fragmented(), llm(), "tiresias", NOW, id="profile-tiresias"),
    pytest.param(
        fragmented(),
        llm(),
        "rackscale",
        NOW,
        id="the-default-does-not-consolidate",
    ),
]


@pytest.mark.parametrize(("state", "job", "profile", "now"), NOT_MOVED)
def test_nobody_is_moved_when_it_does_not_work_out_or_pay(
    state: ClusterState, job: JobSpec, profile: Any, now: float
) -> None:
    before = {n: rj.placement for n, rj in state.running.items()}
    d = run_cycle(state, [job], now=now, profile=profile)
    assert d.preemptions == () and placed_names(d) == []
    assert {n: rj.placement for n, rj in state.running.items()} == before  # rolled back: nothing moved
    assert [p.spec.name for p in d.pending] == ["llm"]


def test_the_move_pays_once_the_mover_has_saved_recently() -> None:
    """The cost row above, but s1 saved 30 s ago (and saves on the stop signal): a move costs it
    30 s x 4 GPUs at most plus the restart, less than llm's 2 min x 72 GPUs."""
    now = 14_400.0
    kw = {"expected_end": now + 120, "checkpointed_at": now - 30}
    state = nvl72(("s0", 8, 0, LATE), ("s1", 4, 1, kw), ("s2", 16, 2, LATE))
    assert 30 * 4 + RESTART_S * 4 < 120 * 72
    # (las-victims would also stop s1 for good now, being of equal priority with more service and saved:
    # preempt comes first, so compare with a profile that preempts lower priorities only.)
    profile = replace(PROFILES[CONSOLIDATE], name="lower-only", victims="cheapest-victims")
    d = run_cycle(state, [llm()], now=now, profile=profile)
    assert [p.victim for p in d.preemptions] == ["s1"] and placed(d, "s1").moved
    assert racks_of(state, placed(d, "llm").placement) == [1]


BASELINES = ["first-fit", "best-fit", "random", "slurm-tree", "tiresias", "kueue-tas", "slurm-block", "kai", "volcano"]


def test_only_the_consolidate_profile_consolidates() -> None:
    assert PROFILES[CONSOLIDATE].consolidate and PROFILES[CONSOLIDATE].elastic  # the default plus moves
    assert not PROFILES["rackscale"].consolidate  # measured: not worth its cost by default (the docs)
    assert not any(PROFILES[name].consolidate for name in BASELINES)


@pytest.mark.parametrize(
    ("runs", "moved"),
    [
        pytest.param(MAX_MOVER_RUNS - 1, True, id="stopped-twice-still-moves"),
        pytest.param(MAX_MOVER_RUNS, False, id="stopped-thrice-stays"),
    ],
)
def test_a_job_stopped_often_is_not_moved_again(runs: int, moved: bool) -> None:
    """Every small job has run ``runs`` times before (the host's record of earlier runs)."""
    state = fragmented()
    record = AttainedService(gpu_s=100.0, run_s=100.0, stopped_at=0.0, runs=runs)
    attained = {name: record for name in ("s0", "s1", "s2")}
    d = ResourceScheduler(profile=CONSOLIDATE).schedule(state, [llm()], NOW, attained=attained)
    assert [p.victim for p in d.preemptions] == (["s1"] if moved else [])
