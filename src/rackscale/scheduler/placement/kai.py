"""NVIDIA KAI-Scheduler's placement as a placer: ``kai``.

KAI places a pod group in two steps (kai-scheduler/KAI-Scheduler ``pkg/scheduler/plugins/topology`` and
``pkg/scheduler/actions/common/allocate.go``; docs/baselines.md cites the files and commits):

1. *Domain selection* (``subSetNodesFn``, ``getJobAllocatableDomains``, ``sortTree``, ``sortDomainInfos``):
   every domain from the preferred level up to the required one (or the root) that holds the whole job
   (``AllocatablePods``: pods that fit on each node, summed up the tree) is a candidate. Candidates are
   tried lowest level first; within a level in the order of the sorted tree: a parent's children by the
   job's GPUs over the domain's free GPUs, highest first (the fewest free GPUs first: bin packing), ties
   by domain ID, so racks come region by region, the tightest region first. The first candidate where
   every pod finds a node wins (with no node filter left out, the first candidate always does).
2. *Node order* (``OrderedNodesByTask``): each pod goes to the node with the highest summed score. With a
   preferred level, the topology plugin scores a node ``floor((i + 1) / n * 10) * 10000`` by the position
   ``i`` of its preferred-level domain among the ``n`` such domains of the sorted tree (``calculateNodeScores``):
   the domain with the most room (the last) first, so a job that does not fit one preferred domain fills
   the roomiest ones first. Below it: GPU sharing order (+1000 for a node with a shared GPU that a
   fractional pod fits on), then ``nodeplacement`` binpack (0-9: the fewest non-allocated GPUs first),
   the default strategy. Ties between nodes of equal score are in Go map order (arbitrary): here node
   index order.

A job with no topology constraint skips step 1: every pod goes to the fullest node that fits (binpack),
whatever its rack.

What a :class:`GroupRequest` asks maps to KAI's annotations (``kai.scheduler/topology-required-placement``
and ``kai.scheduler/topology-preferred-placement``, on a Topology of levels region > rack > hostname):

- a required rack or region: ``required`` at that level;
- a preferred rack: ``preferred: rack`` (with ``required: region`` when the region is required too);
- no rack wish but one region preferred: ``preferred: region``;
- no wish at all (batch tasks): no topology annotation.

The allowed GPU models are read as a KAI node pool (scheduling shard) of those models' nodes; racks held
by a reservation (``exclude_racks``) or outside ``only_racks`` are not in it either. KAI ignores pod
anti-affinity here (no preferred anti-affinity is declared by default), so replicas are not spread.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from rackscale.model.placement import NodeAlloc
from rackscale.model.topology import MILLI_PER_GPU
from rackscale.model.view import StateView
from rackscale.scheduler.placement.request import GroupRequest, fill_in_order, racks_descending, units_fit

Allocs = list[NodeAlloc]
_NONE: frozenset[int] = frozenset()
TOPOLOGY_SCORE_STEPS = 10  # calculateNodeScores: (i + 1) / n * 10, floored


class Level(IntEnum):
    """Topology levels, highest first (``ROOT`` is KAI's implicit top domain)."""

    ROOT = 0
    REGION = 1
    RACK = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class Constraint:
    """A pod group's ``topologyConstraint`` as KAI reads it (levels, not label names)."""

    required: Level | None = None
    preferred: Level | None = None

    def levels(self) -> list[Level]:
        """``calculateRelevantDomainLevels``: from the preferred level (or the required one) up to the
        required one (or the root), lowest first."""
        low = self.preferred if self.preferred is not None else self.required
        high = self.required if self.required is not None else Level.ROOT
        assert low is not None
        return [Level(v) for v in range(low, high - 1, -1)]


def constraint(req: GroupRequest) -> Constraint | None:
    """The annotations a request stands for (see the module docstring); ``None``: no topology."""
    required = Level.RACK if req.one_rack else Level.REGION if req.one_region else None
    if req.prefer_one_rack:
        preferred: Level | None = Level.RACK
    elif req.prefer_one_region and required is None:
        preferred = Level.REGION
    else:
        preferred = None
    if required is None and preferred is None:
        return None
    return Constraint(required=required, preferred=preferred)


def topology_score(position: int, count: int) -> int:
    """``calculateNodeScores`` (in units of ``scores.Topology``): the ``position``-th of ``count``
    preferred-level domains in sorted order scores ``floor((position + 1) / count * 10)``; the same float
    operations as Go's."""
    return math.floor((position + 1) / count * TOPOLOGY_SCORE_STEPS)


def free_milli(state: StateView, n: int) -> int:
    """A node's non-allocated GPUs in thousandths (``NonAllocatedResource``): its whole free GPUs, plus the
    free shares of partly held ones (looked at only on nodes that have any)."""
    if state.node_shared[n]:
        return sum(state.usable_free(n, g) for g in range(len(state.gpu_free[n])))
    return state.node_whole[n] * MILLI_PER_GPU


def shared_fit(state: StateView, n: int, milli: int) -> bool:
    """gpusharingorder: does a fractional pod of ``milli`` fit on a GPU of ``n`` already shared?"""
    if not milli or not state.node_shared[n]:
        return False
    return any(0 < (f := state.usable_free(n, g)) < MILLI_PER_GPU and f >= milli for g in range(len(state.gpu_free[n])))


@dataclass(slots=True)
class Tree:
    """The request's node pool as KAI's topology tree, as far as the search reads it: per region the free
    GPUs of all its racks (``IdleOrReleasingResources``) and its racks where a pod may fit (enough whole
    free GPUs), fewest free first; the pods a rack holds (``AllocatablePods``) are counted when asked.
    Racks are reached through the free-GPU index: full racks are never looked at."""

    state: StateView
    req: GroupRequest
    free: dict[int, int] = field(default_factory=dict)  # rack -> whole free GPUs
    region_racks: dict[int, list[int]] = field(default_factory=dict)
    region_free: dict[int, int] = field(default_factory=dict)
    _caps: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, state: StateView, req: GroupRequest) -> Tree:
        """A region's free GPUs count every rack of it (a rack too full for a pod adds its free GPUs to the
        region's); the racks listed are those where a pod may fit, fewest free GPUs first."""
        tree = cls(state, req)
        unit, cluster = req.unit, state.cluster
        w = unit.gpus
        for r in racks_descending(state, req.models, 1):
            if req.rack_allowed(r):
                f = state.rack_whole[r]
                g = cluster.racks[r].region
                tree.region_free[g] = tree.region_free.get(g, 0) + f
                if f >= w:
                    tree.add(r)
        if not w:  # shares of a GPU may fit on a partly held one; CPU-only pods on any node
            more = (
                (cluster.nodes[n].rack for m in req.models for n in state.shared_nodes.get(m, ()))
                if unit.gpu_milli
                else (r.index for r in cluster.racks if r.gpu_model in req.models)
            )
            for r in more:
                if r not in tree.free and req.rack_allowed(r):
                    tree.add(r)
        for rs in tree.region_racks.values():
            rs.sort(key=lambda r: (tree.free[r], r))
        return tree

    def add(self, r: int) -> None:
        self.free[r] = self.state.rack_whole[r]
        self.region_racks.setdefault(self.state.cluster.racks[r].region, []).append(r)
        self.region_free.setdefault(self.state.cluster.racks[r].region, 0)

    def regions(self) -> list[int]:
        """Regions in sorted order: the fewest free GPUs first (the job's ratio to them highest), then ID."""
        return sorted(self.region_racks, key=lambda g: (self.region_free[g], g))

    def capacity(self, r: int) -> int:
        """Pods of the request that rack ``r``'s nodes hold (``calcSubTreeAllocatable``)."""
        got = self._caps.get(r)
        if got is None:
            got = self._caps[r] = sum(units_fit(self.state, n, self.req.unit) for n in self.rack_nodes(r))
        return got

    def rack_nodes(self, r: int) -> Iterable[int]:
        w = self.req.unit.gpus
        return self.state.rack_node_index[r].ascending(w) if w else self.state.cluster.racks[r].nodes

    def pool_racks(self, g: int) -> list[int]:
        """Every rack of region ``g`` in the pool, full ones included (a scan of the region's racks)."""
        req, cluster = self.req, self.state.cluster
        return [r for r in cluster.regions[g].racks if cluster.racks[r].gpu_model in req.models and req.rack_allowed(r)]

    def common_regions(self) -> list[int]:
        """The regions under ``lowestCommonDomainID`` of the pool's nodes with a free GPU: that one region
        when they all lie in one, else every region (the root)."""
        if len(self.region_free) == 1:  # every region with a free GPU in the pool (add() counts shared racks')
            return list(self.region_free)
        return [g.index for g in self.state.cluster.regions]


