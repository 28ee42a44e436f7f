"""Elastic training gangs (``minGpus``/``maxGpus``): start smaller, shrink for waiting work, grow into idle GPUs.

The clusters are two racks of two 4-GPU nodes unless a case says otherwise::

    region-0
    ├── r000: n00 [....] n01 [....]
    └── r001: n00 [....] n01 [....]
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.scheduler.builders import ClusterBuilder, gpus_by_rack, placed, render, run_cycle

from rackscale.model import Level, TopologyConstraint, training
from rackscale.model.state import ClusterState
from rackscale.model.workload import JobSpec
from rackscale.scheduler import PROFILES, Profile
from rackscale.scheduler.backfill import plan_reservation
from rackscale.scheduler.decisions import ResizeKind
from rackscale.scheduler.elastic import MIN_RESIZE_INTERVAL_S
from rackscale.scheduler.framework import CycleContext
from rackscale.scheduler.status import Code, Reason

FIXED = replace(PROFILES["rackscale"], name="rackscale-fixed", elastic=False)
LATER = MIN_RESIZE_INTERVAL_S + 1.0


def elastic(name: str, gpus: int, lo: int, hi: int, **kw: object) -> JobSpec:
    return training(name, gpus, min_gpus=lo, max_gpus=hi, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("free_in_rack0", "want", "lo", "expect_gpus"),
    [
        (8, 8, 2, 8),  # fits as asked
        (6, 8, 2, 6),  # the emptiest rack holds 6 of the 8 asked: starts on 6, in one rack
        (2, 8, 4, None),  # fewer than its minimum free anywhere: waits
    ],
    ids=["as-asked", "smaller-in-one-rack", "below-minimum-waits"],
)
def test_an_elastic_gang_starts_smaller_rather_than_wait(
    free_in_rack0: int, want: int, lo: int, expect_gpus: int | None
) -> None:
    b = ClusterBuilder().racks(2)
    if free_in_rack0 < 8:
        b = b.with_running("busy0", gpus=8 - free_in_rack0, rack=0, preemptible=False)
    state = b.with_running("busy1", gpus=7, rack=1, preemptible=False).build()
    d = run_cycle(state, [elastic("e", want, lo, want)], now=10.0)
    if expect_gpus is None:
        assert not d.placed, render(state)
        return
    p = placed(d, "e")
    assert p.placement.whole_gpus == expect_gpus
    assert len(gpus_by_rack(state, p.placement)) == 1, render(state)
    assert p.spec.units == want  # the job is the one asked for; only its placement is smaller


@pytest.mark.parametrize("profile", [FIXED, PROFILES["tiresias"], PROFILES["first-fit"]], ids=lambda p: p.name)
def test_a_profile_without_elastic_reads_a_gang_by_its_size_not_its_minimum(profile: Profile) -> None:
    """A gang asking 8 (minimum 2) fails at its size under a profile that runs gangs at their size. A
    4-GPU gang of the same shape behind it fits and is placed: the failure is remembered at 8 units, not at
    the first gang's minimum of 2 (which skipped the 4-GPU gang as "the same resources, or more, failed")::

        r000: n00 [XX..] n01 [....]   6 free: the 4-GPU gang fits, the 8-GPU gang does not
        r001: n00 [XXXX] n01 [XXX.]   1 free
    """
    state = (
        ClusterBuilder()
        .racks(2)
        .with_running("busy0", gpus=2, rack=0, preemptible=False, expected_end=1_000.0)
        .with_running("busy1", gpus=7, rack=1, preemptible=False, expected_end=None)
        .build()
    )
    # (f ends before busy0 does: a reservation for e, where the profile backfills, does not fence it.)
    first = elastic("e", 8, 2, 8, submit_time=0.0, duration_estimate_s=100.0)
    behind = training("f", 4, submit_time=1.0, duration_estimate_s=100.0)
    d = run_cycle(state, [first, behind], now=10.0, profile=profile)
    assert [p.spec.name for p in d.placed] == ["f"], render(state)


@pytest.mark.parametrize(
    ("profile", "expect"),
    [(PROFILES["rackscale"], "placed"), (FIXED, Code.UNRESOLVABLE), (PROFILES["tiresias"], Code.UNRESOLVABLE)],
    ids=["rackscale-starts-it-on-what-there-is", "fixed-refuses-it", "tiresias-refuses-it"],
)
def test_a_gang_larger_than_the_cluster_fits_only_where_it_may_start_smaller(
    profile: Profile, expect: str | Code
) -> None:
    """24 GPUs asked (minimum 4) on a cluster of 16: a profile that resizes gangs starts it smaller; one that
    runs gangs at their size can never run it, and says so ("too large") instead of keeping it waiting."""
    state = ClusterBuilder().racks(2).build()
    d = run_cycle(state, [elastic("big", 24, 4, 24)], now=10.0, profile=profile)
    if expect == "placed":
        assert placed(d, "big").placement.whole_gpus == 8  # the emptiest rack, whole
        return
    assert not d.placed
    (p,) = d.pending
    assert p.status.code is expect and p.status.reason is Reason.TOO_LARGE, p.status


def test_a_profile_without_elastic_runs_the_gang_at_its_size() -> None:
    state = ClusterBuilder().racks(2).with_running("busy", gpus=2, rack=0, preemptible=False).build()
    state_busy1 = ClusterBuilder().racks(2).with_running("b0", gpus=2, rack=0, preemptible=False)
    state = state_busy1.with_running("b1", gpus=7, rack=1, preemptible=False).build()
    d = run_cycle(state, [elastic("e", 8, 2, 8)], now=10.0, profile=FIXED)
    assert not d.placed


@pytest.mark.parametrize(
    ("waiting_priority", "expect_floor_gpus"),
    [
        (0, 4),  # same priority: only what it grew into beyond its 4 goes back
        (100, 2),  # higher priority: down to its minimum
    ],
    ids=["equal-priority-takes-the-growth", "higher-priority-takes-down-to-min"],
)
def test_shrink_gives_back_gpus_for_a_waiting_job(waiting_priority: int, expect_floor_gpus: int) -> None:
    # r000 holds the elastic gang e (asked 4, min 2, max 8) grown to all 8 GPUs; r001 is full.
    e = elastic("e", 4, 2, 8)
    state = (
        ClusterBuilder()
        .racks(2)
        .with_running("e", on={(0, 0): 4, (0, 1): 4}, spec=e)
        .with_running("full", gpus=8, rack=1, preemptible=False)
        .build()
    )
    want = 8 - expect_floor_gpus
    d = run_cycle(state, [training("w", want, priority=waiting_priority)], now=100.0)
    assert [z.spec.name for z in d.resized] == ["e"]
    z = d.resized[0]
    assert z.kind is ResizeKind.SHRUNK
    assert z.placement.whole_gpus == expect_floor_gpus and z.units_before == 8
    assert "shrunk from 8 to" in z.reason and "w" not in z.reason.split(":")[0]
    assert gpus_by_rack(state, placed(d, "w").placement) == {0: want}
    assert not d.preemptions  # shrinking spared a preemption


@pytest.mark.parametrize(("grown_to", "w_placed"), [(8, True), (4, False)], ids=["grown", "at-its-request"])
def test_a_full_cluster_still_examines_who_may_take_an_equal_gangs_growth(grown_to: int, w_placed: bool) -> None:
    """Nothing is free and no lower priority runs, so the cycle would stop after the head of the queue
    (16 GPUs in one rack: larger than any rack, it waits and reserves nothing). While the elastic gang e of
    its priority holds more than it asked for, the job behind the head is still examined and takes that
    growth; once e holds what it asked for, nobody of that priority can give anything back and the cycle
    stops after the head ("cluster full")."""
    e = elastic("e", 4, 2, 8)
    b = ClusterBuilder().racks(2)
    if grown_to == 8:
        b = b.with_running("e", on={(0, 0): 4, (0, 1): 4}, spec=e)
    else:
        b = b.with_running("e", on={(0, 0): 4}, spec=e).with_running("rest", on={(0, 1): 4}, preemptible=False)
    state = b.with_running("full", gpus=8, rack=1, preemptible=False).build()
    head = training("head", 16, submit_time=0.0, topology=TopologyConstraint(required=Level.RACK))
    d = run_cycle(state, [head, training("w", 4, submit_time=10.0)], now=100.0)
    assert [p.spec.name for p in d.placed] == (["w"] if w_placed else [])
    assert d.not_examined == (0 if w_placed else 1)
    if w_placed:
        assert [z.spec.name for z in d.resized] == ["e"] and not d.preemptions


def test_shrink_never_takes_from_a_higher_priority_gang_nor_below_the_rule() -> None:
    e = elastic("e", 4, 2, 8, priority=100)
    state = (
        ClusterBuilder()
        .racks(2)
        .with_running("e", on={(0, 0): 4, (0, 1): 4}, spec=e)
        .with_running("full", gpus=8, rack=1, preemptible=False)
        .build()
    )
    d = run_cycle(state, [training("w", 2, priority=0)], now=100.0)
    assert not d.resized and not d.placed
    # An equal-priority job cannot take it below what it asked for (4): 6 GPUs would need that.
    e0 = elastic("e", 4, 2, 8)
    state = (
        ClusterBuilder()
        .racks(2)
        .with_running("e", on={(0, 0): 4, (0, 1): 4}, spec=e0)
        .with_running("full", gpus=8, rack=1, preemptible=False)
        .build()
    )
    d = run_cycle(state, [training("w", 6)], now=100.0, profile=replace(PROFILES["rackscale"], victims=""))
    assert not d.resized and not d.placed


@pytest.mark.parametrize(
    ("now", "rack1_busy", "expect_gpus"),
    [
        (LATER, 0, 8),  # its rack's other node is free: grows to its max there
        (10.0, 0, None),  # started too recently: no growth (no flapping)
        (LATER, 8, 8),  # the other rack is full: it grows in its own rack anyway
    ],
    ids=["grows-in-its-rack", "too-soon", "other-rack-full"],
)
def test_grow_takes_free_gpus_of_its_own_racks(now: float, rack1_busy: int, expect_gpus: int | None) -> None:
    e = elastic("e", 4, 2, 12)
    b = ClusterBuilder().racks(2).with_running("e", on={(0, 0): 4}, spec=e, expected_end=now + 36_000)
    if rack1_busy:
        b = b.with_running("full", gpus=rack1_busy, rack=1, preemptible=False)
    state = b.build()
    d = run_cycle(state, [], now=now)
    if expect_gpus is None:
        assert not d.resized
        return
    (z,) = d.resized
    assert z.kind is ResizeKind.GROWN and z.placement.whole_gpus == expect_gpus
    assert set(gpus_by_rack(state, z.placement)) == {0}, "growth never leaves the gang's rack"
    assert state.running["e"].placement.units == expect_gpus


def test_grow_does_not_pay_for_a_job_about_to_end() -> None:
    e = elastic("e", 4, 2, 8)
    state = ClusterBuilder().racks(2).with_running("e", on={(0, 0): 4}, spec=e, expected_end=LATER + 120).build()
    assert not run_cycle(state, [], now=LATER).resized


def test_grow_leaves_a_reservations_racks_alone_when_its_holder_starts_soon() -> None:
    # A 16-GPU gang waits for both racks, from e's end 500 s away (less than loans.MIN_LOAN_S): e may not
    # grow into them, although the growth would pay for itself (500 s x 1/2 > 4 x the restart).
    e = elastic("e", 4, 2, 8)
    state = (
        ClusterBuilder()
        .racks(2)
        .with_running("e", on={(0, 0): 4}, spec=e, expected_end=LATER + 500)
        .with_running("x", gpus=2, rack=1, preemptible=False, expected_end=LATER + 100)
        .build()
    )
    d = run_cycle(state, [training("big", 16, submit_time=0.0)], now=LATER)
    assert d.reservation is not None and d.reservation.job == "big" and d.reservation.start == LATER + 500
    assert not d.resized


def test_profiles_list_the_elastic_switch() -> None:
    assert PROFILES["rackscale"].elastic
    baselines = ("first-fit", "best-fit", "slurm-tree", "tiresias", "kueue-tas", "slurm-block", "kai", "volcano")
    assert not any(PROFILES[name].elastic for name in baselines)  # the peers run every gang at its size
    assert isinstance(FIXED, Profile)


def one_gang_and_a_full_rack(e: JobSpec, *, e_ends: float) -> ClusterState:
    """r000: the elastic gang ``e`` on n00 (4 GPUs), ending at ``e_ends``; r001: x, 8 GPUs for 10 h::

    r000: n00 [eeee] n01 [....]
    r001: n00 [xxxx] n01 [xxxx]
    """
    return (
        ClusterBuilder()
        .racks(2)
        .with_running("e", on={(0, 0): 4}, spec=e, expected_end=e_ends)
        .with_running("x", gpus=8, rack=1, preemptible=False, expected_end=LATER + 36_000)
        .build()
    )


def test_a_gang_grows_on_loan_into_its_reserved_rack_while_the_holder_is_far_off() -> None:
    """h (8 GPUs) waits for r000 (e's end: 3,000 s away, more than loans.MIN_LOAN_S): e (asked 4, max 8) may
    grow into the rest of r000 on loan, beyond what it asked for; the reservation counts that as free."""
    state = one_gang_and_a_full_rack(elastic("e", 4, 2, 8), e_ends=LATER + 3_000)
    d = run_cycle(state, [training("h", 8, submit_time=0.0)], now=LATER)
    assert d.reservation is not None and d.reservation.racks == frozenset({0})
    assert d.reservation.start == LATER + 3_000  # not pushed back by the loan
    (z,) = d.resized
    assert z.kind is ResizeKind.GROWN and z.placement.whole_gpus == 8
    # Planned again with e grown, the start is the same: the 4 GPUs e grew into count as the holder's.
    ctx = CycleContext(now=LATER + 1, queues={}, models=state.cluster.gpu_models)
    again = plan_reservation(training("h", 8, submit_time=0.0), state, ctx)
    assert again is not None and again.racks == frozenset({0}) and again.start == LATER + 3_000


@pytest.mark.parametrize(
    ("e", "e_ends"),
    [
        (elastic("e", 4, 2, 8, priority=10), LATER + 3_000),  # of higher priority than the holder
        (elastic("e", 4, 2, 8), LATER + 500),  # the holder starts in 500 s, less than loans.MIN_LOAN_S
    ],
    ids=["gang-above-the-holder", "holder-about-to-start"],
)
def test_no_loan_growth_into_a_holders_rack(e: JobSpec, e_ends: float) -> None:
    state = one_gang_and_a_full_rack(e, e_ends=e_ends)
    d = run_cycle(state, [training("h", 8, submit_time=0.0)], now=LATER)
    assert d.reservation is not None and d.reservation.racks == frozenset({0})
    assert not d.resized
