"""The live cluster (pure: no clock, no store): what a cycle decides and the changes it reports.

rack r000: 18 nodes x 4 GPUs = 72        rack r001: 72
+------------------------------+        +------------------------------+
| nodes r000-n00 .. r000-n17   |        | nodes r001-n00 .. r001-n17   |
+------------------------------+        +------------------------------+
"""

from __future__ import annotations

import pytest
from tests.service.conftest import small_cluster

from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobSpec, batch, training
from rackscale.service.live import CANCELLED, COMPLETED, FAILED, PREEMPTED, SCHEDULED, WAITING, LiveCluster


def live() -> LiveCluster:
    return LiveCluster(small_cluster(2))


def types(changes: list) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    return [(c.job, c.type) for c in changes]


def test_a_job_that_fits_is_scheduled_inside_one_rack() -> None:
    lc = live()
    lc.submit(training("t", 64, duration_estimate_s=100.0))
    changes = lc.cycle(0.0)
    assert types(changes) == [("t", SCHEDULED)]
    p = changes[0].placement
    assert p is not None
    assert len({lc.cluster.nodes[a.node].rack for a in p.allocs}) == 1
    assert lc.state.used_milli == 64_000
    assert "r00" in changes[0].message


def test_a_waiting_job_reports_its_first_reason_and_keeps_the_latest_in_memory() -> None:
    lc = live()
    lc.submit(training("big-1", 72, duration_estimate_s=100.0))
    lc.submit(training("big-2", 72, duration_estimate_s=100.0))
    lc.submit(training("big-3", 72, duration_estimate_s=100.0))
    first = lc.cycle(0.0)
    assert sorted(types(first)) == [("big-1", SCHEDULED), ("big-2", SCHEDULED), ("big-3", WAITING)]
    waiting = next(c for c in first if c.type == WAITING)
    assert waiting.reason and waiting.message
    assert lc.why["big-3"].reason.value == waiting.reason
    lc.cycles.freed = True  # a full cycle plans a reservation for it: the API sees the new reason ...
    assert lc.cycle(1.0) == []  # ... but it is not a change to persist (reasons move every cycle)
    assert lc.why["big-3"].reason.value == "WaitingForReservation"


def test_an_impossible_job_fails_with_the_reason() -> None:
    lc = live()
    lc.submit(batch("huge", tasks=1, gpus=8))  # no node has 8 GPUs
    [change] = lc.cycle(0.0)
    assert change.type == FAILED
    assert "huge" not in lc.specs and not lc.pending


def test_an_exit_frees_the_gpus_and_the_next_cycle_uses_them() -> None:
    lc = live()
    for n in ("a", "b", "c"):
        lc.submit(training(n, 72, duration_estimate_s=100.0))
    lc.cycle(0.0)
    done = lc.exited("a", 100.0, ok=True, exit_code=0, reason="")
    assert done is not None and done.type == COMPLETED
    assert types(lc.cycle(100.0)) == [("c", SCHEDULED)]
    assert lc.counters.completed == 1


@pytest.mark.parametrize(
    ("running_first", "expect_stop"),
    [pytest.param(True, True, id="running"), pytest.param(False, False, id="queued")],
)
def test_cancel_removes_a_job_wherever_it_is(running_first: bool, expect_stop: bool) -> None:
    lc = live()
    lc.submit(training("x", 8))
    if running_first:
        lc.cycle(0.0)
    assert ("x" in lc.state.running) is expect_stop
    change = lc.cancel("x", 1.0)
    assert change is not None and change.type == CANCELLED
    assert "x" not in lc.state.running and "x" not in lc.pending and lc.state.used_milli == 0
    assert lc.cancel("x", 2.0) is None  # twice is a no-op


def test_a_higher_priority_gang_preempts_and_the_victim_waits_again() -> None:
    lc = live()
    for n in ("low-1", "low-2"):
        lc.submit(training(n, 72, priority=0, duration_estimate_s=1e6))
    lc.cycle(0.0)
    lc.submit(training("urgent", 72, priority=1_000_000, duration_estimate_s=100.0))
    changes = lc.cycle(1.0)
    kinds = dict(types(changes))
    assert kinds["urgent"] == SCHEDULED
    victims = [c.job for c in changes if c.type == PREEMPTED]
    assert len(victims) == 1 and victims[0].startswith("low-")
    assert victims[0] in lc.pending and lc.counters.preemption_victims == 1
    lc.state.check_invariants()


