"""Victim choice: the fewest and cheapest lower-priority jobs whose GPUs let the preemptor run now.

Cost of a victim, cheapest first: lower priority, then less work lost since its last checkpoint
(GPU-seconds), then more GPUs freed. Victims are sought rack by rack, so the GPUs they free are in the
NVLink domain the preemptor will use; a gang larger than a rack clears the cheapest whole racks of one
region. The scheduler then *tries* the placement on the freed racks and rolls back if it still fails,
so nobody is preempted for nothing.

With disruption budgets (``budgets.py``), victims within them come first and the racks whose victims go the
fewest disruptions past them rank first; a victim past a budget is still taken when nothing else frees the room.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rackscale.model.running import RunningJob
from rackscale.model.topology import MILLI_PER_GPU, Rack
from rackscale.model.view import StateView
from rackscale.model.workload import JobKind, JobSpec, Level
from rackscale.scheduler.budgets import BudgetLedger
from rackscale.scheduler.filters import allowed_models
from rackscale.scheduler.framework import VICTIM_CHOOSERS, CycleContext, VictimChoice


def last_checkpoint(rj: RunningJob, now: float) -> float:
    """When the job last saved its progress (its start if it never did)."""
    ckpt = rj.checkpointed_at if rj.checkpointed_at is not None else rj.started_at
    interval = rj.spec.checkpoint_interval_s
    if interval:
        elapsed = now - rj.started_at
        steps = elapsed / interval
        # (A tiny interval the spec allows, > 0 as 1e-320, overflows the quotient, and floor(inf) raises in the
        # middle of a cycle: then the remainder. Otherwise the quotient, to the last bit as it always was.)
        periodic = rj.started_at + math.floor(steps) * interval if math.isfinite(steps) else now - elapsed % interval
        ckpt = max(ckpt, periodic)
    return ckpt


def lost_work(rj: RunningJob, now: float) -> float:
    """GPU-seconds of progress lost if the job is stopped now."""
    return max(0.0, now - last_checkpoint(rj, now)) * rj.placement.gpu_milli / MILLI_PER_GPU


def _replicas_needed(job: JobSpec, state: StateView) -> int:
    """The replicas an inference job's victims make room for. A service that is not running: all it asks
    (``units``; the host asks for what its load needs now, see ``ServicesMixin._start_request``), though its
    placement needs only ``min_units``: room for the minimum alone left services short of their load until the
    autoscaler's ticks added one replica each. A running service's scale-up: what its placement must get
    (``min_units`` less those it runs: one replica), as ``GangPlacement._place`` asks."""
    held = state.running.get(job.name)
    if held is None:
        return max(job.units, 1)
    return max(job.required_units - held.placement.units, 1)


def _healthy_whole_by_node(state: StateView, rj: RunningJob, rack: int) -> dict[int, int]:
    """Whole GPUs ``rj`` would give back on each healthy node of ``rack`` (failed hardware frees nothing).

    A shared-GPU slice counts as one GPU when it is the GPU's only user (a hopeful estimate: the
    placement attempt after the release is the real check)."""
    nodes = state.cluster.nodes
    out: dict[int, int] = {}
    for a in rj.placement.allocs:
        n = a.node
        if nodes[n].rack != rack or state.node_down[n]:
            continue
        failed = state.gpu_failed[n]
        if a.milli >= MILLI_PER_GPU:
            k = sum(1 for g in a.gpus if g not in failed)
        else:
            k = sum(1 for g in a.gpus if g not in failed and state.gpu_free[n][g] + a.milli >= MILLI_PER_GPU)
        if k:
            out[n] = out.get(n, 0) + k
    return out


MAX_CHOICES = 8  # candidate racks the scheduler may try, best first


class CheapestVictims:
    name = "cheapest-victims"

    def choose(
        self,
        job: JobSpec,
        state: StateView,
        ctx: CycleContext,
        *,
        exclude_racks: frozenset[int],
        protected: frozenset[str] = frozenset(),
    ) -> list[VictimChoice]:
        can_victimise = self.eligible(job, state, ctx, protected=protected)
        if can_victimise is None:
            return []  # nobody could be a victim: skip the search
        models = set(allowed_models(job, ctx))
        now = ctx.now

        def cost(rj: RunningJob) -> tuple[int, float, int, str]:
            return (rj.spec.priority, lost_work(rj, now), -rj.placement.gpu_milli, rj.spec.name)

        # What must fit on the rack's nodes: ``units`` units of ``w`` whole GPUs each.
        unit = job.unit
        if job.kind is JobKind.INFERENCE or unit.gpus == 0:
            w = unit.gpus if 0 < unit.gpus <= state.max_node_gpus else 1
            units = 1 if 0 < unit.gpus <= state.max_node_gpus else max(1, unit.gpus)
            if job.kind is JobKind.INFERENCE and unit.gpus > 0:
                # Room for the replicas it asks for (``_replicas_needed``), not one: room for fewer than
                # its placement needs is rolled back, and the service waits, preempting no one, however low
                # the priority of what holds the rack.
                units *= _replicas_needed(job, state)
        else:
            w, units = unit.gpus, job.units
        racks = [r for r in state.cluster.racks if r.gpu_model in models and r.index not in exclude_racks]
        cap = max((r.gpus for r in racks), default=0)
        ledger = ctx.budgets
        if w * units > cap and job.topology.required is not Level.RACK:
            got = self._clear_racks(state, racks, w * units, can_victimise, cost, now, ledger)
            return [got] if got is not None else []
        scored: list[tuple[tuple[int, int, int, float, int], VictimChoice]] = []
        for rack in racks:
            cands = [state.running[j] for j in state.rack_jobs[rack.index]]
            cands = sorted((rj for rj in cands if can_victimise(rj)), key=cost)
            if not cands:
                continue
            free = {n: state.node_whole[n] for n in rack.nodes}
            gives = [_healthy_whole_by_node(state, rj, rack.index) for rj in cands]

            def room(with_: list[int], free: dict[int, int] = free, gives: list[dict[int, int]] = gives) -> int:
                node_free = dict(free)
                for i in with_:
                    for n, k in gives[i].items():
                        node_free[n] += k
                return sum(f // w for f in node_free.values())

            # The cheapest first; with budgets, those whose stop keeps within them first, and the others only
            # if those do not free the room (``budgets.py``).
            picked: list[int] = []
            over: list[int] = []  # past a budget, taken last
            taken: dict[str, int] = {}
            for i in range(len(cands)):
                if room(picked) >= units:
                    break
                if ledger is not None:
                    name = cands[i].spec.name
                    if not ledger.within(name, taken):
                        over.append(i)
                        continue
                    ledger.take(name, taken)
                picked.append(i)
            for i in over:
                if room(picked) >= units:
                    break
                picked.append(i)
            if not picked or room(picked) < units:
                continue
            # Give back the victims that turned out not to be needed, most expensive first; those past a budget
            # before the others, so that as few as may be go past them.
            past = set(over)
            for i in sorted(picked, key=lambda i: (i in past, cost(cands[i])), reverse=True):
                rest = [j for j in picked if j != i]
                if rest and room(rest) >= units:
                    picked = rest
            victims = tuple(cands[i] for i in picked)
            key = (
                ledger.past(v.spec.name for v in victims) if ledger is not None else 0,  # the fewest first
                len(victims),
                max(v.spec.priority for v in victims),
                sum(lost_work(v, now) for v in victims),
                rack.index,
            )
            scored.append((key, VictimChoice(victims, frozenset({rack.index}))))
        scored.sort(key=lambda e: e[0])
        return [c for _, c in scored[:MAX_CHOICES]]

    def eligible(
        self, job: JobSpec, state: StateView, ctx: CycleContext, *, protected: frozenset[str]
    ) -> Callable[[RunningJob], bool] | None:
        """Which running jobs ``job`` may preempt, or None when no running job could be one (the search is
        skipped). Here: preemptible jobs of lower priority, not placed this cycle. A subclass widens it."""
        if not state.has_preemptible_below(job.priority):
            return None

        def can_victimise(rj: RunningJob) -> bool:
            return rj.spec.priority < job.priority and rj.spec.preemptible and rj.spec.name not in protected

        return can_victimise

    def explain(self, job: JobSpec, victim: RunningJob, ctx: CycleContext) -> str:
        """Why ``victim`` is preempted for ``job``, for the victim's owner: no job names (the preemptor may
        be another tenant's)."""
        return f"priority {job.priority} > {victim.spec.priority}"

    def may_take_equal(self, priority: int, state: StateView, ctx: CycleContext) -> bool:
        return False  # lower priorities only

    def _clear_racks(
        self,
        state: StateView,
        racks: list[Rack],
        need: int,
        can_victimise: Callable[[RunningJob], bool],
        cost: Callable[[RunningJob], tuple[int, float, int, str]],
        now: float,
        ledger: BudgetLedger | None = None,
    ) -> VictimChoice | None:
        """A gang larger than a rack: clear the cheapest racks of one region (with budgets: those whose jobs go
        the least past them first)."""
        by_region: dict[int, list[tuple[tuple[int, int, float], int, list[RunningJob]]]] = {}
        for rack in racks:
            jobs = [state.running[j] for j in state.rack_jobs[rack.index]]
            if not all(can_victimise(rj) for rj in jobs):
                continue
            past = ledger.past(rj.spec.name for rj in jobs) if ledger is not None else 0
            key = (past, len(jobs), sum(lost_work(rj, now) for rj in jobs))
            by_region.setdefault(rack.region, []).append((key, rack.index, sorted(jobs, key=cost)))
        Option = tuple[
            tuple[int, int, float, int],
            dict[str, RunningJob],
            list[tuple[tuple[int, int, float], int, list[RunningJob]]],
        ]
        options: list[Option] = []
        for region, entries in by_region.items():
            entries.sort(key=lambda e: (e[0], e[1]))
            chosen: list[tuple[tuple[int, int, float], int, list[RunningJob]]] = []
            gpus = 0
            for e in entries:
                if gpus >= need:
                    break
                chosen.append(e)
                gpus += state.rack_capacity(e[1])
            if gpus >= need:
                victims = {rj.spec.name: rj for e in chosen for rj in e[2]}
                past = ledger.past(victims) if ledger is not None else 0
                options.append(((past, len(victims), sum(e[0][2] for e in chosen), region), victims, chosen))
        if not options:
            return None
        _, victims, chosen = min(options, key=lambda o: o[0])
        if not victims:
            return None
        return VictimChoice(tuple(sorted(victims.values(), key=cost)), frozenset(e[1] for e in chosen))


VICTIM_CHOOSERS[CheapestVictims.name] = CheapestVictims
