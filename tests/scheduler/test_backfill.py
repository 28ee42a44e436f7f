"""Backfill: the first blocked gang reserves racks; later jobs run ahead only where they cannot delay it.

Most tests use this cluster (expected end of each running job beside it; all priority 0, so nobody
preempts anybody)::

    region-0
    ├── r000: n00 [aaaa] n01 [aa..]   a ends at t=100    2 free
    ├── r001: n00 [bbbb] n01 [....]   b ends at t=50     4 free   <- "big" (8 in one rack) from t=50
    └── r002: n00 [cccc] n01 [cc..]   c ends at t=200    2 free
"""

from __future__ import annotations

import pytest
from builders import ClusterBuilder, placed, placed_names, racks_of, run_cycle

from rackscale.model import ClusterState, JobSpec, Level, TopologyConstraint, training
from rackscale.scheduler import Code, Reason, ResourceScheduler

RACK = TopologyConstraint(required=Level.RACK)


def blocked() -> ClusterState:
    return (
        ClusterBuilder()
        .racks(3)
        .with_running("a", gpus=6, rack=0, expected_end=100)
        .with_running("b", gpus=4, rack=1, expected_end=50)
        .with_running("c", gpus=6, rack=2, expected_end=200)
        .build()
    )


def big() -> JobSpec:
    return training("big", 8, topology=RACK, submit_time=0)


def test_a_blocked_gang_reserves_the_rack_that_frees_up_first() -> None:
    state = blocked()
    d = run_cycle(state, [big()])
    assert d.reservation is not None
    assert (d.reservation.job, d.reservation.racks, d.reservation.start) == ("big", frozenset({1}), 50)
    st = d.pending_status("big")
    assert st is not None and (st.code, st.reason) == (Code.WAIT, Reason.RESERVATION)
    # Rack names and a time people read, relative to the cycle (the core formats no clock time); the time
    # itself is kept for the presentation layer, with the words that say it.
    assert "rack(s) r001" in st.message and "starting in 50 s" in st.message, st.message
    assert "t=" not in st.message and "[" not in st.message
    assert (st.at, st.when) == (50, "starting in 50 s")
    assert st.text(lambda at: f"from the {at:.0f}th second") == st.message.replace(
        "starting in 50 s", "from the 50th second"
    )


# (when the cycle runs, what the holder's reason says of the reserved rack's start at t=50)
RESERVATION_TIMES = [
    pytest.param(0, "starting in 50 s", id="future-seconds"),
    pytest.param(50 - 7800, "starting in 2 h 10 min", id="future-hours"),
    pytest.param(50, "starting now", id="now"),
    pytest.param(50 + 600, "since 10 min ago (the jobs there run past their estimated end)", id="past"),
]


@pytest.mark.parametrize(("now", "says"), RESERVATION_TIMES)
def test_the_reservation_start_reads_as_a_time_from_the_cycle(now: float, says: str) -> None:
    state = blocked()
    d = ResourceScheduler().schedule(state, [training("big", 8, topology=RACK, submit_time=now)], now)
    st = d.pending_status("big")
    assert st is not None and st.reason is Reason.RESERVATION
    assert f"rack(s) r001 are reserved for it {says};" in st.message, st.message
    assert st.at == 50 and "t=" not in st.message


def test_the_reservation_is_the_rack_that_is_whole_first() -> None:
    # region-0
    # ├── r000: n00 [aaaa] n01 [AAAA]   a1 ends at 30, a2 at 60: whole at 60
    # └── r001: n00 [bbbb] n01 [BBBB]   b1 and b2 both end at 40: whole at 40
    state = (
        ClusterBuilder()
        .racks(2)
        .with_running("a1", on={(0, 0): 4}, expected_end=30)
        .with_running("a2", on={(0, 1): 4}, expected_end=60)
        .with_running("b1", on={(1, 0): 4}, expected_end=40)
        .with_running("b2", on={(1, 1): 4}, expected_end=40)
        .build()
    )
    d = run_cycle(state, [big()])
    assert d.reservation is not None
    assert (d.reservation.racks, d.reservation.start) == (frozenset({1}), 40)


# (id, the job that comes after "big", where it may go: a list of racks, or None if it must wait)
AFTER_THE_RESERVATION = [
    # ends at t=40 <= 50: it is gone before "big" starts, so even the reserved rack is fine
    pytest.param(training("short", 4, duration_estimate_s=40), [1], id="short-job-runs-in-the-reserved-rack"),
    pytest.param(training("exact", 4, duration_estimate_s=50), [1], id="a-job-ending-exactly-at-the-start-fits"),
    # ends at 400: not on r001; r000 and r002 have 2 free each
    pytest.param(training("long", 2, duration_estimate_s=400), "not-1", id="long-job-kept-off-the-reserved-rack"),
    pytest.param(
        training("long-split", 4, duration_estimate_s=400), "not-1", id="long-job-split-around-the-reservation"
    ),
    pytest.param(training("unknown", 2), "not-1", id="unknown-duration-kept-off-the-reserved-rack"),
    # 4 inside one rack: only r001 has 4 free (r000 and r002 have 2 each)
    pytest.param(
        training("long4", 4, duration_estimate_s=400, topology=RACK),
        None,
        id="long-job-that-only-fits-the-reserved-rack",
    ),
    pytest.param(training("unknown4", 4, topology=RACK), None, id="unknown-job-that-only-fits-the-reserved-rack"),
]


