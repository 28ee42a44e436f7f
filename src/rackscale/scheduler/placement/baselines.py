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
from collections.abc import Iterable

from rackscale.model.placement import NodeAlloc
from rackscale.model.state import ClusterState
from rackscale.scheduler.placement.request import (
    GroupRequest,
    fill_best_fit,
    fill_in_order,
    nodes_ascending,
    nodes_descending,
    racks_ascending,
    racks_descending,
    take_units,
    units_fit,
)

Allocs = list[NodeAlloc]


def _at_least(req: GroupRequest) -> int:
    return max(req.unit.gpus, 1) if req.unit.gpus or req.unit.gpu_milli else 0


class FirstFitSpread:
    name = "first-fit"

    def place(self, state: ClusterState, req: GroupRequest) -> Allocs | None:
        if req.one_rack:
            for rack in racks_descending(state, req.models, max(req.total_gpus, 1)):
                if req.rack_allowed(rack):
                    nodes = state.rack_node_index[rack].descending(_at_least(req))
                    got = _spread(state, nodes, req)
                    if got is not None:
                        return got
            return None
        nodes = (
            n
            for n in nodes_descending(state, req.models, _at_least(req))
            if req.rack_allowed(state.cluster.nodes[n].rack)
        )
        return _spread(state, nodes, req)


def _spread(state: ClusterState, nodes: Iterable[int], req: GroupRequest) -> Allocs | None:
    """One unit per node, most-free nodes first; further rounds while units remain (LeastAllocated)."""
    order = [n for n in nodes if units_fit(state, n, req.unit) > 0]
    if not order:
        return None
    taken = dict.fromkeys(order, 0)
    fit = {n: units_fit(state, n, req.unit) for n in order}
    remaining = req.units
    while remaining:
        progressed = False
        for n in order:
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

    def place(self, state: ClusterState, req: GroupRequest) -> Allocs | None:
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

    def place(self, state: ClusterState, req: GroupRequest) -> Allocs | None:
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

    def place(self, state: ClusterState, req: GroupRequest) -> Allocs | None:
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
