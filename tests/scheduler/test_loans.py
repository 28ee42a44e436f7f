"""Opportunistic backfill: reserved GPUs are lent to waiting work (lend) and taken back for the holder (reclaim).

The cluster of most tests (all jobs priority 0 unless said; expected ends beside)::

    region-0
    ├── r000: n00 [aaaa] n01 [aa..]   a ends at t=10,000    2 free
    └── r001: n00 [bbbb] n01 [....]   b ends at t=5,000     4 free   <- "big" (8 in one rack) from t=5,000

"big" (8 GPUs, one rack) reserves r001 from t=5,000. A 4-GPU job that would run past t=5,000 is fenced off
r001 by EASY backfilling, and r000 has only 2 free: without loans r001's 4 free GPUs idle until t=5,000.
"""

from __future__ import annotations

import pytest
from builders import ClusterBuilder, placed, placed_names, racks_of, run_cycle

from rackscale.model import ClusterState, JobSpec, Level, TopologyConstraint, batch, inference, training
from rackscale.scheduler import PreemptionCause, Profile, ResourceScheduler
from rackscale.scheduler.framework import PROFILES
from rackscale.scheduler.loans import MIN_LOAN_S

RACK = TopologyConstraint(required=Level.RACK)


def blocked() -> ClusterState:
    return (
        ClusterBuilder()
        .racks(2)
        .with_running("a", gpus=6, rack=0, expected_end=10_000)
        .with_running("b", gpus=4, rack=1, expected_end=5_000)
        .build()
    )


def big(priority: int = 0) -> JobSpec:
    return training("big", 8, topology=RACK, submit_time=0, priority=priority)


def long4(name: str = "long", **kw: object) -> JobSpec:
    kw.setdefault("duration_estimate_s", 20_000.0)
    kw.setdefault("submit_time", 1)
    return training(name, 4, topology=RACK, **kw)  # type: ignore[arg-type]


# (the job behind "big", does it borrow r001?)
BORROWERS = [
    pytest.param(long4(), True, id="training-past-the-start-borrows"),
    pytest.param(long4(duration_estimate_s=None), True, id="no-estimate-borrows"),
    pytest.param(batch("bat", gpus=1, tasks=4, duration_estimate_s=20_000.0, submit_time=1), True, id="batch-borrows"),
    pytest.param(long4(preemptible=False), False, id="not-preemptible-never"),
    pytest.param(
        inference("svc", 2, gpus_per_replica=2, duration_estimate_s=20_000.0, submit_time=1),
        False,
        id="inference-never",
    ),
]


@pytest.mark.parametrize(("job", "borrows"), BORROWERS)
def test_a_fenced_job_borrows_the_reserved_gpus(job: JobSpec, borrows: bool) -> None:
    state = blocked()
    d = run_cycle(state, [big(), job])
    assert d.reservation is not None and d.reservation.racks == frozenset({1})
    if borrows:
        p = placed(d, job.name)
        assert p.placement.opportunistic and p.backfilled
        assert racks_of(state, p.placement) == [1]
        assert state.opportunistic == {job.name}
    else:
        assert job.name not in placed_names(d)
        assert not state.opportunistic


def test_baselines_do_not_lend() -> None:
    state = blocked()
    d = run_cycle(state, [big(), long4()], profile="first-fit")
    assert placed_names(d) == []
    assert not PROFILES["first-fit"].opportunistic_backfill and PROFILES["rackscale"].opportunistic_backfill


def test_a_job_that_ends_before_the_start_is_plainly_backfilled_not_lent() -> None:
    state = blocked()
    d = run_cycle(state, [big(), long4(duration_estimate_s=1_000.0)])
    p = placed(d, "long")
    assert not p.placement.opportunistic and racks_of(state, p.placement) == [1]


def test_no_loan_just_before_the_holder_starts() -> None:
    state = blocked()
    d = run_cycle(state, [big(), long4()], now=5_000 - MIN_LOAN_S + 1)
    assert placed_names(d) == []


def test_a_higher_priority_job_is_never_fenced_so_never_lent() -> None:
    state = blocked()
    d = run_cycle(state, [big(), long4(priority=10)])
    # it is not fenced (a higher priority than the holder's): it may take r001 for good (no loan)
    p = placed(d, "long")
    assert not p.placement.opportunistic


def test_loans_do_not_push_the_reservation_back() -> None:
    state = blocked()
    run_cycle(state, [big(), long4()])
    assert state.opportunistic == {"long"}
    # Next cycle, same instant: the borrower's own end (t=20,001) must not move big's start from t=5,000.
    d = run_cycle(state, [big()], now=1)
    assert d.reservation is not None and (d.reservation.racks, d.reservation.start) == (frozenset({1}), 5_000)


def test_the_holder_reclaims_its_rack_when_it_can_start() -> None:
    state = blocked()
    run_cycle(state, [big(), long4()])
    state.release("b")  # b ended at t=5,000: with the loan given back, big fits r001
    d = run_cycle(state, [big()], now=5_000)
    assert placed_names(d) == ["big"] and racks_of(state, placed(d, "big").placement) == [1]
    assert [(p.victim, p.preemptor, p.cause) for p in d.preemptions] == [("long", "big", PreemptionCause.RECLAIM)]
    reason = d.preemptions[0].reason
    assert "on loan" in reason and "r001" in reason and "long" not in reason, reason
    assert not state.opportunistic


def test_nobody_is_stopped_for_nothing() -> None:
    """The loan is on r001 but big still does not fit there (b runs on): no reclaim, the loan stays."""
    state = blocked()
    run_cycle(state, [big(), long4()])
    d = run_cycle(state, [big()], now=100)
    assert d.preemptions == () and placed_names(d) == []
    assert state.opportunistic == {"long"}


def test_the_fewest_borrowers_least_lost_work_first() -> None:
    """Two 2-GPU loans on r001, checkpointing every 600 s: l1 since t=0 (last save 4,800), l2 since t=3,100
    (last save 4,900). At t=5,300, after b ended, a 6-GPU holder needs r001's 4 free GPUs and one loan:
    l2's, which loses 400 s of work where l1's would lose 500 s. (Here r000 is full: a holds all 8.)"""
    state = (
        ClusterBuilder()
        .racks(2)
        .with_running("a", gpus=8, rack=0, expected_end=10_000)
        .with_running("b", gpus=4, rack=1, expected_end=5_000)
        .build()
    )
    six = training("big", 6, topology=RACK, submit_time=0)
    l1 = training("l1", 2, topology=RACK, submit_time=1, duration_estimate_s=20_000.0, checkpoint_interval_s=600.0)
    l2 = training("l2", 2, topology=RACK, submit_time=2, duration_estimate_s=20_000.0, checkpoint_interval_s=600.0)
    run_cycle(state, [six, l1], now=0)
    run_cycle(state, [six, l2], now=3_100)
    assert state.opportunistic == {"l1", "l2"}
    state.release("b")
    d = run_cycle(state, [six], now=5_300)
    assert placed_names(d) == ["big"]
    assert [p.victim for p in d.preemptions] == ["l2"]
    assert state.opportunistic == {"l1"}


def test_a_profile_can_turn_loans_on() -> None:
    sched = ResourceScheduler(profile=Profile(name="custom", placer="best-fit", opportunistic_backfill=True))
    assert [a.name for a in sched.actions] == ["allocate", "backfill", "lend", "reclaim", "preempt"]
