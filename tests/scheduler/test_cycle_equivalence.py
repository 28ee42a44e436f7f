"""A backlog cycle decides exactly what the plain admit-and-roll-back way decides (issue 13).

The cycle's tentative placements take a fast path (``ClusterState._take``/``_give``: whole-GPU slices
move a node between buckets without recounting its GPUs; the transaction logs an admission as a name).
Which node or rack of a bucket a placer meets first is the order in which its set iterates, and that
order follows the history of adds and discards, so the fast path must make the same set operations, in
the same order, as the full recount. The tests compare against a reference that does it the old way:

- ``_Recounting``: a ``ClusterState`` whose slices go through ``CapacityState``'s full recount;
- ``_OldWayTransaction``: a log of (operation, item) undone by a plain release;
- ``_naive_cycle``: the pending jobs in queue order, each placed through a checkpoint, rolled back to
  it when the gang does not fit, everything rolled back at the end.

The cluster is two regions of NVL72-like racks (18 nodes x 4 GPUs), filled to ~90 % by the placement
bench's seeded Philly workload, then given a seeded backlog::

    region-0: r000 .. r009      region-1: r010 .. r019      (1,440 GPUs)
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable

import pytest

from rackscale.bench.placement import Workload
from rackscale.model import MILLI_PER_GPU, ClusterState, GPUCluster, JobSpec, NodeAlloc, Placement, Transaction
from rackscale.model.capacity import CapacityState
from rackscale.model.running import RunningJob
from rackscale.model.workload import Resources, training
from rackscale.scheduler import Decisions, PendingQueue, Profile, ResourceScheduler, apply_decisions
from rackscale.scheduler.groups import placement_groups
from rackscale.scheduler.pending import static_shape
from rackscale.scheduler.placement.request import fill_best_fit, nodes_ascending_in_rack, take_units, units_fit
from rackscale.scheduler.placement.topology_pack import TopologyPack

# No reservation: the naive loop below has none either (every job is tried on the whole cluster).
NO_BACKFILL = Profile(name="equivalence", backfill=False)


class _Recounting(ClusterState):
    """Every slice taken or given back recounts its node (the path before the fast one)."""

    _take = CapacityState._take
    _give = CapacityState._give


class _OldWayTransaction:
    """The transaction as it was: (operation, item) entries, an admission undone by a plain release."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.log: list[tuple[str, RunningJob]] = []

    def allocate(self, spec: JobSpec, placement: Placement, *, now: float) -> None:
        self.log.append(("allocated", self.state.allocate(spec, placement, now=now)))

    def checkpoint(self) -> int:
        return len(self.log)

    def rollback(self, to: int = 0) -> None:
        while len(self.log) > to:
            _, rj = self.log.pop()
            self.state.release(rj.spec.name)


def _cluster() -> GPUCluster:
    return GPUCluster.uniform(regions=2, racks_per_region=10, nodes_per_rack=18, gpus_per_node=4)


def _orders(state: ClusterState) -> list[object]:
    """Every bucket set in its iteration order (what a placer meets first), and the job sets."""
    out: list[object] = []
    for key in sorted(state.rack_index):
        out.append([list(b) for b in state.rack_index[key].buckets])
    for model in sorted(state.node_index):
        out.append([list(b) for b in state.rack_index_all[model].buckets])
        out.append([list(b) for b in state.node_index[model].buckets])
        out.append(list(state.shared_nodes[model]))
    out.append([[list(b) for b in ix.buckets] for ix in state.rack_node_index])
    out.append([sorted(s) for s in state.rack_jobs] + [sorted(s) for s in state.node_jobs])
    return out


def _filled(
    cls: type[ClusterState], *, seed: int, decisions: int = 300, large: float = 0.03
) -> tuple[ClusterState, float]:
    """The bench's warm-up, small: arrivals until 90 % is allocated, then ``decisions`` arrivals, each
    followed by departures (in order of expected end) back to 90 %. Returns the state and the clock."""
    state = cls(_cluster())
    sched = ResourceScheduler(seed=seed)
    jobs = Workload(seed=seed, large_share=large)
    target = int(0.9 * state.total_gpus * MILLI_PER_GPU)
    ends: list[tuple[float, str]] = []
    now = 0.0

    def arrive() -> None:
        d = sched.schedule(state, [jobs.next_job(now=now)], now)
        apply_decisions(state, d, now=now)
        for p in d.placed:
            heapq.heappush(ends, (p.expected_end or now, p.spec.name))

    for _ in range(20 * state.total_gpus):
        if state.used_milli >= target:
            break
        arrive()
    for _ in range(decisions):
        arrive()
        while state.used_milli > target and ends:
            end, name = heapq.heappop(ends)
            now = max(now, end)
            state.release(name)
    return state, now


