"""Baseline placers behind the same interface as rackscale's, for side-by-side comparisons.

- ``first-fit``: what a default Kubernetes scheduler does with its LeastAllocated score: every unit goes
  to the node with the most free GPUs, wherever it is (spread).
- ``best-fit``: MostAllocated without topology: every unit goes to the fullest node that holds it.
- ``random``: every unit goes to a random node that holds it (seeded).
- ``slurm-tree``: Slurm's topology/tree with select/cons_tres: the best-fit leaf switch (rack) when
  the job fits under one, else the racks with the most free nodes; nodes in index order inside a rack.

All honour hard constraints (a required rack, GPU models, reservations), as their originals do.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator

from rackscale.model.placement import NodeAlloc
from rackscale.model.view import StateView
from rackscale.scheduler.placement.request import (
    GroupRequest,
    fill_best_fit,
    fill_in_order,
    nodes_ascending,
    racks_ascending,
    racks_descending,
    take_units,
    units_fit,
)

Allocs = list[NodeAlloc]


def one_region_at_a_time(
    state: StateView, req: GroupRequest, place: Callable[[GroupRequest], Allocs | None], *, roomiest_first: bool
) -> Allocs | None:
    """Honour a required region for placers that do not think in regions: try one region at a time
    (roomiest first for spreading placers, tightest first for packing ones)."""
    cluster = state.cluster
    free = [sum(state.rack_whole[r] for r in g.racks) for g in cluster.regions]
    order = sorted(range(len(free)), key=lambda g: (-free[g] if roomiest_first else free[g], g))
    for g in order:
        if free[g] < req.total_gpus:
            continue
        racks = frozenset(cluster.regions[g].racks)
        sub = req._replace(one_region=False, only_racks=racks if req.only_racks is None else racks & req.only_racks)
        got = place(sub)
        if got is not None:
            return got
    return None


def _at_least(req: GroupRequest) -> int:
    return max(req.unit.gpus, 1) if req.unit.gpus or req.unit.gpu_milli else 0


class FirstFitSpread:
    """kube-scheduler with LeastAllocated: the highest-scoring node wins, ties broken at random."""

    name = "first-fit"

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def place(self, state: StateView, req: GroupRequest) -> Allocs | None:
        if req.one_region and not req.one_rack:
            return one_region_at_a_time(state, req, lambda r: self.place(state, r), roomiest_first=True)
        if req.one_rack:
            for rack in racks_descending(state, req.models, max(req.total_gpus, 1)):
                if req.rack_allowed(rack):
                    nodes = state.rack_node_index[rack].descending(_at_least(req))
                    got = _spread(state, nodes, req)
                    if got is not None:
                        return got
            return None
        buckets = [state.node_index[m].buckets for m in req.models]
        nodes = (
            n
            for c in range(len(buckets[0]) - 1, _at_least(req) - 1, -1)
            for n in _shuffled(self._rng, [x for b in buckets for x in b[c]])
            if req.rack_allowed(state.cluster.nodes[n].rack)
        )
        return _spread(state, nodes, req)


def _shuffled(rng: random.Random, items: list[int]) -> Iterator[int]:
    """Yield ``items`` in random order, shuffling lazily (only as far as the caller reads)."""
    n = len(items)
    for i in range(n):
        j = rng.randrange(i, n)
        items[i], items[j] = items[j], items[i]
        yield items[i]


def _spread(state: StateView, nodes: Iterable[int], req: GroupRequest) -> Allocs | None:
    """One unit per node, most-free nodes first; further rounds while units remain (LeastAllocated).

    Reads only as many nodes as there are units: a node's score drops once it takes a unit, so the next
    unit goes to the next node of the (lazily produced) ranking."""
    fit: dict[int, int] = {}
    for n in nodes:
        k = units_fit(state, n, req.unit)
        if k > 0:
            fit[n] = k
            if len(fit) == req.units:
                break
    if not fit:
        return None
    taken = dict.fromkeys(fit, 0)
    remaining = req.units
    while remaining:
        progressed = False
        for n in fit:
            if taken[n] < fit[n]:
                taken[n] += 1
                remaining -= 1
                progressed = True
                if not remaining:
                    break
        if not progressed:
            return None
    out: Allocs = []
    for n, k in taken.items():
        if k:
            out.extend(take_units(state, n, req.unit, k))
    return out


class BestFitNoTopology:
    name = "best-fit"

    def place(self, state: StateView, req: GroupRequest) -> Allocs | None:
        if req.one_region and not req.one_rack:
            return one_region_at_a_time(state, req, lambda r: self.place(state, r), roomiest_first=False)
        if req.one_rack:
            for rack in racks_ascending(state, req.models, max(req.total_gpus, 1)):
                if req.rack_allowed(rack):
                    asc = list(state.rack_node_index[rack].ascending(_at_least(req)))
                    got = fill_best_fit(state, asc, req.units, req.unit, avoid=frozenset())
                    if got is not None:
                        return got
            return None
        nodes = (
            n
            for n in nodes_ascending(state, req.models, _at_least(req))
            if req.rack_allowed(state.cluster.nodes[n].rack)
        )
        return fill_in_order(state, nodes, req.units, req.unit, avoid=frozenset())


class RandomPlacer:
    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def place(self, state: StateView, req: GroupRequest) -> Allocs | None:
        if req.one_region and not req.one_rack:
            return one_region_at_a_time(state, req, lambda r: self.place(state, r), roomiest_first=False)
        if req.one_rack:
            racks = [r for r in racks_ascending(state, req.models, max(req.total_gpus, 1)) if req.rack_allowed(r)]
            self._rng.shuffle(racks)
            for rack in racks[:16]:
                nodes = list(state.cluster.racks[rack].nodes)
                self._rng.shuffle(nodes)
                got = fill_in_order(state, nodes, req.units, req.unit, avoid=frozenset())
                if got is not None:
                    return got
            return None
        # Probe random nodes first (cheap on large clusters); fall back to a shuffled scan of the buckets.
        n_nodes = len(state.cluster.nodes)
        probes = [self._rng.randrange(n_nodes) for _ in range(min(64, 4 * req.units + 8))]
        candidates = [
            n
            for n in dict.fromkeys(probes)
            if state.cluster.nodes[n].gpu_model in req.models and req.rack_allowed(state.cluster.nodes[n].rack)
        ]
        got = fill_in_order(state, candidates, req.units, req.unit, avoid=frozenset())
        if got is not None:
            return got
        rest = [
            n
            for n in nodes_ascending(state, req.models, _at_least(req))
            if req.rack_allowed(state.cluster.nodes[n].rack)
        ]
        self._rng.shuffle(rest)
        return fill_in_order(state, rest, req.units, req.unit, avoid=frozenset())


class SlurmTree:
    name = "slurm-tree"

    def place(self, state: StateView, req: GroupRequest) -> Allocs | None:
        if req.one_region and not req.one_rack:
            return one_region_at_a_time(state, req, lambda r: self.place(state, r), roomiest_first=False)
        total = max(req.total_gpus, 1)
        for rack in racks_ascending(state, req.models, total):
            if req.rack_allowed(rack):
                got = fill_in_order(state, state.cluster.racks[rack].nodes, req.units, req.unit, avoid=frozenset())
                if got is not None:
                    return got
        if req.one_rack:
            return None
        out: Allocs = []
        remaining = req.units
        for rack in racks_descending(state, req.models, max(req.unit.gpus, 1)):
            if not req.rack_allowed(rack):
                continue
            for n in state.cluster.racks[rack].nodes:
                k = min(units_fit(state, n, req.unit), remaining)
                if k:
                    out.extend(take_units(state, n, req.unit, k))
                    remaining -= k
                    if not remaining:
                        return out
        return None
