"""Opportunistic backfill: GPUs a reservation holds are lent to waiting work, and reclaimed for its holder.

EASY backfilling (``backfill.py``) keeps every job that would delay the reservation's holder off the
reserved racks, so while a large gang waits for running jobs to drain, the GPUs they free stay idle: on the
embedded default, a 256-GPU gang waiting for the 288-GPU cluster accounted for ~98 % of the idle rate.

Two actions fill that gap (the profile's ``opportunistic_backfill`` enables them):

- :class:`Lend` (after backfill): a fenced job that found no room outside the reserved racks may run
  *inside* them, on loan (``Placement.opportunistic``). Only work that can be stopped cheaply borrows:
  training and batch jobs (never inference: its users would see the stop), preemptible, of no higher
  priority than the holder; and only while the holder's start is at least ``MIN_LOAN_S`` away (or unknown),
  so that a loan is not granted minutes before it must be given back.
- :class:`Reclaim` (before preempt): when the job the reservation is for (the cycle's first blocked job)
  cannot be allocated, and would fit now with the loans on the racks planned for it given back, stop
  the fewest borrowers, least lost work first, that let it start (checkpoint/rollback: nobody is stopped
  for nothing). A borrower is requeued like any preempted job and loses the work since its last
  checkpoint; a job with ``checkpoint_on_preempt`` saves on the stop signal and loses (nearly) nothing.

The reservation counts borrowed GPUs as free (``backfill.plan_reservation``), so lending never pushes the
holder's start back: what is traded is the borrowers' lost work, which the KPIs report
(``lost_gpu_hours``, ``preemptions``).
"""

from __future__ import annotations

from dataclasses import replace

from rackscale.model.running import RunningJob
from rackscale.model.topology import MILLI_PER_GPU
from rackscale.model.workload import JobKind
from rackscale.scheduler.backfill import plan_reservation
from rackscale.scheduler.cycle import Attempt, Cycle
from rackscale.scheduler.decisions import Placed, Preemption, PreemptionCause
from rackscale.scheduler.gang import GangPlacement
from rackscale.scheduler.preemption import lost_work
from rackscale.scheduler.status import Code
from rackscale.scheduler.waiting import rack_names

# A loan granted less than this before the holder's planned start would mostly be lost work.
MIN_LOAN_S = 600.0


class Lend:
    name = "lend"

    def __init__(self, gang: GangPlacement) -> None:
        self.gang = gang

    def run(self, cycle: Cycle, attempt: Attempt) -> bool:
        r = cycle.reservation
        job = attempt.job
        if (
            r is None
            or not attempt.fenced
            or job.kind is JobKind.INFERENCE
            or not job.preemptible
            or job.priority > r.priority
            or job.name in cycle.state.running
            or (r.start is not None and r.start - cycle.ctx.now < MIN_LOAN_S)
        ):
            return False
        tx = cycle.tx
        got = self.gang.place(tx, job, cycle.ctx, exclude=frozenset(), only=r.racks)
        if not isinstance(got, Placed):
            if got.code is Code.ERROR:
                attempt.status = got
            return False
        # Mark the loan in the cycle's state too (the rest of the cycle, and the decisions, see it).
        loan = replace(got.placement, opportunistic=True)
        tx.release(job.name)
        tx.allocate(job, loan, now=cycle.ctx.now, expected_end=got.expected_end)
        cycle.placed.append(Placed(job, loan, got.expected_end, backfilled=True))
        return True


class Reclaim:
    name = "reclaim"

    def __init__(self, gang: GangPlacement) -> None:
        self.gang = gang

    def run(self, cycle: Cycle, attempt: Attempt) -> bool:
        job = attempt.job
        state = cycle.state
        held = cycle.reservation
        if not attempt.may_preempt or not state.opportunistic or (held is not None and held.job != job.name):
            return False  # no loans, or another job holds the reservation this one would take them for
        # The first blocked job of a cycle is the one the reservation is (re)planned for: plan it now, with
        # the loans counted as free; only a reservation that starts now may take them back.
        r = plan_reservation(job, state, cycle.ctx)
        if r is None or r.start is None or r.start > cycle.ctx.now:
            return False
        now = cycle.ctx.now
        on_racks = (state.running[name] for name in state.opportunistic)
        # Least lost work first, then the larger loan (fewer stops), then by name (deterministic).
        borrowers = sorted(
            (rj for rj in on_racks if rj.spec.priority <= job.priority and not r.racks.isdisjoint(rj.racks)),
            key=lambda rj: (lost_work(rj, now), -rj.placement.gpu_milli, rj.spec.name),
        )
        if not borrowers:
            return False
        free = sum(state.rack_whole[k] for k in r.racks)
        need = job.total_gpus
        tx = cycle.tx
        before = tx.checkpoint()
        stopped: list[RunningJob] = []
        placed: Placed | None = None
        for rj in borrowers:
            tx.release(rj.spec.name)
            stopped.append(rj)
            free += sum(a.whole_gpus for a in rj.placement.allocs if state.cluster.nodes[a.node].rack in r.racks)
            if free < need:
                continue  # not enough yet: no placement attempt can succeed
            got = self.gang.place(tx, job, cycle.ctx, exclude=frozenset(), only=r.racks)
            if isinstance(got, Placed):
                placed = got
                break
            if got.code is Code.ERROR:
                break
        if placed is None:
            tx.rollback(before)
            return False
        cycle.placed.append(placed)
        cycle.preempted.extend(
            Preemption(
                victim=rj.spec.name,
                preemptor=job.name,
                reason=f"it ran on loan on {rj.placement.gpu_milli / MILLI_PER_GPU:g} GPUs reserved in rack(s) "
                f"{rack_names(state, r.racks)}, which the job they are reserved for can now use",
                cause=PreemptionCause.RECLAIM,
            )
            for rj in stopped
        )
        cycle.room_was_freed()
        return True
