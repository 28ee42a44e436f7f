"""Placing one job: all of a gang (or at least ``min_units`` replicas), or nothing.

The job is turned into placement groups (``groups.py``), the profile's placer is asked for each, and
every group's slices are admitted through the cycle's transaction; if the job cannot be placed in full,
the transaction is rolled back to the checkpoint taken before it. A placer is a plugin: one that raises,
or returns slices the state refuses, is a bug of rackscale's, reported to the job as ``Code.ERROR``
(never as a lack of GPUs), with the state rolled back and the rest of the cycle unaffected.
"""

from __future__ import annotations

from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.topology import MILLI_PER_GPU
from rackscale.model.transaction import Transaction
from rackscale.model.view import StateView
from rackscale.model.workload import JobKind, JobSpec, Level
from rackscale.scheduler.decisions import Placed, merge_allocs
from rackscale.scheduler.elastic_sizes import at_size, smaller_sizes
from rackscale.scheduler.filters import allowed_models
from rackscale.scheduler.framework import CycleContext, Placer, Profile, QueueConfig
from rackscale.scheduler.groups import placement_groups
from rackscale.scheduler.placement.request import racks_descending
from rackscale.scheduler.split import SplitAdvisor
from rackscale.scheduler.status import Code, Reason, Status, internal_error, unschedulable


