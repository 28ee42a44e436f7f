"""Elastic training: gangs that run on any worker count between ``min_units`` and ``max_units``.

Sizes move in steps of ``JobSpec.resize_step`` workers: 1, or one data-parallel rank of an LLM gang (its
model shard, TP x PP x EP GPUs, which a restart keeps; ``llm.jobs.elastic_llm``).

A training job with ``minGpus``/``maxGpus`` (``JobSpec.is_elastic``) keeps its global batch at any size, so
its work is the same and only its speed changes (``network.collectives.training_step``). Where the profile
enables it (``Profile.elastic``), three things use that freedom, least disruptive first:

- **start smaller** (``elastic_sizes.smaller_sizes``, read by ``gang.py``): a gang that does not fit at the size it
  asked for starts at the largest size that fits one rack (or, if none does, the cluster), down to its
  minimum, instead of waiting;
- :class:`Shrink` (an action, after reclaim and before preempt): a waiting job that cannot be placed
  takes GPUs from running elastic gangs of no higher priority: GPUs a gang grew into beyond its request
  from any such job, GPUs down to its minimum only for a job of strictly higher priority, which would
  otherwise preempt it whole. The rack the waiting job needs least shrinking for is chosen first;
- :func:`grow` (after every pending job was tried): a gang below its maximum takes the free GPUs in the
  racks it already runs in (not another rack: a ring that leaves its rack runs at the NIC's speed; except
  a gang that started below a request larger than its racks, which may take other racks' free GPUs up to
  that request: it asked to span them, and a gang started on one rack of the two it asked for would
  otherwise run at half speed to its end), a
  reservation's racks only on loan (beyond its request, which the reservation counts as free, while the
  holder's start is ``loans.MIN_LOAN_S`` away), after at least ``MIN_RESIZE_INTERVAL_S`` at its current
  size, and only when the time it saves exceeds what the restart costs.

A size change is a restart from a checkpoint taken on the signal (TorchElastic's rendezvous): the host
charges ``RESIZE_COST_S`` of the job's time at its new size (``host.progress.Progress.resize``).
"""

from __future__ import annotations

from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.running import RunningJob
from rackscale.model.topology import MILLI_PER_GPU
from rackscale.model.view import StateView
from rackscale.model.workload import JobSpec, Level
from rackscale.scheduler.cycle import Attempt, Cycle
from rackscale.scheduler.decisions import Placed, Resized, ResizeKind, merge_allocs
from rackscale.scheduler.filters import allowed_models
from rackscale.scheduler.framework import Placer
from rackscale.scheduler.gang import GangPlacement
from rackscale.scheduler.loans import MIN_LOAN_S
from rackscale.scheduler.placement.request import GroupRequest, racks_descending
from rackscale.scheduler.status import Code

# What a size change costs the job: saving a checkpoint on the signal, the rendezvous of the new worker set
# and reloading (an assumption of a minute, as ``RuntimeDefaults.save_s``; ElasticFlow and Pollux report
# tens of seconds to minutes for a re-scale).
RESIZE_COST_S = 60.0
# A gang is not grown again sooner than this after it started or changed size (no grow/shrink flapping).
MIN_RESIZE_INTERVAL_S = 600.0
# Grow only when the time saved is at least this many times the restart's cost.
GROW_GAIN_FACTOR = 4.0