def find_domain(tree: Tree, levels: Sequence[Level]) -> tuple[Level, int] | None:
    """The first candidate domain (``getJobAllocatableDomains`` then ``sortDomainInfos``): the lowest
    level first, each level in the sorted tree's order; ``None`` when no domain holds the job."""
    units, w = tree.req.units, tree.req.unit.gpus
    need = units * w  # GPUs a domain must have free to hold the pods (whole-GPU pods)
    regions = tree.regions()
    for level in levels:
        if level is Level.RACK:
            for g in regions:
                if tree.region_free[g] < need:  # no rack of it has the GPUs
                    continue
                for r in tree.region_racks[g]:
                    if tree.free[r] >= need and tree.capacity(r) >= units:
                        return level, r
        elif level is Level.REGION:
            for g in regions:
                if tree.region_free[g] >= need and sum(tree.capacity(r) for r in tree.region_racks[g]) >= units:
                    return level, g
        elif sum(tree.capacity(r) for rs in tree.region_racks.values() for r in rs) >= units:
            return level, -1
    return None


def preferred_scores(tree: Tree, preferred: Level) -> dict[int, int]:
    """``calculateNodeScores`` for a job placed above its preferred level: each preferred-level domain (rack
    or region index) and its score (in units of ``scores.Topology``). The domains are those under the
    lowest domain common to the pool's nodes with a free GPU, in the sorted tree's order, full ones
    included (a full domain's ratio is infinite: it sorts first). Scans the pool's racks: only for a job
    that does not fit one preferred-level domain."""
    state = tree.state
    pool = {g: rs for g in tree.common_regions() if (rs := tree.pool_racks(g))}
    region_free = {g: sum(state.rack_whole[r] for r in rs) for g, rs in pool.items()}
    regions = sorted(pool, key=lambda g: (region_free[g], g))
    if preferred is Level.REGION:
        domains = regions
    else:
        domains = [r for g in regions for r in sorted(pool[g], key=lambda r: (state.rack_whole[r], r))]
    return {d: topology_score(i, len(domains)) for i, d in enumerate(domains)}


