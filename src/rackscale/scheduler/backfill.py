"""Backfill: the first blocked gang gets a reservation; later jobs may run ahead only if they do not
delay it (EASY backfilling, on the rack level).

The reservation is computed from the expected end times of running jobs: release them in end order
until the gang fits (one rack for a gang that fits in a rack; the fewest racks of one region for a larger
one). Jobs without an end estimate never free anything in this calculation; if the gang can then never
be shown to fit, the racks that come closest are still held (start unknown), so the gang cannot starve.
"""

from __future__ import annotations

from rackscale.model.view import StateView
from rackscale.model.workload import JobKind, JobSpec
from rackscale.scheduler.decisions import Reservation
from rackscale.scheduler.filters import allowed_models
from rackscale.scheduler.framework import CycleContext


def plan_reservation(job: JobSpec, state: StateView, ctx: CycleContext) -> Reservation | None:
    if job.kind is JobKind.INFERENCE or job.unit.gpus == 0:
        return None  # replicas and shared GPUs are small: they do not need to hold racks
    models = set(allowed_models(job, ctx))
    cluster = state.cluster
    racks = [r for r in cluster.racks if r.gpu_model in models]
    if not racks:
        return None
    need = job.total_gpus
    free = {r.index: state.rack_whole[r.index] for r in racks}
    # GPUs on loan (``loans.py``) are the reservation's to reclaim at once: count them as free now, and
    # never again when their borrower's end comes.
    loaned = state.opportunistic
    for name in loaned:
        for a in state.running[name].placement.allocs:
            k = cluster.nodes[a.node].rack
            if k in free:
                free[k] += a.whole_gpus
    # Lazily, soonest first: the answer usually comes after the first few ends.
    ending = state.ends_in_order()
    upcoming = next(ending, None)
    nodes = cluster.nodes
    cap = max(r.gpus for r in racks)

    def feasible_multi() -> frozenset[int] | None:
        for g in range(len(cluster.regions)):
            in_region = sorted((r for r in free if cluster.racks[r].region == g), key=lambda r: (-free[r], r))
            got, total = [], 0
            for r in in_region:
                got.append(r)
                total += free[r]
                if total >= need:
                    return frozenset(got)
        return None

    if loaned:
        # With the loans back it may fit now: then the reservation starts now (the reclaim action's cue).
        if need <= cap:
            fits = [r for r in free if free[r] >= need]
            if fits:
                best = min(fits, key=lambda r: (free[r], r))
                return Reservation(
                    job=job.name, racks=frozenset({best}), start=ctx.now, priority=job.priority, job_spec=job
                )
        else:
            got = feasible_multi()
            if got is not None:
                return Reservation(job=job.name, racks=got, start=ctx.now, priority=job.priority, job_spec=job)
    # Release jobs in end order; after each instant, look only at the racks that instant touched
    # (free counts only grow, so an untouched rack cannot have become the answer).
    touched: set[int] = set()
    while upcoming is not None:
        end, name = upcoming
        upcoming = next(ending, None)
        if name not in loaned:
            for a in state.running[name].placement.allocs:
                r = nodes[a.node].rack
                if r in free:
                    free[r] += a.whole_gpus
                    touched.add(r)
        if upcoming is not None and upcoming[0] == end:
            continue  # jobs ending at the same instant count together
        if need <= cap:
            fits = sorted(r for r in touched if free[r] >= need)
            if fits:
                best = min(fits, key=lambda r: (free[r], r))
                return Reservation(
                    job=job.name, racks=frozenset({best}), start=end, priority=job.priority, job_spec=job
                )
        elif any(free[r] >= cluster.racks[r].gpus for r in touched):
            got = feasible_multi()
            if got is not None:
                return Reservation(job=job.name, racks=got, start=end, priority=job.priority, job_spec=job)
        touched.clear()
    # No estimate shows when it fits: hold the racks that come closest, start unknown.
    k = max(1, -(-need // cap))
    closest: tuple[int, int] | None = None  # (-free GPUs in the top k racks, region)
    for g in range(len(cluster.regions)):
        top = sorted((free[r] for r in free if cluster.racks[r].region == g), reverse=True)[:k]
        if top and (closest is None or (-sum(top), g) < closest):
            closest = (-sum(top), g)
    assert closest is not None
    region = closest[1]
    in_region = sorted((r for r in free if cluster.racks[r].region == region), key=lambda r: (-free[r], r))
    return Reservation(job=job.name, racks=frozenset(in_region[:k]), start=None, priority=job.priority, job_spec=job)