def _backlog(*, seed: int, now: float, n: int = 600, large: float = 0.03) -> list[JobSpec]:
    jobs = Workload(seed=seed + 1, large_share=large, prefix="p")
    return [jobs.next_job(now=now) for _ in range(n)]


def _naive_cycle(
    state: ClusterState, pending: Iterable[JobSpec], now: float
) -> list[tuple[str, tuple[NodeAlloc, ...]]]:
    """Each job in queue order through a checkpoint, the old way; everything rolled back at the end."""
    placer = TopologyPack()
    tx = _OldWayTransaction(state)
    placed: list[tuple[str, tuple[NodeAlloc, ...]]] = []
    for job in PendingQueue(pending):
        groups = placement_groups(
            job, state, state.cluster.gpu_models, job.units, exclude=frozenset(), only=None, allow_split=lambda: True
        )
        before = tx.checkpoint()
        slices: list[NodeAlloc] = []
        for req, units in groups:
            got = placer.place(state, req)
            if got is None:
                tx.rollback(before)
                break
            tx.allocate(job, Placement(job.name, tuple(got), units), now=now)
            slices.extend(got)
        else:
            placed.append((job.name, tuple(slices)))
    tx.rollback()
    return placed


def _placed(d: Decisions) -> list[tuple[str, tuple[NodeAlloc, ...]]]:
    return [(p.spec.name, p.placement.allocs) for p in d.placed]


SEEDS = pytest.mark.parametrize("seed", [0, 1, 2], ids=["seed-0", "seed-1", "seed-2"])


@SEEDS
def test_the_cycle_places_what_a_naive_loop_places(seed: int) -> None:
    """Same jobs, same slices, in the same order; and both leave every set iterating as before."""
    fast, now = _filled(ClusterState, seed=seed)
    ref, ref_now = _filled(_Recounting, seed=seed)
    assert (now, fast.snapshot(), _orders(fast)) == (ref_now, ref.snapshot(), _orders(ref)), "the warm-up diverged"
    pending = _backlog(seed=seed, now=now)
    before = fast.snapshot()

    d = ResourceScheduler(profile=NO_BACKFILL, seed=seed).schedule(fast, pending, now)
    naive = _naive_cycle(ref, pending, now)

    assert len(d.placed) > 20 and len(d.placed) + len(d.pending) + d.not_examined == len(pending)
    assert _placed(d) == naive
    assert fast.snapshot() == before and _orders(fast) == _orders(ref)


@SEEDS
def test_a_repeated_cycle_decides_as_the_reference_does(seed: int) -> None:
    """With reservations (the default profile): three cycles in a row on the same state, each on the fast
    path and on the full recount, decide the same (a rollback leaves the sets as the recount's do)."""
    fast, now = _filled(ClusterState, seed=seed)
    ref, _ = _filled(_Recounting, seed=seed)
    pending = _backlog(seed=seed, now=now)
    sched, ref_sched = ResourceScheduler(seed=seed), ResourceScheduler(seed=seed)
    for _ in range(3):
        d, r = sched.schedule(fast, pending, now), ref_sched.schedule(ref, pending, now)
        assert _placed(d) == _placed(r)
        assert [(p.spec.name, p.status) for p in d.pending] == [(p.spec.name, p.status) for p in r.pending]
        assert (d.reservation, d.not_examined, d.stats) == (r.reservation, r.not_examined, r.stats)
        assert _orders(fast) == _orders(ref)


