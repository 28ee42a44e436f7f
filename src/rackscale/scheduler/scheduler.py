"""The ResourceScheduler: one pure function of (state, pending jobs, now) to decisions.

A cycle, least disruptive action first:

1. order the pending jobs (queue-sort plugin);
2. for each: filters (model, size, quota) -> place (placer plugin, inside a transaction) ->
   if that fails, preempt lower-priority jobs (victim plugin) and place on the room they free ->
   if that fails too, the first such job gets a reservation and later jobs are only *backfilled*
   around it;
3. roll the state back: the cycle's decisions are returned as values for the caller to apply.

The hot path never scans every GPU: placers read index buckets, and a per-cycle cache remembers the
smallest request of each shape that failed, so a backlog of 10,000 jobs costs little more than its sort.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.state import AllocationError, ClusterState, Transaction
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.model.workload import (
    BUILTIN_PRIORITY_CLASSES,
    JobKind,
    JobSpec,
    Level,
    PreemptionPolicy,
    Resources,
)
from rackscale.scheduler import filters as _filters  # noqa: F401  (registers plugins)
from rackscale.scheduler import preemption as _preemption  # noqa: F401
from rackscale.scheduler import queue_order as _queue_order  # noqa: F401
from rackscale.scheduler.backfill import plan_reservation
from rackscale.scheduler.decisions import Decisions, Pending, Placed, Preemption, Reservation, merge_allocs
from rackscale.scheduler.filters import allowed_models
from rackscale.scheduler.framework import (
    FILTERS,
    PLACERS,
    PROFILES,
    QUEUE_SORTS,
    VICTIM_CHOOSERS,
    CycleContext,
    Filter,
    Placer,
    Profile,
    QueueConfig,
    unknown,
)
from rackscale.scheduler.groups import placement_groups
from rackscale.scheduler.pending import PendingQueue, StaticShape, static_shape
from rackscale.scheduler.placement.baselines import BestFitNoTopology, FirstFitSpread, RandomPlacer, SlurmTree
from rackscale.scheduler.placement.request import racks_descending
from rackscale.scheduler.placement.topology_pack import TopologyPack
from rackscale.scheduler.split import SplitAdvisor
from rackscale.scheduler.status import Code, Reason, Status, relative, unschedulable, wait

PLACERS[TopologyPack.name] = lambda seed: TopologyPack()
PLACERS[FirstFitSpread.name] = FirstFitSpread
PLACERS[BestFitNoTopology.name] = lambda seed: BestFitNoTopology()
PLACERS[RandomPlacer.name] = RandomPlacer
PLACERS[SlurmTree.name] = lambda seed: SlurmTree()


# Requests of one shape fail monotonically in their unit count within a cycle (capacity only shrinks as
# jobs are placed), so the smallest failure of a shape answers for every larger one. Everything that
# changes what the scheduler would try is part of the shape: kind, unit resources, constraints, whether
# backfill limits it, priority and preemption policy (who could be preempted), and split eligibility.
# A plain tuple: it is built for every pending job of every cycle.
_Shape = tuple[JobKind, Resources, "Level | None", "Level | None", bool, int, bool, bool]


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
        self._static_filters = [f for f in self.filters if f.static]
        self._dynamic_filters = [f for f in self.filters if not f.static]
        self._static_for: GPUCluster | None = None
        self._static_memo: dict[tuple[object, ...], Status | None] = {}
        self.placer: Placer = PLACERS[profile.placer](seed)
        self._split = SplitAdvisor()
        if profile.victims and profile.victims not in VICTIM_CHOOSERS:
            raise unknown("victim chooser", profile.victims, VICTIM_CHOOSERS)
        self.victims = VICTIM_CHOOSERS[profile.victims]() if profile.victims else None
        self.queues: dict[str, QueueConfig] = dict(queues or {})

    # ------------------------------------------------------------------ the cycle
    def schedule(
        self,
        state: ClusterState,
        pending: Sequence[JobSpec] | PendingQueue,
        now: float,
        *,
        reservation: Reservation | None = None,
    ) -> Decisions:
        """Decide what to start, preempt and keep waiting. ``state`` is left as it was found.

        ``pending`` may be a plain sequence, or a :class:`PendingQueue` kept sorted between cycles by a
        long-running caller (the simulator, the service), which spares a sort of the backlog per cycle.
        ``reservation`` is one still in force from an earlier cycle whose holder is not in ``pending``
        (a caller that schedules only newly arrived jobs): jobs of no higher priority that would delay it
        are kept off its racks, as they would be in a full cycle.
        """
        queue = pending if isinstance(pending, PendingQueue) else PendingQueue(pending)
        self._split.new_cycle()
        ctx = CycleContext(now=now, queues=self.queues, models=state.cluster.gpu_models)
        cycle = Transaction(state)
        placed: list[Placed] = []
        preempted: list[Preemption] = []
        waiting: list[Pending] = []
        failed: dict[_Shape, tuple[int, Status]] = {}
        tried = examined = 0
        min_demand = queue.min_whole_demand()
        # Static shapes whose smallest queued request has failed unconstrained (no reservation racks
        # excluded, split allowed): every queued job of such a shape fails too. Once all shapes are
        # covered the cycle can stop. Inference is left out (a running service's scale-up is not
        # comparable with a new request of the same shape).
        covered: set[StaticShape] = set()
        shapes: int | None = None  # the queue's count of static shapes, read at the first failure
        stop: Status | None = None
        try:
            for job in self.queue_sort.order(queue, state, ctx):
                if shapes is not None and len(covered) == shapes:
                    stop = _SAME_SHAPE_FAILED
                    break  # every queued shape has failed at its smallest size: nothing else can fit
                if examined and min_demand and _no_room_left(state, min_demand, job.priority):
                    stop = _CLUSTER_FULL
                    # No remaining job fits and nobody can be preempted: the rest would fail too. (The
                    # head of the queue is always examined, so it always gets a detailed reason.)
                    break
                examined += 1
                status = self._static_status(job, state, ctx)
                if status is not None:
                    waiting.append(Pending(job, status))
                    continue
                end = now + job.duration_estimate_s if job.duration_estimate_s is not None else None
                exclude: frozenset[int] = frozenset()
                if (
                    reservation is not None
                    and job.name != reservation.job
                    and job.priority <= reservation.priority
                    and not _fits_before(end, reservation)
                ):
                    exclude = reservation.racks
                shape: _Shape = (
                    job.kind,
                    job.unit,
                    job.topology.required,
                    job.topology.preferred,
                    bool(exclude),
                    job.priority,
                    job.preemption_policy is not PreemptionPolicy.NEVER,
                    self._may_split(job, now, state),
                )
                seen = failed.get(shape)
                if seen is not None and job.required_units >= seen[0] and job.name not in state.running:
                    waiting.append(Pending(job, seen[1]))
                    continue
                status = self._run(self._dynamic_filters, job, state, ctx)
                if status is not None:
                    waiting.append(Pending(job, status))
                    continue
                tried += 1
                got = self._place_job(cycle, job, ctx, exclude=exclude, only=None)
                if isinstance(got, Placed):
                    placed.append(got if not exclude else _backfilled(got))
                    continue
                status = got
                if self.victims is not None and job.preemption_policy is not PreemptionPolicy.NEVER:
                    protected = frozenset(p.spec.name for p in placed)
                    done = self._preempt(cycle, job, ctx, exclude=exclude, protected=protected)
                    if done is not None:
                        placed.append(done[0])
                        preempted.extend(done[1])
                        failed.clear()  # room was freed: earlier failures may fit now
                        covered.clear()
                        continue
                failed[shape] = (job.required_units, status)
                if shape[7] and job.kind is not JobKind.INFERENCE:
                    static = static_shape(job)
                    # Unconstrained, the failure answers for the shape; fenced off the reserved racks,
                    # only if every queued job of the shape is fenced too (none ends before the start).
                    if not exclude or (
                        reservation is not None
                        and (reservation.start is None or now + queue.min_duration(static) > reservation.start)
                    ):
                        if shapes is None:
                            shapes = queue.shape_count()
                        if job.required_units <= (queue.min_units(static) or 0):
                            covered.add(static)
                if reservation is None and self.profile.backfill and status.code is Code.UNSCHEDULABLE:
                    reservation = plan_reservation(job, state, ctx)
                    if reservation is not None:
                        status = _reserved_status(job, reservation, state, now)
                elif reservation is not None and job.name != reservation.job and exclude:
                    status = wait(
                        Reason.RESERVATION,
                        f"{status.message}; rack(s) {_rack_names(state, reservation.racks)} are held for a job "
                        "ahead of it in the queue, which this job would delay",
                        "backfill",
                    )
                waiting.append(Pending(job, status))
        finally:
            cycle.rollback()
        unexamined = len(queue) - examined
        return Decisions(
            placed=tuple(placed),
            preemptions=tuple(preempted),
            pending=tuple(waiting),
            reservation=reservation,
            not_examined=unexamined,
            not_examined_status=stop if unexamined else None,
            stats={"pending": len(queue), "examined": examined, "tried": tried, "placed": len(placed)},
        )

    def refresh_reservation(self, reservation: Reservation, state: ClusterState, now: float) -> Reservation | None:
        """The reservation its (still pending) holder would get now: running jobs started since it was
        planned may have changed where and when the holder fits. None if the holder is not a job."""
        holder = reservation.job_spec
        if holder is None:
            return None
        ctx = CycleContext(now=now, queues=self.queues, models=state.cluster.gpu_models)
        return plan_reservation(holder, state, ctx)

    def _static_status(self, job: JobSpec, state: ClusterState, ctx: CycleContext) -> Status | None:
        """The static filters' answer, remembered per job shape (they read only the job and the cluster)."""
        if state.cluster is not self._static_for:
            self._static_for, self._static_memo = state.cluster, {}
        key = (job.kind, job.unit, job.units, job.min_units, job.topology.required)
        if key in self._static_memo:
            return self._static_memo[key]
        st = self._static_memo[key] = self._run(self._static_filters, job, state, ctx)
        return st

    @staticmethod
    def _run(filters: list[Filter], job: JobSpec, state: ClusterState, ctx: CycleContext) -> Status | None:
        for f in filters:
            st = f.filter(job, state, ctx)
            if not st.ok:
                return st
        return None

    # ------------------------------------------------------------------ one job
    def _place_job(
        self,
        cycle: Transaction,
        job: JobSpec,
        ctx: CycleContext,
        *,
        exclude: frozenset[int],
        only: frozenset[int] | None,
    ) -> Placed | Status:
        """Place all of a gang, or at least ``min_units`` replicas, inside a sub-transaction."""
        state = cycle.state
        models = allowed_models(job, ctx)
        running = state.running.get(job.name)
        have = running.placement.units if running is not None else 0
        want = job.units - have
        if running is not None and (job.kind is not JobKind.INFERENCE or want <= 0):
            return unschedulable(Reason.PLACED, f"job {job.name!r} is already running", "scheduler")
        need = max(job.required_units - have, 1) if job.kind is JobKind.INFERENCE else want
        if job.kind is JobKind.INFERENCE:
            want = min(want, self._quota_headroom(job, state))  # replicas beyond the quota wait
        groups = placement_groups(
            job,
            state,
            models,
            want,
            exclude=exclude,
            only=only,
            allow_split=lambda: self._may_split(job, ctx.now, state),
        )
        # A gang split into per-unit groups (shared GPUs) keeps its later units where the first went.
        pin_level = job.topology.required if job.is_gang and len(groups) > 1 else None
        mark = len(cycle)  # everything after this mark is this job's: undone together on failure
        allocs: list[NodeAlloc] = []
        units = 0
        avoid_nodes: set[int] = set(running.placement.nodes) if running is not None else set()
        avoid_racks: set[int] = set(running.racks) if running is not None else set()
        for req, n_units in groups:
            if req.spread:
                req = replace(req, avoid_nodes=frozenset(avoid_nodes), avoid_racks=frozenset(avoid_racks))
            if pin_level is not None and allocs:
                req = replace(req, only_racks=_pinned(state, allocs[0].node, pin_level, req.only_racks))
            got = self.placer.place(state, req)
            if got is None:
                break  # the remaining groups are the same request: they would not fit either
            part = tuple(got)
            try:
                if running is None and units == 0:
                    cycle.allocate(job, Placement(job.name, part, n_units), now=ctx.now)
                else:
                    cycle.extend(job.name, part, n_units)
            except AllocationError as err:  # a placer bug must not corrupt the state
                _rollback_to(cycle, mark)
                return unschedulable(Reason.INSUFFICIENT_GPUS, f"placement rejected: {err}", self.placer.name)
            allocs.extend(part)
            units += n_units
            for a in part:
                avoid_nodes.add(a.node)
                avoid_racks.add(state.cluster.nodes[a.node].rack)
        if units < need:
            _rollback_to(cycle, mark)
            return self._why_not(job, state, models, need)
        end = ctx.now + job.duration_estimate_s if job.duration_estimate_s is not None else None
        placement = Placement(job.name, merge_allocs(allocs), units)
        return Placed(job, placement, end, scale_up=running is not None)

    def _may_split(self, job: JobSpec, now: float, state: ClusterState) -> bool:
        """May a gang that prefers one rack be split over racks now? After ``split_wait_s`` of waiting,
        and, with the ``cost`` split policy, only if waiting for a rack would cost more (``split.py``)."""
        if self.profile.split_wait_s > 0 and now - job.submit_time < self.profile.split_wait_s:
            return False
        return self.profile.split_policy != "cost" or self._split.split_pays_off(job, state, now)

    def _quota_headroom(self, job: JobSpec, state: ClusterState) -> int:
        """How many more units the job's queue quota allows (unbounded without a quota)."""
        cfg = self.queues.get(job.queue)
        demand = job.unit.gpu_demand_milli
        if cfg is None or cfg.quota_gpus is None or demand == 0:
            return job.units
        used = state.queue_usage.get(job.queue)
        held = used.gpu_milli if used is not None else 0
        return max(0, (int(cfg.quota_gpus * MILLI_PER_GPU) - held) // demand)

    def _why_not(self, job: JobSpec, state: ClusterState, models: tuple[str, ...], need: int) -> Status:
        free = sum(state.model_free_whole[m] for m in models)
        demand = job.unit.gpu_demand_milli * need / MILLI_PER_GPU
        if job.unit.gpus and free >= demand:
            where = "one rack" if job.topology.required is Level.RACK else "the allowed topology"
            return unschedulable(
                Reason.FRAGMENTED,
                f"{free} GPUs are free but not {demand:g} together in {where} "
                f"(largest free block in a rack: {_largest_block(state, models)}); "
                "waiting for GPUs to free up",
                self.placer.name,
            )
        return unschedulable(
            Reason.INSUFFICIENT_GPUS,
            f"needs {demand:g} GPUs ({', '.join(models)}), {free} whole GPUs free; waiting for GPUs to free up",
            self.placer.name,
        )

    # ------------------------------------------------------------------ preemption
    def _preempt(
        self,
        cycle: Transaction,
        job: JobSpec,
        ctx: CycleContext,
        *,
        exclude: frozenset[int],
        protected: frozenset[str],
    ) -> tuple[Placed, list[Preemption]] | None:
        assert self.victims is not None
        state = cycle.state
        for choice in self.victims.choose(job, state, ctx, exclude_racks=exclude, protected=protected):
            mark = len(cycle)
            for v in choice.victims:
                cycle.release(v.spec.name)
            got = self._place_job(cycle, job, ctx, exclude=exclude, only=choice.racks)
            if isinstance(got, Placed):
                break
            _rollback_to(cycle, mark)  # nobody is preempted for nothing
        else:
            return None
        reasons = [
            Preemption(
                victim=v.spec.name,
                preemptor=job.name,
                # No job names: the host shows this to the victim's owner, who may be another tenant.
                reason=f"priority {job.priority} > {v.spec.priority}, to free GPUs in rack(s) "
                f"{_rack_names(state, choice.racks)}",
            )
            for v in choice.victims
        ]
        return got, reasons


def _pinned(state: ClusterState, node: int, level: Level, only: frozenset[int] | None) -> frozenset[int]:
    """The racks a gang's later units may use once its first unit is on ``node``."""
    cluster = state.cluster
    rack = cluster.nodes[node].rack
    racks = frozenset({rack}) if level is Level.RACK else frozenset(cluster.regions[cluster.racks[rack].region].racks)
    return racks if only is None else racks & only


def _rollback_to(tx: Transaction, mark: int) -> None:
    """Undo the transaction's entries after ``mark`` (a nested rollback)."""
    tail = Transaction(tx.state)
    tail._log = tx._log[mark:]
    del tx._log[mark:]
    tail.rollback()


_CLUSTER_FULL = Status(
    Code.UNSCHEDULABLE,
    Reason.INSUFFICIENT_GPUS,
    "waiting for GPUs: fewer GPUs are free than any pending job needs, and no lower-priority job can be "
    "preempted (not examined in detail this cycle)",
    "scheduler",
)


_SAME_SHAPE_FAILED = Status(
    Code.UNSCHEDULABLE,
    Reason.INSUFFICIENT_GPUS,
    "waiting for GPUs: a job ahead in the queue asking for the same resources, or fewer, could not be "
    "placed this cycle (not examined in detail)",
    "scheduler",
)


def _no_room_left(state: ClusterState, min_demand: int, priority: int) -> bool:
    """True when fewer whole GPUs are free than the smallest pending job needs, and no running job of
    lower priority than ``priority`` (the highest priority still to be tried) could make room."""
    return state.free_whole_gpus < min_demand and not state.has_preemptible_below(priority)


def _largest_block(state: ClusterState, models: tuple[str, ...]) -> int:
    top = next(racks_descending(state, models, 0), None)
    return state.rack_whole[top] if top is not None else 0


def _fits_before(end: float | None, reservation: Reservation) -> bool:
    return end is not None and reservation.start is not None and end <= reservation.start


def _backfilled(p: Placed) -> Placed:
    return Placed(p.spec, p.placement, p.expected_end, backfilled=True, scale_up=p.scale_up)


def _reserved_status(job: JobSpec, r: Reservation, state: ClusterState, now: float) -> Status:
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
        f"waiting for GPUs: rack(s) {_rack_names(state, r.racks)} are reserved for it {when}; smaller jobs are "
        "backfilled only where they do not delay it",
        "backfill",
        at=at,
        when=when if at is not None else "",
    )


def _rack_names(state: ClusterState, racks: frozenset[int] | set[int]) -> str:
    names = [state.cluster.racks[r].name for r in sorted(racks)]
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


__all__ = ["BUILTIN_PRIORITY_CLASSES", "QueueConfig", "ResourceScheduler"]