def test_accounting_counts_idle_gpus_only_while_work_waits() -> None:
    lc = live()
    lc.account(0.0)
    lc.account(10.0)  # nothing waits: idle, but not the scheduler's fault
    assert lc.kpi.idle_waiting_gpu_s == 0.0 and lc.kpi.available_while_waiting_gpu_s == 0.0
    assert lc.kpi.available_gpu_s == pytest.approx(144 * 10)
    lc.submit(training("w", 8))
    lc.account(20.0)  # 8 GPUs' worth of work waited 10 s with 144 free
    assert lc.kpi.idle_waiting_gpu_s == pytest.approx(8 * 10)
    # The idle rate's denominator is the GPU-seconds of the periods when work waited (DESIGN section 5).
    assert lc.kpi.available_while_waiting_gpu_s == pytest.approx(144 * 10)


def test_restore_puts_a_job_back_on_its_placement() -> None:
    lc = live()
    spec: JobSpec = training("r", 16, duration_estimate_s=100.0)
    lc.submit(spec)
    [ch] = lc.cycle(0.0)
    assert ch.placement is not None
    again = live()
    again.restore(spec, ch.placement, started=0.0, now=5.0)
    assert again.state.snapshot() == lc.state.snapshot() or again.state.used_milli == lc.state.used_milli
    again.state.check_invariants()
    with pytest.raises(ValueError):
        again.restore(training("clash", 16), ch.placement, started=0.0, now=5.0)  # the same GPUs twice


def test_reserved_gpus_are_lent_and_reclaimed_in_the_service_too() -> None:
    """The service's host runs the same lend/reclaim actions as the simulator: r001 is half free, reserved
    for a 72-GPU gang; a long 32-GPU job borrows it, and is stopped (with its reason) when the gang can start."""
    lc = live()
    lc.submit(training("a", 72, duration_estimate_s=10_000.0))
    lc.submit(training("b", 40, duration_estimate_s=5_000.0))
    lc.cycle(0.0)
    lc.submit(training("gang", 72, duration_estimate_s=100.0, submit_time=1.0))
    lc.submit(training("long", 32, duration_estimate_s=1e6, submit_time=2.0, checkpoint_on_preempt=True))
    lc.cycles.freed = True
    changes = lc.cycle(2.0)
    loan = next(c for c in changes if c.job == "long")
    assert loan.type == SCHEDULED and "on loan" in loan.message
    assert lc.state.opportunistic == {"long"}
    assert lc.exited("b", 5_000.0, ok=True, exit_code=0, reason="") is not None
    changes = lc.cycle(5_000.0)
    kinds = dict(types(changes))
    assert kinds == {"long": PREEMPTED, "gang": SCHEDULED}
    stopped = next(c for c in changes if c.job == "long")
    assert "on loan" in stopped.message and "r001" in stopped.message
    assert "long" in lc.pending and not lc.state.opportunistic
    lc.state.check_invariants()


def _tiny() -> LiveCluster:
    """2 racks of 2 nodes x 4 GPUs (8 GPUs a rack)."""
    return LiveCluster(GPUCluster.uniform(name="tiny", racks_per_region=2, nodes_per_rack=2, gpus_per_node=4))


@pytest.mark.parametrize(
    ("second_urgent", "holder", "other"),
    [
        # low-2 is stopped first and gets r001's reservation; then low-1 is stopped too and, ahead of it in the
        # queue, takes the reservation over. The cycle stops before low-2 (nothing of its shape fits): it
        # said "rack(s) r001 are reserved for it" for as long as it waited.
        pytest.param(True, "low-1", "low-2", id="reservation-taken-over"),
        # Only low-2 waits: it keeps its reservation and says so.
        pytest.param(False, "low-2", None, id="reservation-kept"),
    ],
)
def test_only_the_job_a_reservation_is_for_says_the_racks_are_reserved_for_it(
    second_urgent: bool, holder: str, other: str | None
) -> None:
    lc = _tiny()
    lc.submit(training("low-1", 8, gpus_per_worker=4, duration_estimate_s=1e5, submit_time=140.0, queue="a"))
    lc.cycle(142.0)
    lc.submit(training("low-2", 8, gpus_per_worker=4, duration_estimate_s=1e5, submit_time=146.0, queue="a"))
    lc.cycle(147.0)
    lc.submit(training("urgent", 8, gpus_per_worker=4, priority=500, duration_estimate_s=300, submit_time=163.0))
    lc.cycle(163.8)
    if second_urgent:
        lc.submit(training("mu", 4, gpus_per_worker=4, priority=400, duration_estimate_s=300, submit_time=168.7))
        lc.cycle(169.0)
    for t in (170.0, 175.0):
        lc.cycles.freed = True
        lc.cycle(t)
    assert lc.cycles._reservation is not None and lc.cycles._reservation.job == holder
    assert "reserved for it" in lc.why[holder].message
    if other is not None:
        assert other in lc.pending
        assert "reserved for it" not in lc.why[other].message, lc.why[other].message