@SEEDS
def test_a_kept_queue_decides_as_the_plain_list(seed: int) -> None:
    """The host keeps its backlog in a ``PendingQueue`` between cycles (the placement bench times that
    path); a caller with a plain list gets a queue built for the cycle. Three cycles in a row on each of
    two like states decide the same: slices, reasons, reservation, counts. (Two states: a rolled-back
    cycle leaves a set's iteration order as the history of its adds and discards makes it, not always as
    it found it, so a cycle run after another on one state may meet nodes in another order.)"""
    state, now = _filled(ClusterState, seed=seed)
    ref, _ = _filled(ClusterState, seed=seed)
    pending = _backlog(seed=seed, now=now)
    kept = PendingQueue(pending)
    sched, ref_sched = ResourceScheduler(seed=seed), ResourceScheduler(seed=seed)
    for _ in range(3):
        d, r = sched.schedule(state, kept, now), ref_sched.schedule(ref, pending, now)
        assert len(d.placed) > 20
        assert _placed(d) == _placed(r)
        assert [(p.spec.name, p.status) for p in d.pending] == [(p.spec.name, p.status) for p in r.pending]
        assert (d.reservation, d.not_examined, d.stats) == (r.reservation, r.not_examined, r.stats)
    assert len(kept) == len(pending)  # a cycle reads the queue, never changes it


@SEEDS
def test_the_decisions_apply_cleanly_and_hold_no_gpu_twice(seed: int) -> None:
    state, now = _filled(ClusterState, seed=seed)
    d = ResourceScheduler(seed=seed).schedule(state, _backlog(seed=seed, now=now), now)
    held = {(a.node, g) for rj in state.running.values() for a in rj.placement.allocs for g in a.gpus}
    new: list[tuple[int, int]] = []
    for p in d.placed:
        assert sum(len(a.gpus) for a in p.placement.allocs) == p.spec.total_gpus  # all of the gang
        new.extend((a.node, g) for a in p.placement.allocs for g in a.gpus)
    assert len(new) == len(set(new)) and not held & set(new)
    apply_decisions(state, d, now=now)  # validates every slice against the state
    state.check_invariants()


# ---------------------------------------------------------------------- the fast path, op by op
def _random_ops(state: ClusterState, rng: random.Random, tx: Transaction | None, steps: int) -> None:
    """Whole, shared and CPU-only slices, releases, GPU and node failures and recoveries, rollbacks."""
    nodes = len(state.cluster.nodes)
    for step in range(steps):
        op = rng.random()
        n = rng.randrange(nodes)
        if op < 0.45:
            kind = rng.random()
            if kind < 0.6:
                k = rng.randint(1, 4)
                if state.node_whole[n] < k or state.node_down[n]:
                    continue
                a = NodeAlloc(n, state.whole_free_gpus(n, k), MILLI_PER_GPU, 1000, 64)
            elif kind < 0.85:
                g = rng.randrange(4)
                if state.usable_free(n, g) < 250:
                    continue
                a = NodeAlloc(n, (g,), 250, 0, 0)
            else:
                a = NodeAlloc(n, (), MILLI_PER_GPU, 500, 0)
            if state.fits(a) is not None:
                continue
            spec = training(f"j{step}", max(len(a.gpus), 1))
            if tx is not None:
                tx.allocate(spec, Placement(spec.name, (a,), 1), now=float(step))
            else:
                state.allocate(spec, Placement(spec.name, (a,), 1), now=float(step))
        elif op < 0.75 and state.running:
            name = rng.choice(sorted(state.running))
            (tx.release if tx is not None else state.release)(name)
        elif op < 0.82:
            state.fail_gpu(n, rng.randrange(4))
        elif op < 0.89:
            state.recover_gpu(n, rng.randrange(4))
        elif op < 0.93:
            state.fail_node(n)
        else:
            state.recover_node(n)


@pytest.mark.parametrize(
    ("seed", "transaction"),
    [(0, False), (1, False), (2, True), (3, True)],
    ids=["direct-0", "direct-1", "transaction-0", "transaction-1"],
)
def test_the_fast_path_moves_indexes_as_a_full_recount_does(seed: int, transaction: bool) -> None:
    """A small cluster (2 racks x 3 nodes x 4 GPUs), 400 random changes applied to both states; through
    a transaction, rolled back at the end: the indexes, their sets' order and every field agree."""
    cluster = GPUCluster.uniform(racks_per_region=2, nodes_per_rack=3, gpus_per_node=4)
    fast, ref = ClusterState(cluster), _Recounting(cluster)
    txs = (Transaction(fast), Transaction(ref)) if transaction else (None, None)
    for state, tx in zip((fast, ref), txs, strict=True):
        _random_ops(state, random.Random(seed), tx, 400)
        state.check_invariants()
    assert fast.snapshot() == ref.snapshot() and _orders(fast) == _orders(ref)
    if transaction:
        for tx in txs:
            assert tx is not None
            tx.rollback()
        assert fast.snapshot() == ref.snapshot() and _orders(fast) == _orders(ref)
        fast.check_invariants()


