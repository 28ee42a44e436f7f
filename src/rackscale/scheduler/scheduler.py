"""The ResourceScheduler: one pure function of (state, pending jobs, now) to decisions.

A cycle (``cycle.py``), least disruptive action first, as in KAI-Scheduler:

1. order the pending jobs (queue-sort plugin);
2. for each: admission (``admission.py``: filters for model, size and quota; the shape cache), then the
   actions in order (``actions.py``): *allocate*; or, for a job that would delay a reservation, *backfill*
   it around the reserved racks; else *preempt* lower-priority jobs and place it on the room they free;
   if none places it, it waits (``waiting.py``), and the first job blocked for room gets a reservation;
3. roll the state back: the cycle's decisions are returned as values for the caller to apply.

The hot path never scans every GPU: placers read index buckets, and a per-cycle cache remembers the
smallest request of each shape that failed, so a backlog of 10,000 jobs costs little more than its sort.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rackscale.model.state import ClusterState, Transaction
from rackscale.model.view import StateView
from rackscale.model.workload import BUILTIN_PRIORITY_CLASSES, JobSpec
from rackscale.scheduler import filters as _filters  # noqa: F401  (registers plugins)
from rackscale.scheduler import las as _las  # noqa: F401
from rackscale.scheduler import peer_baselines as _peer_baselines  # noqa: F401  (kueue-tas, slurm-block)
from rackscale.scheduler import preemption as _preemption  # noqa: F401
from rackscale.scheduler import queue_order as _queue_order  # noqa: F401
from rackscale.scheduler.actions import Action, Allocate, Backfill, Preempt
from rackscale.scheduler.admission import Admission
from rackscale.scheduler.backfill import plan_reservation
from rackscale.scheduler.budgets import BudgetLedger, DisruptionBudgets
from rackscale.scheduler.consolidate import Consolidate
from rackscale.scheduler.cycle import Cycle
from rackscale.scheduler.decisions import Decisions, Reservation
from rackscale.scheduler.elastic import Shrink, grow
from rackscale.scheduler.framework import (
    FILTERS,
    NO_SERVICE,
    PLACERS,
    PROFILES,
    QUEUE_SORTS,
    VICTIM_CHOOSERS,
    AttainedService,
    CycleContext,
    Filter,
    Placer,
    Profile,
    QueueConfig,
    unknown,
)
from rackscale.scheduler.gang import GangPlacement
from rackscale.scheduler.loans import Lend, Reclaim
from rackscale.scheduler.pending import PendingQueue
from rackscale.scheduler.placement.baselines import BestFitNoTopology, FirstFitSpread, RandomPlacer, SlurmTree
from rackscale.scheduler.placement.fgd import FGD
from rackscale.scheduler.placement.sharing_baselines import (
    DotProd,
    GpuClustering,
    GpuPacking,
    ShareBestFit,
    ShareRandom,
)
from rackscale.scheduler.placement.topology_pack import TopologyPack
from rackscale.scheduler.waiting import settle_unplaced

PLACERS[TopologyPack.name] = lambda seed: TopologyPack()
PLACERS[FirstFitSpread.name] = FirstFitSpread
PLACERS[BestFitNoTopology.name] = lambda seed: BestFitNoTopology()
PLACERS[RandomPlacer.name] = RandomPlacer
PLACERS[SlurmTree.name] = lambda seed: SlurmTree()
# The FGD paper's policies (GPU-sharing workloads; `rackscale pack` compares them).
for _sharing in (FGD, ShareRandom, DotProd, GpuClustering, GpuPacking, ShareBestFit):
    PLACERS[_sharing.name] = _sharing


class ResourceScheduler:
    """Decide placements, preemptions and pending reasons. Pure: no I/O, no clock."""

    def __init__(
        self,
        *,
        profile: Profile | str = "rackscale",
        queues: Mapping[str, QueueConfig] | None = None,
        seed: int = 0,
    ) -> None:
        if isinstance(profile, str):
            if profile not in PROFILES:
                raise unknown("profile", profile, PROFILES)
            profile = PROFILES[profile]
        self.profile = profile
        for kind, name, registry in (
            ("queue sort", profile.queue_sort, QUEUE_SORTS),
            ("placer", profile.placer, PLACERS),
        ):
            if name not in registry:
                raise unknown(kind, name, registry)
        self.queue_sort = QUEUE_SORTS[profile.queue_sort]()
        self.filters: list[Filter] = []
        for f in profile.filters:
            if f not in FILTERS:
                raise unknown("filter", f, FILTERS)
            self.filters.append(FILTERS[f]())
        self.placer: Placer = PLACERS[profile.placer](seed)
        if profile.victims and profile.victims not in VICTIM_CHOOSERS:
            raise unknown("victim chooser", profile.victims, VICTIM_CHOOSERS)
        self.victims = VICTIM_CHOOSERS[profile.victims]() if profile.victims else None
        self.queues: dict[str, QueueConfig] = dict(queues or {})
        self.gang = GangPlacement(placer=self.placer, profile=profile, queues=self.queues)
        self.admission = Admission(filters=self.filters, gang=self.gang, victims=self.victims)
        # KAI-Scheduler's actions, least disruptive first (its consolidation comes last here: consolidate.py).
        actions: list[Action] = [Allocate(self.gang), Backfill(self.gang)]
        if profile.opportunistic_backfill:
            actions += [Lend(self.gang), Reclaim(self.gang)]
        if profile.elastic:
            actions.append(Shrink(self.gang))  # gives back GPUs without stopping anyone: before preempt
        if self.victims is not None:
            actions.append(Preempt(self.gang, self.victims))
        if profile.consolidate:
            # Restarts jobs of up to the gang's priority elsewhere: after preempt, which stops only lower ones.
            actions.append(Consolidate(self.gang))
        self.actions: tuple[Action, ...] = tuple(actions)

    def schedule(
        self,
        state: ClusterState,
        pending: Sequence[JobSpec] | PendingQueue,
        now: float,
        *,
        reservation: Reservation | None = None,
        attained: Mapping[str, AttainedService] = NO_SERVICE,
        budgets: DisruptionBudgets | None = None,
    ) -> Decisions:
        """Decide what to start, preempt and keep waiting. ``state`` is left as it was found.

        ``pending`` may be a plain sequence, or a :class:`PendingQueue` kept sorted between cycles by a
        long-running caller (the simulator, the service), which spares a sort of the backlog per cycle.
        ``reservation`` is one still in force from an earlier cycle whose holder is not in ``pending``
        (a caller that schedules only newly arrived jobs): jobs of no higher priority that would delay it
        are kept off its racks, as they would be in a full cycle. ``attained``: each job's service in its
        earlier runs (the host's map, read by least-attained-service plugins; empty: nobody ran before).
        ``budgets``: disruption budgets the cycle's stops should keep within where they can (``budgets.py``;
        None, as the simulator and the service give: none).
        """
        queue = pending if isinstance(pending, PendingQueue) else PendingQueue(pending, elastic=self.profile.elastic)
        self.gang.new_cycle()
        self.admission.new_cycle(cluster=state.cluster, queued=len(queue))
        ctx = CycleContext(
            now=now,
            queues=self.queues,
            models=state.cluster.gpu_models,
            attained=attained,
            elastic=self.profile.elastic,
            budgets=BudgetLedger(budgets) if budgets is not None else None,
        )
        cycle = Cycle(
            tx=Transaction(state),
            queue=queue,
            ctx=ctx,
            reservation=reservation,
            min_demand=queue.min_whole_demand(),
        )
        admission, actions, backfill = self.admission, self.actions, self.profile.backfill
        try:
            for job in self.queue_sort.order(queue, state, ctx):
                # (Before the first job there is nothing to stop for: the head always gets a reason.)
                if cycle.examined and (stop := admission.stop_status(cycle, job)) is not None:
                    cycle.stop = stop
                    break
                cycle.examined += 1
                attempt = admission.admit(cycle, job)
                if attempt is None:
                    continue
                cycle.tried += 1
                for action in actions:
                    if action.run(cycle, attempt):
                        break
                else:
                    settle_unplaced(cycle, attempt, backfill=backfill)
            if self.profile.elastic:
                grow(cycle, self.placer)  # into what every pending job left free
        finally:
            cycle.tx.rollback()
        return cycle.decisions()

    def refresh_reservation(self, reservation: Reservation, state: StateView, now: float) -> Reservation | None:
        """The reservation its (still pending) holder would get now: running jobs started since it was
        planned may have changed where and when the holder fits. None if the holder is not a job."""
        holder = reservation.job_spec
        if holder is None:
            return None
        ctx = CycleContext(now=now, queues=self.queues, models=state.cluster.gpu_models, elastic=self.profile.elastic)
        return plan_reservation(holder, state, ctx)


__all__ = ["BUILTIN_PRIORITY_CLASSES", "QueueConfig", "ResourceScheduler"]