def node_key(state: StateView, req: GroupRequest, n: int) -> tuple[int, int, int]:
    """A node's place in the order below the topology score: a shared GPU the pod fits on first
    (gpusharingorder, fractional pods), then the fewest non-allocated GPUs (binpack; CPUs for a CPU-only
    pod), then (our tie-break) the index."""
    unit = req.unit
    if not unit.gpus and not unit.gpu_milli:
        return 0, state.cpu_free[n], n
    return (0 if shared_fit(state, n, unit.gpu_milli) else 1), free_milli(state, n), n


def domain_nodes(tree: Tree, c: Constraint, level: Level, domain: int) -> list[int]:
    """The chosen domain's nodes in KAI's order: the topology score (only when the domain lies above the
    preferred level: below it every node scores the same), then :func:`node_key`."""
    state, req = tree.state, tree.req
    if level is Level.RACK:
        racks = [domain]
    elif level is Level.REGION:
        racks = tree.region_racks[domain]
    else:
        racks = [r for rs in tree.region_racks.values() for r in rs]
    nodes = [n for r in racks for n in tree.rack_nodes(r)]
    if c.preferred is None or level >= c.preferred:
        return sorted(nodes, key=lambda n: node_key(state, req, n))
    scores = preferred_scores(tree, c.preferred)
    if c.preferred is Level.RACK:
        at = {n: scores[r] for r in racks for n in tree.rack_nodes(r)}
    else:
        at = {n: scores[state.cluster.racks[r].region] for r in racks for n in tree.rack_nodes(r)}
    return sorted(nodes, key=lambda n: (-at[n], *node_key(state, req, n)))


def binpack_nodes(state: StateView, req: GroupRequest) -> Iterator[int]:
    """No topology: the pool's nodes by :func:`node_key`. Whole-GPU pods read the free-GPU buckets from
    the fullest up (lazily: only as far as the pods go), merged with the nodes holding shared GPUs (whose
    free shares count too); fractional and CPU-only pods sort the nodes that may hold one."""
    unit, cluster = req.unit, state.cluster
    allowed = [m for m in req.models if m in state.node_index]
    if unit.gpus:
        shared = sorted(
            (free_milli(state, n), n)
            for m in allowed
            for n in state.shared_nodes.get(m, ())
            if state.node_whole[n] >= unit.gpus
        )
        whole = (
            (c * MILLI_PER_GPU, n)
            for c in range(unit.gpus, state.max_node_gpus + 1)
            for m in allowed
            if c < len(b := state.node_index[m].buckets)
            for n in b[c]
            if not state.node_shared[n]
        )
        ordered: Iterable[tuple[int, int]] = heapq.merge(shared, whole, key=lambda t: t[0])
        nodes: Iterable[int] = (n for _, n in ordered)
    elif unit.gpu_milli:
        cand = {n for m in allowed for n in state.shared_nodes.get(m, ())}
        cand.update(n for m in allowed for n in state.node_index[m].ascending(1))
        nodes = sorted(cand, key=lambda n: node_key(state, req, n))
    else:
        nodes = sorted((n.index for n in cluster.nodes if n.gpu_model in req.models), key=lambda n: state.cpu_free[n])
    return (n for n in nodes if req.rack_allowed(cluster.nodes[n].rack))


class Kai:
    """KAI-Scheduler's allocation of one pod group (a placement group) to nodes."""

    name = "kai"

    def place(self, state: StateView, req: GroupRequest) -> Allocs | None:
        if req.units <= 0:
            return []
        c = constraint(req)
        if c is None:
            nodes: Iterable[int] = binpack_nodes(state, req)
        else:
            tree = Tree.of(state, req)
            found = find_domain(tree, c.levels())
            if found is None:
                return None
            nodes = domain_nodes(tree, c, *found)
        # Pods one at a time to the first node in order that fits: a node keeps its place while it fits (its
        # binpack score only rises), so each node is filled before the next.
        return fill_in_order(state, nodes, req.units, req.unit, avoid=_NONE)