@pytest.mark.parametrize(
    ("filler_gpus", "min_gpus", "expect"),
    [
        # r000 full, 4 GPUs used in r001: the gang starts on the 4 left, and its event says so (it said only
        # "placed on 1 node(s) in rack(s) r001", as if it ran at its size).
        pytest.param(12, 4, "; started on 4 of the 8 GPUs it asked for (minGpus 4): no more were free", id="smaller"),
        pytest.param(8, 4, None, id="at-its-size"),
        pytest.param(8, 0, None, id="not-elastic"),
    ],
)
def test_an_elastic_gang_started_smaller_is_told_so(filler_gpus: int, min_gpus: int, expect: str | None) -> None:
    lc = _tiny()
    lc.submit(training("full", 8, gpus_per_worker=4, duration_estimate_s=1e5))
    if filler_gpus > 8:
        lc.submit(training("part", filler_gpus - 8, gpus_per_worker=4, duration_estimate_s=1e5))
    lc.cycle(0.0)
    lc.submit(training("el", 8, gpus_per_worker=4, min_gpus=min_gpus, duration_estimate_s=1e5, submit_time=1.0))
    [ch] = [c for c in lc.cycle(1.0) if c.job == "el"]
    assert ch.type == SCHEDULED
    if expect is None:
        assert "started on" not in ch.message
    else:
        assert expect in ch.message


@pytest.mark.parametrize(
    ("history", "estimate", "expect"),
    [
        # Four 1-hour 4-GPU jobs of queue a completed: a fifth without an estimate is planned with their
        # median, and its Scheduled event says so (nothing showed the predictor at work).
        pytest.param(
            4,
            None,
            "; planned to run about 1 h, predicted from 4 completed job(s) of its queue, kind and size",
            id="predicted",
        ),
        pytest.param(3, None, None, id="too-little-history"),
        pytest.param(4, 600.0, None, id="its-own-estimate"),
    ],
)
def test_a_job_planned_with_the_runtime_predictor_is_told_so(
    history: int, estimate: float | None, expect: str | None
) -> None:
    lc = _tiny()
    for i in range(history):
        lc.submit(training(f"h{i}", 4, gpus_per_worker=4, duration_estimate_s=3600.0, queue="a"))
    lc.cycle(0.0)
    for i in range(history):
        assert lc.exited(f"h{i}", 3600.0, ok=True, exit_code=0, reason="") is not None
    lc.submit(training("p", 4, gpus_per_worker=4, duration_estimate_s=estimate, submit_time=3600.0, queue="a"))
    [ch] = [c for c in lc.cycle(3600.0) if c.job == "p"]
    assert ch.type == SCHEDULED
    if expect is None:
        assert "predicted" not in ch.message
    else:
        assert expect in ch.message, ch.message


@pytest.mark.parametrize(
    ("run_s", "estimate", "bucket"),
    [
        # Four 1-hour jobs of queue a completed: p, planned with their 1 h, runs 100 min -> ratio 1.67 (le 2).
        pytest.param(6000.0, None, 2.0, id="ran-longer"),
        pytest.param(3600.0, None, 1.25, id="as-predicted"),
        pytest.param(600.0, None, 0.25, id="ended-early"),
        # It gave its own estimate: not the predictor's to answer for.
        pytest.param(7200.0, 7200.0, None, id="its-own-estimate"),
    ],
)
def test_a_completed_job_planned_with_a_prediction_is_counted_by_its_run_over_it(
    run_s: float, estimate: float | None, bucket: float | None
) -> None:
    lc = _tiny()
    for i in range(4):
        lc.submit(training(f"h{i}", 4, gpus_per_worker=4, duration_estimate_s=3600.0, queue="a"))
    lc.cycle(0.0)
    for i in range(4):
        lc.exited(f"h{i}", 3600.0, ok=True, exit_code=0, reason="")
    lc.submit(training("p", 4, gpus_per_worker=4, duration_estimate_s=estimate, submit_time=3600.0, queue="a"))
    lc.cycle(3600.0)
    assert lc.prediction_ratios.count == 0  # the h jobs gave their own estimates
    assert lc.exited("p", 3600.0 + run_s, ok=True, exit_code=0, reason="") is not None
    cum = dict(lc.prediction_ratios.cumulative())
    if bucket is None:
        assert lc.prediction_ratios.count == 0
    else:
        # (the predictor's quantile sketch holds 3,600 s to its relative accuracy, about 1 %)
        assert lc.prediction_ratios.count == 1 and lc.prediction_ratios.total == pytest.approx(run_s / 3600.0, rel=0.02)
        assert next(le for le, n in cum.items() if n) == bucket  # the smallest bucket that holds it
