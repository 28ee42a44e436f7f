"""Which scheduling cycle to run: a full one, or one over the newly queued jobs only.

Shared by the simulator (virtual time) and the live service (wall clock): both note what happened since
the last cycle (capacity freed, jobs queued) and ask :meth:`CycleDriver.run` for the decisions. A full
cycle looks at the whole queue; when nothing was freed, only the jobs queued since can newly fit, so a
cycle over them alone, under the reservation of the last full cycle, gives the answer a full cycle would.

Least-attained-service preemption (``las.py``) also changes with time alone: a running job crosses a
service threshold or its minimum run, and a waiting job of equal priority may then preempt it. With such a
profile, the next cycle after ``recheck_s`` of the clock without a full one is a full one (cycles run when a
job arrives or capacity is freed, in both clocks alike).
"""

from __future__ import annotations

from collections.abc import Mapping

from rackscale.model.state import ClusterState
from rackscale.scheduler.decisions import Decisions, Reservation
from rackscale.scheduler.framework import NO_SERVICE, AttainedService
from rackscale.scheduler.las import LasVictims
from rackscale.scheduler.pending import PendingQueue
from rackscale.scheduler.scheduler import ResourceScheduler

# Upper bounds (seconds) of the histogram of a cycle's time, `rackscale_scheduling_attempt_duration_seconds`,
# for every exporter of it (the service, the Kubernetes scheduler): one histogram_quantile, and the
# RackscaleSchedulingCycleSlow alert, read them all alike.
CYCLE_SECONDS_BUCKETS: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class CycleDriver:
    __slots__ = ("_fresh", "_last_full", "_reservation", "freed")

    def __init__(self) -> None:
        self.freed = True  # capacity may have been freed since the last full cycle
        self._fresh: list[str] = []
        self._reservation: Reservation | None = None
        self._last_full: float | None = None

    @property
    def reservation(self) -> Reservation | None:
        """The reservation of the last full cycle, which cycles over new jobs alone keep (None: none)."""
        return self._reservation

    def arrived(self, name: str) -> None:
        """A job was queued (new, or back after a preemption or scale-down)."""
        self._fresh.append(name)

    def run(
        self,
        sched: ResourceScheduler,
        state: ClusterState,
        pending: PendingQueue,
        now: float,
        *,
        attained: Mapping[str, AttainedService] = NO_SERVICE,
    ) -> Decisions | None:
        """The decisions of this instant's cycle, or None when no waiting job could newly fit.
        ``attained``: the jobs' service in their earlier runs (see ``ResourceScheduler.schedule``)."""
        if not pending and not (self.freed and sched.profile.elastic and _may_grow(state)):
            # (Freed GPUs are worth a cycle even with nobody waiting if an elastic gang may grow into them.)
            self._fresh.clear()
            return None
        fresh = PendingQueue(
            (j for n in dict.fromkeys(self._fresh) if (j := pending.get(n)) is not None), elastic=pending.elastic
        )
        self._fresh.clear()
        if not self.freed and not fresh:
            # Nothing happened: no cycle. (Not even a due recheck: the simulator calls only at its events
            # and the service at every step, so a cycle on time alone would run at instants one clock has
            # and the other lacks; both run one at every arrival and end, which on a busy cluster is often.)
            return None
        due = self._recheck_due(sched, now)
        full = self.freed or due
        if not full:
            if self._reservation is None:
                # Older waiting jobs without a reservation: a full cycle would give the head of the
                # queue one that the new jobs must respect.
                full = len(pending) > len(fresh)
            else:
                # Jobs started since the reservation was planned may move when its holder fits; if so,
                # older waiting jobs may now be backfilled: only a full cycle gives the same answer.
                again = sched.refresh_reservation(self._reservation, state, now)
                full = again != self._reservation
        if full:
            d = sched.schedule(state, pending, now, attained=attained)
            self._reservation = d.reservation
            self._last_full = now
        else:
            d = sched.schedule(state, fresh, now, reservation=self._reservation, attained=attained)
            if self._reservation is None:
                self._reservation = d.reservation  # the new jobs were the whole queue: their reservation holds
        self.freed = bool(d.preemptions)
        return d

    def _recheck_due(self, sched: ResourceScheduler, now: float) -> bool:
        """A profile whose preemptions change with time alone has not had a full cycle for long enough."""
        victims = sched.victims
        if not isinstance(victims, LasVictims):
            return False
        return self._last_full is None or now - self._last_full >= victims.recheck_s


def _may_grow(state: ClusterState) -> bool:
    """Some running elastic gang is below its maximum (only then can a cycle with nobody waiting decide
    anything)."""
    running = state.running
    return any(running[n].placement.units < running[n].spec.elastic_max_units for n in state.elastic)