# ---------------------------------------------------------------------- best fit inside a rack
def _old_fill_best_fit(
    state: ClusterState, candidates: Iterable[int], units: int, unit: Resources, avoid: frozenset[int]
) -> list[NodeAlloc] | None:
    """``fill_best_fit`` as it was (a scan of the nodes left per step)."""
    order: list[int] = []
    fit: dict[int, int] = {}
    for n in candidates:
        if n in avoid:
            continue
        k = units_fit(state, n, unit)
        if k >= units:
            return take_units(state, n, unit, units)
        if k > 0:
            order.append(n)
            fit[n] = k
    if sum(fit.values()) < units:
        return None
    out: list[NodeAlloc] = []
    remaining = units
    while remaining > 0:
        tight = next((n for n in order if fit[n] >= remaining), None)
        if tight is not None:
            out.extend(take_units(state, tight, unit, remaining))
            return out
        roomy = max(order, key=lambda n: fit[n])
        out.extend(take_units(state, roomy, unit, fit[roomy]))
        remaining -= fit[roomy]
        order.remove(roomy)
    return out


@pytest.mark.parametrize("seed", range(6), ids=[f"seed-{s}" for s in range(6)])
def test_best_fit_in_a_rack_takes_the_nodes_it_took_before(seed: int) -> None:
    """One rack of 18 nodes x 8 GPUs, randomly part-used; every unit size and count, with and without CPU."""
    rng = random.Random(seed)
    state = ClusterState(GPUCluster.uniform(racks_per_region=1, nodes_per_rack=18, gpus_per_node=8))
    for n in range(18):
        used = rng.randint(0, 8)
        if used:
            state.allocate(training(f"r{n}", used), Placement(f"r{n}", (NodeAlloc(n, tuple(range(used))),), 1), now=0.0)
    avoid = frozenset(rng.sample(range(18), 3))
    for gpus in (1, 2, 4, 8):
        for cpu in (0, 50_000):  # 50 CPUs: a node holds at most 2 such units
            unit = Resources(gpus=gpus, cpu_milli=cpu)
            for units in range(1, 40):
                for skip in (frozenset(), avoid):
                    new = fill_best_fit(state, nodes_ascending_in_rack(state, 0, gpus), units, unit, avoid=skip)
                    old = _old_fill_best_fit(state, nodes_ascending_in_rack(state, 0, gpus), units, unit, skip)
                    assert new == old, (gpus, cpu, units, skip)


# ---------------------------------------------------------------------- the queue's per-shape summaries
@pytest.mark.parametrize("seed", range(4), ids=[f"seed-{s}" for s in range(4)])
def test_shape_summaries_follow_adds_and_removes(seed: int) -> None:
    """Shape count, fewest units and shortest duration per shape, against a recount after every change."""
    rng = random.Random(seed)
    q = PendingQueue([training(f"a{i}", rng.choice((1, 2, 4, 8))) for i in range(5)])
    model = {j.name: j for j in q}
    for step in range(300):
        if model and rng.random() < 0.4:
            name = rng.choice(sorted(model))
            q.remove(name)
            del model[name]
        else:
            duration = rng.choice((None, 10.0, 20.0, 30.0))
            job = training(
                f"j{step % 40}", rng.choice((1, 2, 4, 8)), priority=rng.choice((0, 1)), duration_estimate_s=duration
            )
            q.add(job)
            model[job.name] = job
        shapes: dict[tuple[object, ...], list[JobSpec]] = {}
        for j in model.values():
            shapes.setdefault(static_shape(j), []).append(j)
        assert q.shape_count() == len(shapes)
        for shape, js in shapes.items():
            assert q.min_units(shape) == min(j.required_units for j in js)
            assert q.min_duration(shape) == min(j.duration_estimate_s or float("inf") for j in js)
