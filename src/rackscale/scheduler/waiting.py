"""What a job that the actions could not place is told, and what its failure tells the rest of the cycle.

- An internal error (``Code.ERROR``) only says so: it says nothing about the job's shape or the cluster.
- Otherwise the failure is remembered for the job's shape (a later, no smaller, job of the shape fails
  the same way without a search), may cover the shape for the whole queue (the cycle can stop once every
  shape is covered), and the first job blocked for lack of room gets a reservation (EASY backfilling).
"""

from __future__ import annotations

from rackscale.model.view import StateView
from rackscale.model.workload import JobKind, JobSpec
from rackscale.scheduler.backfill import plan_reservation
from rackscale.scheduler.cycle import Attempt, Cycle, ShapeFailure
from rackscale.scheduler.decisions import Reservation
from rackscale.scheduler.pending import fewest_units, static_shape
from rackscale.scheduler.status import Code, Reason, Status, relative, wait

CLUSTER_FULL = Status(
    Code.UNSCHEDULABLE,
    Reason.INSUFFICIENT_GPUS,
    "waiting for GPUs: fewer GPUs are free than any pending job needs, and no lower-priority job can be "
    "preempted (not examined in detail this cycle)",
    "scheduler",
)

SAME_SHAPE_FAILED = Status(
    Code.UNSCHEDULABLE,
    Reason.INSUFFICIENT_GPUS,
    "waiting for GPUs: a job ahead in the queue asking for the same resources, or fewer, could not be "
    "placed this cycle (not examined in detail)",
    "scheduler",
)


def settle_unplaced(cycle: Cycle, attempt: Attempt, *, backfill: bool) -> None:
    """Record why ``attempt``'s job waits, and learn from its failure. ``backfill``: the profile's."""
    job = attempt.job
    status = attempt.status
    assert status is not None, "an action that fails says why"
    if status.code is Code.ERROR:
        cycle.wait(job, status)
        return
    needed = fewest_units(job, elastic=cycle.ctx.elastic)  # (the profile's: a gang's minimum only if it resizes)
    cycle.failed[attempt.shape] = ShapeFailure(needed, status)
    reservation = cycle.reservation
    if attempt.may_split and job.kind is not JobKind.INFERENCE:
        static = static_shape(job)
        # Unconstrained, the failure answers for the shape; fenced off the reserved racks, only if every
        # queued job of the shape is fenced too (none ends before the reservation's start).
        if not attempt.fenced or (
            reservation is not None
            and (reservation.start is None or cycle.ctx.now + cycle.queue.min_duration(static) > reservation.start)
        ):
            if cycle.shapes is None:
                cycle.shapes = cycle.queue.shape_count()
            # (The queue counts each job's request by the same rule: ``PendingQueue(elastic=...)``.)
            if needed <= (cycle.queue.min_units(static) or 0):
                cycle.covered.add(static)
    if reservation is None and backfill and status.code is Code.UNSCHEDULABLE:
        cycle.reservation = plan_reservation(job, cycle.state, cycle.ctx)
        if cycle.reservation is not None:
            status = reserved_status(job, cycle.reservation, cycle.state, cycle.ctx.now)
    elif reservation is not None and job.name != reservation.job and attempt.fenced:
        status = wait(
            Reason.RESERVATION,
            f"{status.message}; rack(s) {rack_names(cycle.state, reservation.racks)} are held for a job "
            "ahead of it in the queue, which this job would delay",
            "backfill",
        )
    cycle.wait(job, status)


def reserved_status(job: JobSpec, r: Reservation, state: StateView, now: float) -> Status:
    """The holder's reason. Its start is said relative to this cycle ("starting in 2 h 10 min"), and kept as
    ``at`` for a presentation layer to say as a clock time (the core formats none)."""
    at = r.start
    if at is None:
        when = "until running jobs end"
    elif round(at - now) > 0:
        when = f"starting {relative(at, now)}"
    elif round(at - now) == 0:
        when = "starting now"
    else:  # the jobs there run past their estimated end
        when = f"since {relative(at, now)} (the jobs there run past their estimated end)"
    return wait(
        Reason.RESERVATION,
        f"waiting for GPUs: rack(s) {rack_names(state, r.racks)} are reserved for it {when}; smaller jobs are "
        "backfilled only where they do not delay it",
        "backfill",
        at=at,
        when=when if at is not None else "",
    )


def rack_names(state: StateView, racks: frozenset[int] | set[int]) -> str:
    names = [state.cluster.racks[r].name for r in sorted(racks)]
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