class Shrink:
    name = "shrink"

    def __init__(self, gang: GangPlacement) -> None:
        self.gang = gang

    def run(self, cycle: Cycle, attempt: Attempt) -> bool:
        job = attempt.job
        state = cycle.state
        g = job.unit.gpus
        if not attempt.may_preempt or not g or job.name in state.running:
            return False
        if attempt.status is not None and attempt.status.code is Code.ERROR:
            return False
        if cycle.elastic is None:  # once per cycle (not per waiting job): the running gangs that may give
            cycle.elastic = tuple(rj.spec.name for rj in _elastic_running(state))
        if not cycle.elastic:
            return False
        protected = {p.spec.name for p in cycle.placed}
        running = state.running
        donors = [
            (rj, floor)
            for name in cycle.elastic
            if name not in protected
            and (rj := running.get(name)) is not None  # (preempted since)
            and (floor := _floor(rj, job)) < rj.placement.units
        ]
        if not donors:
            return False
        need = job.total_gpus
        one_rack = need <= state.cluster.max_rack_gpus and job.topology.preferred is Level.RACK
        one_rack |= job.topology.required is Level.RACK
        spare = sum((rj.placement.units - floor) * rj.spec.unit.gpus for rj, floor in donors)
        if state.free_whole_gpus + spare < need:
            return False
        racks = self._racks(state, donors, need, attempt.exclude) if one_rack else [None]
        tx = cycle.tx
        for rack in racks:
            before = tx.checkpoint()
            shrunk = self._shrink(cycle, donors, need, rack)
            if not shrunk:
                tx.rollback(before)
                continue
            only = frozenset({rack}) if rack is not None else None
            got = self.gang.place(tx, job, cycle.ctx, exclude=attempt.exclude, only=only)
            if isinstance(got, Placed):
                for name, (rz, placement) in shrunk.items():
                    first = cycle.resized.get(name)
                    was = first.units_before if first is not None else rz.placement.units
                    cycle.resized[name] = Resized(
                        rz.spec, placement, was, ResizeKind.SHRUNK, _shrink_reason(rz, job, was, placement)
                    )
                cycle.placed.append(got)
                cycle.room_was_freed()
                return True
            tx.rollback(before)
            if got.code is Code.ERROR:
                attempt.status = got
                return False
        return False

    @staticmethod
    def _racks(
        state: StateView, donors: list[tuple[RunningJob, int]], need: int, exclude: frozenset[int]
    ) -> list[int | None]:
        """Racks where free GPUs plus what the donors could give reach ``need``, most free first (the least
        shrinking); at most three are tried."""
        spare: dict[int, int] = {}
        for rj, floor in donors:
            give = (rj.placement.units - floor) * rj.spec.unit.gpus
            for rack, held in _whole_by_rack(state, rj).items():
                spare[rack] = spare.get(rack, 0) + min(give, held)
        ok = [r for r, s in spare.items() if r not in exclude and state.rack_whole[r] + s >= need]
        ok.sort(key=lambda r: (-state.rack_whole[r], r))
        return list(ok[:3])

    @staticmethod
    def _shrink(
        cycle: Cycle, donors: list[tuple[RunningJob, int]], need: int, rack: int | None
    ) -> dict[str, tuple[RunningJob, Placement]]:
        """Give back workers (whole slices of the donors, in ``rack`` if given) until ``need`` whole GPUs are
        free there; the donors' new placements, or nothing if they cannot give enough."""
        state, tx = cycle.state, cycle.tx
        free = state.rack_whole[rack] if rack is not None else state.free_whole_gpus
        out: dict[str, tuple[RunningJob, Placement]] = {}
        # The most spare first: fewer jobs restart.
        for rj, floor in sorted(donors, key=lambda d: (-(d[0].placement.units - d[1]), d[0].spec.name)):
            if free >= need:
                break
            if rack is not None and rack not in rj.racks:
                continue
            g, step = rj.spec.unit.gpus, rj.spec.resize_step
            give = min(rj.placement.units - floor, -(-(need - free) // (g * step)) * step)
            kept, given = _without_units(state, rj, give, rack)
            if given % step:  # (the rack held part of a rank) whole data-parallel ranks only
                kept, given = _without_units(state, rj, given // step * step, rack)
            if not given:
                continue
            placement = Placement(rj.spec.name, kept, rj.placement.units - given)
            tx.release(rj.spec.name)
            tx.allocate(rj.spec, placement, now=rj.started_at, expected_end=rj.expected_end)
            out[rj.spec.name] = (rj, placement)
            free += given * g
        return out if free >= need else {}


def grow(cycle: Cycle, placer: Placer) -> None:
    """Grow running elastic gangs into the free GPUs of their own racks (see the module docstring)."""
    state, ctx = cycle.state, cycle.ctx
    if not state.elastic:
        return  # (every cycle asks: most clusters run no elastic gang)
    now = ctx.now
    r = cycle.reservation
    held = r.racks if r is not None else frozenset()
    far = r is not None and (r.start is None or r.start - now >= MIN_LOAN_S)
    placed = {p.spec.name for p in cycle.placed}
    tx = cycle.tx
    rack_gpus = state.cluster.max_rack_gpus
    for rj in sorted(_elastic_running(state), key=lambda rj: (-rj.spec.priority, rj.spec.name)):
        spec, name = rj.spec, rj.spec.name
        top = spec.elastic_max_units
        have = rj.placement.units
        g = spec.unit.gpus
        if have >= top or name in placed or name in cycle.resized or not g:
            continue
        if now - max(rj.started_at, rj.checkpointed_at or 0.0) < MIN_RESIZE_INTERVAL_S:
            continue
        # A reservation's racks only on loan, as ``loans.Lend`` lends: beyond what the gang asked for (the
        # reservation counts that as free: ``backfill._grown``), for a holder of no lower priority whose
        # start is far enough off; the shrink action gives it back when the holder can start.
        lend = far and r is not None and spec.priority <= r.priority and have >= spec.units
        racks = frozenset(rj.racks) if lend else frozenset(rj.racks) - held
        room = sum(state.rack_whole[k] for k in racks) // g
        models = allowed_models(spec, ctx)
        if have < spec.units and room < spec.units - have and spec.total_gpus > len(rj.racks) * rack_gpus:
            # Started below a request larger than its racks: it asked to span more racks, so it may take
            # free GPUs in others, up to its request (beyond it, growth stays in its racks, as above).
            more, extra = _wider(state, racks | held, spec.units - have - room, models, g, g * spec.resize_step)
            racks, room = racks | more, min(room + extra, spec.units - have)
        k = (have + min(top - have, room)) // spec.resize_step * spec.resize_step - have  # whole DP ranks
        if k <= 0 or not _grow_pays(rj, have, have + k, now):
            continue
        req = GroupRequest(
            job=name,
            units=k,
            unit=spec.unit,
            models=models,
            one_rack=len(racks) == 1,
            prefer_one_rack=len(racks) == 1,
            only_racks=racks,
        )
        got = placer.place(state, req)
        if not got:
            continue
        tx.extend(name, tuple(got), k)
        now_holds = state.running[name].placement
        placement = Placement(name, merge_allocs(list(now_holds.allocs)), now_holds.units)
        cycle.resized[name] = Resized(
            spec,
            placement,
            have,
            ResizeKind.GROWN,
            f"grown from {have * g} to {placement.units * g} GPUs into free GPUs of its rack(s) "
            f"(maxGpus {top * g}); given back when a waiting job needs them",
        )


def _wider(
    state: StateView, skip: frozenset[int], need: int, models: tuple[str, ...], gpus: int, rank_gpus: int
) -> tuple[frozenset[int], int]:
    """Racks other than ``skip`` with room for a rank (``rank_gpus``) or more, the most free first (an index
    walk, no scan of the racks), until they hold ``need`` workers of ``gpus``: those racks and the workers
    they hold."""
    got: set[int] = set()
    room = 0
    for rack in racks_descending(state, models, rank_gpus):
        if room >= need:
            break
        if rack not in skip:
            got.add(rack)
            room += state.rack_whole[rack] // gpus
    return frozenset(got), room


def _elastic_running(state: StateView) -> list[RunningJob]:
    """The running elastic gangs (the state's index: no scan of the running jobs), in name order."""
    running = state.running
    return [running[name] for name in sorted(state.elastic)]


def _floor(rj: RunningJob, job: JobSpec) -> int:
    """The fewest workers ``rj`` keeps for ``job``: its request for a job of its own priority (only what it
    grew into goes back), its minimum for a higher one; all of them (no shrink) for a lower one."""
    spec = rj.spec
    if job.priority < spec.priority:
        return rj.placement.units
    if job.priority > spec.priority:
        return spec.min_units or spec.units
    return min(spec.units, rj.placement.units)


def _whole_by_rack(state: StateView, rj: RunningJob) -> dict[int, int]:
    nodes = state.cluster.nodes
    out: dict[int, int] = {}
    for a in rj.placement.allocs:
        out[nodes[a.node].rack] = out.get(nodes[a.node].rack, 0) + a.whole_gpus
    return out


def _without_units(state: StateView, rj: RunningJob, give: int, rack: int | None) -> tuple[tuple[NodeAlloc, ...], int]:
    """``rj``'s slices with up to ``give`` workers removed (from ``rack`` only, if given; the last slices
    first), and how many were removed. Workers larger than a node are not split off (none are removed)."""
    nodes = state.cluster.nodes
    spec = rj.spec
    g = spec.unit.gpus
    kept: list[NodeAlloc] = []
    given = 0
    for a in reversed(rj.placement.allocs):
        if given >= give or a.milli != MILLI_PER_GPU or (rack is not None and nodes[a.node].rack != rack):
            kept.append(a)
            continue
        n = len(a.gpus) // g
        take = min(n, give - given)
        if take <= 0 or len(a.gpus) % g:
            kept.append(a)
            continue
        given += take
        left = len(a.gpus) - take * g
        if left:
            kept.append(
                NodeAlloc(
                    a.node,
                    a.gpus[:left],
                    a.milli,
                    a.cpu_milli - take * spec.unit.cpu_milli,
                    a.memory_mib - take * spec.unit.memory_mib,
                )
            )
    kept.reverse()
    return tuple(kept), given


def _grow_pays(rj: RunningJob, have: int, to: int, now: float) -> bool:
    """The time saved (at linear scaling, over the estimated rest of the run) beats the restart's cost; a job
    without an end estimate is grown (its rest is unknown, and a long one gains most)."""
    if rj.expected_end is None:
        return True
    rest = max(rj.expected_end - now, 0.0)
    return rest * (1.0 - have / to) > GROW_GAIN_FACTOR * RESIZE_COST_S


def _shrink_reason(rj: RunningJob, job: JobSpec, was: int, placement: Placement) -> str:
    g = rj.spec.unit.gpus
    why = (
        "a waiting job of higher priority needs them"
        if job.priority > rj.spec.priority
        else f"it had grown beyond the {rj.spec.units * g} GPUs it asked for and a waiting job needs them"
    )
    return f"shrunk from {was * g} to {placement.units * g} GPUs: {why}"
