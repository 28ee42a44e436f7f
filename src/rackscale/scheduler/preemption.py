"""Victim choice: the fewest and cheapest lower-priority jobs whose GPUs let the preemptor run now.

Cost of a victim, cheapest first: lower priority, then less work lost since its last checkpoint
(GPU-seconds), then more GPUs freed. Victims are sought rack by rack, so the GPUs they free are in the
NVLink domain the preemptor will use; a gang larger than a rack clears the cheapest whole racks of one
region. The scheduler then *tries* the placement on the freed racks and rolls back if it still fails,
so nobody is preempted for nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rackscale.model.state import ClusterState, RunningJob
from rackscale.model.topology import MILLI_PER_GPU, Rack
from rackscale.model.workload import JobKind, JobSpec, Level
from rackscale.scheduler.filters import allowed_models
from rackscale.scheduler.framework import VICTIM_CHOOSERS, CycleContext, VictimChoice


def last_checkpoint(rj: RunningJob, now: float) -> float:
    """When the job last saved its progress (its start if it never did)."""
    ckpt = rj.checkpointed_at if rj.checkpointed_at is not None else rj.started_at
    interval = rj.spec.checkpoint_interval_s
    if interval:
        periodic = rj.started_at + math.floor((now - rj.started_at) / interval) * interval
        ckpt = max(ckpt, periodic)
    return ckpt


def lost_work(rj: RunningJob, now: float) -> float:
    """GPU-seconds of progress lost if the job is stopped now."""
    return max(0.0, now - last_checkpoint(rj, now)) * rj.placement.gpu_milli / MILLI_PER_GPU


def _whole_in_rack(state: ClusterState, rj: RunningJob, rack: int) -> int:
    nodes = state.cluster.nodes
    return sum(a.whole_gpus for a in rj.placement.allocs if nodes[a.node].rack == rack) or (
        # a shared-GPU job frees a whole GPU only if it was alone on it; count it as one GPU of hope
        1 if any(nodes[a.node].rack == rack for a in rj.placement.allocs) and rj.placement.whole_gpus == 0 else 0
    )


class CheapestVictims:
    name = "cheapest-victims"

    def choose(
        self,
        job: JobSpec,
        state: ClusterState,
        ctx: CycleContext,
        *,
        exclude_racks: frozenset[int],
        protected: frozenset[str] = frozenset(),
    ) -> VictimChoice | None:
        models = set(allowed_models(job, ctx))
        now = ctx.now

        def can_victimise(rj: RunningJob) -> bool:
            return rj.spec.priority < job.priority and rj.spec.preemptible and rj.spec.name not in protected

        def cost(rj: RunningJob) -> tuple[int, float, int, str]:
            return (rj.spec.priority, lost_work(rj, now), -rj.placement.gpu_milli, rj.spec.name)

        if job.kind is JobKind.INFERENCE or job.unit.gpus == 0:
            need = max(1, -(-job.unit.gpu_demand_milli // MILLI_PER_GPU))  # one replica's GPUs
        else:
            need = job.total_gpus
        racks = [r for r in state.cluster.racks if r.gpu_model in models and r.index not in exclude_racks]
        cap = max((r.gpus for r in racks), default=0)
        best: tuple[tuple[int, int, float], list[RunningJob], int] | None = None
        if need <= cap or job.topology.required is Level.RACK:
            for rack in racks:
                free = state.rack_whole[rack.index]
                if free >= need:
                    continue  # the room is there already: preemption is not what is missing
                cands = sorted(
                    (state.running[j] for j in state.rack_jobs[rack.index] if can_victimise(state.running[j])),
                    key=cost,
                )
                picked: list[RunningJob] = []
                for rj in cands:
                    if free >= need:
                        break
                    picked.append(rj)
                    free += _whole_in_rack(state, rj, rack.index)
                if free < need or not picked:
                    continue
                key = (
                    len(picked),
                    max(v.spec.priority for v in picked),
                    sum(lost_work(v, now) for v in picked),
                )
                if best is None or key < best[0]:
                    best = (key, picked, rack.index)
            if best is not None:
                return VictimChoice(tuple(best[1]), frozenset({best[2]}))
            if need <= cap:
                return None
        return self._clear_racks(state, racks, need, can_victimise, cost, now)

    def _clear_racks(
        self,
        state: ClusterState,
        racks: list[Rack],
        need: int,
        can_victimise: Callable[[RunningJob], bool],
        cost: Callable[[RunningJob], tuple[int, float, int, str]],
        now: float,
    ) -> VictimChoice | None:
        """A gang larger than a rack: clear the cheapest racks of one region."""
        by_region: dict[int, list[tuple[tuple[int, float], int, list[RunningJob]]]] = {}
        for rack in racks:
            jobs = [state.running[j] for j in state.rack_jobs[rack.index]]
            if not all(can_victimise(rj) for rj in jobs):
                continue
            key = (len(jobs), sum(lost_work(rj, now) for rj in jobs))
            by_region.setdefault(rack.region, []).append((key, rack.index, sorted(jobs, key=cost)))
        Option = tuple[
            tuple[int, float, int],
            dict[str, RunningJob],
            list[tuple[tuple[int, float], int, list[RunningJob]]],
        ]
        options: list[Option] = []
        for region, entries in by_region.items():
            entries.sort(key=lambda e: (e[0], e[1]))
            chosen: list[tuple[tuple[int, float], int, list[RunningJob]]] = []
            gpus = 0
            for e in entries:
                if gpus >= need:
                    break
                chosen.append(e)
                gpus += state.rack_capacity(e[1])
            if gpus >= need:
                victims = {rj.spec.name: rj for e in chosen for rj in e[2]}
                options.append(((len(victims), sum(e[0][1] for e in chosen), region), victims, chosen))
        if not options:
            return None
        _, victims, chosen = min(options, key=lambda o: o[0])
        if not victims:
            return None
        return VictimChoice(tuple(sorted(victims.values(), key=cost)), frozenset(e[1] for e in chosen))


VICTIM_CHOOSERS[CheapestVictims.name] = CheapestVictims