@pytest.mark.parametrize(("job", "where"), AFTER_THE_RESERVATION)
def test_what_may_run_ahead_of_the_reservation(job: JobSpec, where: list[int] | str | None) -> None:
    state = blocked()
    d = run_cycle(state, [big(), job])
    assert d.reservation is not None and d.reservation.racks == frozenset({1})
    if where is None:
        assert placed_names(d) == []
        st = d.pending_status(job.name)
        assert st is not None and (st.code, st.reason) == (Code.WAIT, Reason.RESERVATION)
        assert "held for a job ahead of it" in st.message and "rack(s) r001" in st.message, st.message
        assert "big" not in st.message  # the holder may be another tenant's job: never named
        return
    p = placed(d, job.name)
    racks = racks_of(state, p.placement)
    if where == "not-1":
        assert 1 not in racks
        assert p.backfilled
    else:
        assert racks == where
    assert p.expected_end == (job.duration_estimate_s if job.duration_estimate_s is not None else None)


def test_without_end_estimates_the_reservation_still_holds_the_closest_rack() -> None:
    # r000: [aaaa][aa..] (2 free)   r001: [bbbb][....] (4 free): no job has an end estimate
    state = ClusterBuilder().racks(2).with_running("a", gpus=6, rack=0).with_running("b", gpus=4, rack=1).build()
    d = run_cycle(state, [big(), training("later", 2)])
    assert d.reservation is not None
    assert (d.reservation.racks, d.reservation.start) == (frozenset({1}), None)
    st = d.pending_status("big")
    assert st is not None and "until running jobs end" in st.message
    assert st.at is None and st.text(lambda at: "never said") == st.message  # no time to say
    assert racks_of(state, placed(d, "later").placement) == [0]


def test_an_unresolvable_job_reserves_nothing() -> None:
    state = blocked()
    d = run_cycle(state, [training("huge", 16, topology=RACK), training("long", 4, duration_estimate_s=400)])
    assert d.reservation is None
    st = d.pending_status("huge")
    assert st is not None and st.code is Code.UNRESOLVABLE
    assert racks_of(state, placed(d, "long").placement) == [1]


def test_only_the_first_blocked_gang_reserves() -> None:
    state = blocked()
    second = training("second", 8, topology=RACK, submit_time=1)
    d = run_cycle(state, [big(), second])
    assert d.reservation is not None and d.reservation.job == "big"
    st = d.pending_status("second")
    # "second" has big's shape and size: once big failed, the cycle may stop before looking at it
    assert st is not None and not st.ok
    assert d.not_examined == 1 or (st.reason is Reason.RESERVATION and "'big'" in st.message)


def test_a_multi_rack_reservation_holds_racks_of_one_region() -> None:
    # region-0                                   region-1
    # ├── g0-r000: n00 [aaaa] n01 [....]         ├── g1-r000: n00 [bbbb] n01 [....]
    # └── g0-r001: n00 [....] n01 [....]         └── g1-r001: n00 [....] n01 [....]
    # "t" needs 16 GPUs in one region (12 free in each); no end estimates. Whatever it holds must be
    # racks of one region, or the reservation protects racks the job can never use together.
    state = (
        ClusterBuilder().regions(2).racks(2).with_running("a", gpus=4, rack=0).with_running("b", gpus=4, rack=2).build()
    )
    t = training("t", 16, topology=TopologyConstraint(required=Level.REGION))
    d = ResourceScheduler().schedule(state, [t], 0)
    assert d.reservation is not None and d.reservation.job == "t"
    regions = {state.cluster.racks[r].region for r in d.reservation.racks}
    assert len(regions) == 1, f"reserved racks {sorted(d.reservation.racks)} span regions {sorted(regions)}"


def test_a_backfilled_job_never_lands_on_reserved_racks_across_cycles() -> None:
    # Cycle 1 at t=0 reserves r001; at t=10 a new long job arrives: still kept off r001.
    state = blocked()
    run_cycle(state, [big()], now=0)
    d = run_cycle(state, [big(), training("late", 2, duration_estimate_s=1000, submit_time=10)], now=10)
    assert d.reservation is not None and d.reservation.racks == frozenset({1})
    assert 1 not in racks_of(state, placed(d, "late").placement)
    # at t=50 b ends: big runs in r001
    state.release("b")
    d = run_cycle(state, [big()], now=50)
    assert racks_of(state, placed(d, "big").placement) == [1]
