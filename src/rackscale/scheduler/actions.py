"""The cycle's actions, least disruptive first, in KAI-Scheduler's order: allocate, backfill, preempt
(with lend and reclaim between backfill and preempt where the profile lends reserved GPUs: ``loans.py``).

Each pending job that passes admission (``admission.py``) goes through the actions in order until one
places it; if none does, ``waiting.settle_unplaced`` records why it waits. Each action does one thing:

- :class:`Allocate` places a job that no reservation holds back;
- :class:`Backfill` places a job that would delay the reservation's holder, away from the reserved racks
  (the reservation itself is planned when the first job is blocked, in ``waiting.py``);
- :class:`Preempt` frees room by evicting lower-priority jobs, and places the job there.

KAI's fourth action, consolidate (moving running jobs to defragment), comes after preempt where the profile
enables it: ``consolidate.py``.
"""

from __future__ import annotations

from typing import Protocol

from rackscale.scheduler.cycle import Attempt, Cycle
from rackscale.scheduler.decisions import Placed, Preemption, PreemptionCause
from rackscale.scheduler.framework import VictimChooser
from rackscale.scheduler.gang import GangPlacement
from rackscale.scheduler.status import Code
from rackscale.scheduler.waiting import rack_names

_NO_RACKS: frozenset[int] = frozenset()


class Action(Protocol):
    name: str

    def run(self, cycle: Cycle, attempt: Attempt) -> bool:
        """Try to place the job; True when it is placed (the later actions are skipped). On failure,
        ``attempt.status`` says why, if this action tried."""
        ...


class Allocate:
    name = "allocate"

    def __init__(self, gang: GangPlacement) -> None:
        self.gang = gang

    def run(self, cycle: Cycle, attempt: Attempt) -> bool:
        if attempt.fenced:
            return False  # backfill's to place
        got = self.gang.place(cycle.tx, attempt.job, cycle.ctx, exclude=_NO_RACKS, only=None)
        if isinstance(got, Placed):
            cycle.placed.append(got)
            return True
        attempt.status = got
        return False


class Backfill:
    name = "backfill"

    def __init__(self, gang: GangPlacement) -> None:
        self.gang = gang

    def run(self, cycle: Cycle, attempt: Attempt) -> bool:
        if not attempt.fenced:
            return False
        got = self.gang.place(cycle.tx, attempt.job, cycle.ctx, exclude=attempt.exclude, only=None, backfilled=True)
        if isinstance(got, Placed):
            cycle.placed.append(got)
            return True
        attempt.status = got
        return False


class Preempt:
    """Victims from the profile's chooser, tried in its order; the first set that lets the job run is
    kept. A set that does not is rolled back (nobody is preempted for nothing)."""

    name = "preempt"

    def __init__(self, gang: GangPlacement, victims: VictimChooser) -> None:
        self.gang = gang
        self.victims = victims

    def run(self, cycle: Cycle, attempt: Attempt) -> bool:
        job = attempt.job
        if not attempt.may_preempt or (attempt.status is not None and attempt.status.code is Code.ERROR):
            return False  # a placer's bug is not a reason to evict anyone
        tx, state = cycle.tx, cycle.state
        # Nor a job the cycle resized: its new size is decided (``elastic.py``).
        protected = cycle.protected()
        choices = self.victims.choose(job, state, cycle.ctx, exclude_racks=attempt.exclude, protected=protected)
        for choice in choices:
            before = tx.checkpoint()
            for v in choice.victims:
                tx.release(v.spec.name)
            got = self.gang.place(tx, job, cycle.ctx, exclude=attempt.exclude, only=choice.racks)
            if isinstance(got, Placed):
                break
            tx.rollback(before)
            if got.code is Code.ERROR:
                attempt.status = got
                return False
        else:
            return False
        cycle.placed.append(got)
        # The stops spend the disruption budgets: a later preemption of this cycle sees what is left of them.
        ledger = cycle.ctx.budgets
        over = ledger.spend(v.spec.name for v in choice.victims) if ledger is not None else [0] * len(choice.victims)
        cycle.preempted.extend(
            Preemption(
                victim=v.spec.name,
                preemptor=job.name,
                # No job names: the host shows this to the victim's owner, who may be another tenant.
                reason=f"{self.victims.explain(job, v, cycle.ctx)}, to free GPUs in rack(s) "
                f"{rack_names(state, choice.racks)}",
                # (Choosers stop jobs of equal priority only by least attained service: ``las.py``.)
                cause=PreemptionCause.PRIORITY if v.spec.priority < job.priority else PreemptionCause.ATTAINED_SERVICE,
                over_budget=n,
            )
            for v, n in zip(choice.victims, over, strict=True)
        )
        cycle.room_was_freed()
        return True