class GangPlacement:
    """The placement step the actions share: the profile's placer, its split policy and the quotas."""

    def __init__(self, *, placer: Placer, profile: Profile, queues: dict[str, QueueConfig]) -> None:
        self.placer = placer
        self.profile = profile
        self.queues = queues
        self.split = SplitAdvisor()

    def new_cycle(self) -> None:
        self.split.new_cycle()

    def place(
        self,
        tx: Transaction,
        job: JobSpec,
        ctx: CycleContext,
        *,
        exclude: frozenset[int],
        only: frozenset[int] | None,
        backfilled: bool = False,
    ) -> Placed | Status:
        """Place the job through ``tx``; on failure nothing of it stays in the state. An elastic gang (where
        the profile allows) that does not fit at the size it asked for starts smaller (``elastic_sizes``).
        ``backfilled``: what the answer says (the backfill action's placements; one ``Placed`` built, not two)."""
        got = self._place(tx, job, ctx, exclude=exclude, only=only, backfilled=backfilled)
        if isinstance(got, Placed) or got.code is Code.ERROR or not (self.profile.elastic and job.is_elastic):
            return got
        if job.name in tx.state.running:
            return got
        for units in smaller_sizes(job, tx.state, allowed_models(job, ctx)):
            smaller = self._place(tx, at_size(job, units), ctx, exclude=exclude, only=only)
            if isinstance(smaller, Placed):
                est = job.duration_estimate_s
                # Slower in proportion on fewer GPUs (the same work: see ``training_step``).
                end = ctx.now + est * job.units / units if est is not None else None
                return Placed(job, smaller.placement, end, backfilled=backfilled)
            if smaller.code is Code.ERROR:
                return smaller
        return got

    def _place(
        self,
        tx: Transaction,
        job: JobSpec,
        ctx: CycleContext,
        *,
        exclude: frozenset[int],
        only: frozenset[int] | None,
        backfilled: bool = False,
    ) -> Placed | Status:
        state: StateView = tx.state
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
            allow_split=lambda: self.may_split(job, ctx.now, state),
        )
        # A gang split into per-unit groups (shared GPUs) keeps its later units where the first went.
        several = len(groups) > 1
        pin_level = job.topology.required if several and job.is_gang else None
        before = tx.checkpoint()  # everything after it is this job's: undone together on failure
        allocs: list[NodeAlloc] = []
        units = 0
        # Where the job's units are already (replicas spread away from them): only a group that spreads
        # reads them, and only a later group the units this call places.
        avoid_nodes: set[int] = set(running.placement.nodes) if running is not None else set()
        avoid_racks: set[int] = set(running.racks) if running is not None else set()
        first: Placement | None = None  # what the state was given: the answer too, when nothing merges
        for req, n_units in groups:
            if req.spread:
                req = req._replace(avoid_nodes=frozenset(avoid_nodes), avoid_racks=frozenset(avoid_racks))
            if pin_level is not None and allocs:
                req = req._replace(only_racks=_pinned(state, allocs[0].node, pin_level, req.only_racks))
            try:
                got = self.placer.place(state, req)
                if got is None:
                    break  # the remaining groups are the same request: they would not fit either
                part = tuple(got)
            except Exception as err:  # a plugin's bug: this job's error, not the cycle's
                tx.rollback(before)
                return self._error(job, f"raised {type(err).__name__}: {err}")
            try:
                if running is None and units == 0:
                    first = Placement(job.name, part, n_units)
                    tx.allocate(job, first, now=ctx.now)
                else:
                    tx.extend(job.name, part, n_units)
            except Exception as err:  # slices the state refuses (AllocationError), or not slices at all
                tx.rollback(before)
                return self._error(job, f"returned an invalid placement: {err}")
            allocs.extend(part)
            units += n_units
            if several:  # only a later group reads them (a gang is one group: nothing to track)
                for a in part:
                    avoid_nodes.add(a.node)
                    avoid_racks.add(state.cluster.nodes[a.node].rack)
        if units < need:
            tx.rollback(before)
            return self._why_not(job, state, models, need)
        end = ctx.now + job.duration_estimate_s if job.duration_estimate_s is not None else None
        if first is not None and first.units == units and len(first.allocs) == len(allocs) == 1:
            placement = first  # one slice (most jobs): nothing to merge
        else:
            merged = merge_allocs(allocs)
            if first is not None and first.units == units and first.allocs == merged:
                placement = first
            else:
                placement = Placement(job.name, merged, units)
        return Placed(job, placement, end, backfilled, running is not None)  # (by position: one per placement)

    def split_is_free(self, job: JobSpec) -> bool:
        """Is ``may_split`` true for ``job`` at any instant, whatever the state? Then admission reads it once
        per queued job (its memo) rather than asking every cycle (most of a backlog's jobs: one GPU)."""
        return self.profile.split_wait_s <= 0 and (self.profile.split_policy != "cost" or job.total_gpus < 2)

    def may_split(self, job: JobSpec, now: float, state: StateView) -> bool:
        """May a gang that prefers one rack be split over racks now? After ``split_wait_s`` of waiting,
        and, with the ``cost`` split policy, only if waiting for a rack would cost more (``split.py``)."""
        if self.profile.split_wait_s > 0 and now - job.submit_time < self.profile.split_wait_s:
            return False
        return self.profile.split_policy != "cost" or self.split.split_pays_off(job, state, now)

    def _error(self, job: JobSpec, what: str) -> Status:
        return internal_error(
            f"internal error: the placer {self.placer.name!r} {what} while placing job {job.name!r}; "
            "the job stays queued and is tried again next cycle (please report this)",
            self.placer.name,
        )

    def _quota_headroom(self, job: JobSpec, state: StateView) -> int:
        """How many more units the job's queue quota allows (unbounded without a quota)."""
        cfg = self.queues.get(job.queue)
        demand = job.unit.gpu_demand_milli
        if cfg is None or cfg.quota_gpus is None or demand == 0:
            return job.units
        used = state.queue_usage.get(job.queue)
        held = used.gpu_milli if used is not None else 0
        return max(0, (int(cfg.quota_gpus * MILLI_PER_GPU) - held) // demand)

    def _why_not(self, job: JobSpec, state: StateView, models: tuple[str, ...], need: int) -> Status:
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


def _pinned(state: StateView, node: int, level: Level, only: frozenset[int] | None) -> frozenset[int]:
    """The racks a gang's later units may use once its first unit is on ``node``."""
    cluster = state.cluster
    rack = cluster.nodes[node].rack
    racks = frozenset({rack}) if level is Level.RACK else frozenset(cluster.regions[cluster.racks[rack].region].racks)
    return racks if only is None else racks & only


def _largest_block(state: StateView, models: tuple[str, ...]) -> int:
    top = next(racks_descending(state, models, 0), None)
    return state.rack_whole[top] if top is not None else 0
