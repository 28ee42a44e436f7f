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
    # Likewise what an elastic gang of no higher priority grew into beyond its request (``elastic.py``):
    # the shrink action gives it back to this job at once. Counted now; at the gang's end only the rest.
    grown = _grown(job, state, free)
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

    if loaned or grown:
        # With the loans (and growth) back it may fit now: the reservation starts now (reclaim's, shrink's cue).
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
            back = grown.get(name, {})
            for a in state.running[name].placement.allocs:
                r = nodes[a.node].rack
                if r in free:
                    free[r] += a.whole_gpus
                    touched.add(r)
            for r, counted in back.items():
                free[r] -= counted  # (counted as free already)
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


def _grown(job: JobSpec, state: StateView, free: dict[int, int]) -> dict[str, dict[int, int]]:
    """Add to ``free`` the GPUs elastic gangs of no higher priority than ``job`` hold beyond what they
    asked for (per rack, from the gang's last racks: growth stays in a gang's racks); what was added, per
    gang and rack."""
    out: dict[str, dict[int, int]] = {}
    nodes = state.cluster.nodes
    for name in state.elastic:
        rj = state.running[name]
        spec = rj.spec
        extra = (rj.placement.units - spec.units) * spec.unit.gpus
        if extra <= 0 or spec.priority > job.priority:
            continue
        added: dict[int, int] = {}
        for a in reversed(rj.placement.allocs):
            r = nodes[a.node].rack
            if r not in free or extra <= 0:
                continue
            k = min(extra, a.whole_gpus)
            free[r] += k
            added[r] = added.get(r, 0) + k
            extra -= k
        if added:
            out[name] = added
    return out
