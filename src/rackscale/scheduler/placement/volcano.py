"""Volcano's allocate action with its network-topology-aware plugin, as a placer: ``volcano``.

Read from volcano-sh/volcano (docs/baselines.md cites files, commits and pull requests):

- HyperNodes are network domains in tiers, tier 1 the lowest. Here a rack (NVLink domain) is a tier-1
  HyperNode and a region a tier-2 HyperNode; the scheduler's virtual root (``ClusterTopHyperNode``) holds
  them all.
- A job with a *hard* ``networkTopology`` (``highestTierAllowed: t``) goes through ``allocateForJob``: the
  plugin's gradient lists the HyperNodes of tier 1, then tier 2, ... up to ``t``; for each tier in turn the
  whole gang is dry-run in every HyperNode of the tier, and if any holds it, the one with the highest
  HyperNode *binpack* score wins: ``(used + request) / allocatable`` of the HyperNode, i.e. the fullest
  once the gang is in (ties: at random). No HyperNode of an allowed tier holds it: the job waits.
- *Soft* mode is converted to hard mode with the highest tier (volcano-sh/volcano#5206), the virtual root
  included: racks first, then regions, then the whole cluster.
- Inside the chosen HyperNode each task (unit) goes to its best-scoring node. The plugin scores a node by
  the tier of the lowest common ancestor of its HyperNode and the job's ``AllocatedHyperNode`` (the LCA of
  where its tasks went so far): same rack, then same region, then further; among the best, the rack that
  already holds more of the job's tasks; ties at random.
- A job with no ``networkTopology`` is placed task by task on the whole cluster; with the plugin on, each
  node is scored by HyperNode-level binpacking for "normal pods" (volcano-sh/volcano#4889, on by default):
  ``sum_t fading^(t-1) * binpack(tier-t HyperNode of the node) / sum_t fading^(t-1)`` with ``fading`` 0.8,
  i.e. the fullest rack, weighed with its region.

What the default node ordering adds cancels out here: ``nodeorder``'s LeastAllocated (CPU and memory
50:50) and the ``binpack`` plugin (CPU and memory 1:1, in the Helm chart's default configuration) score
``(free - request) / capacity`` and ``(used + request) / capacity`` with the same weights, so they sum to a
constant; BalancedAllocation is constant when a pod's CPU and memory follow its GPUs. So within a
HyperNode a task goes to a *random* node that holds it. We count GPUs where Volcano counts the resources it
is configured with (CPU and memory by default, ``nvidia.com/gpu`` as its user guide adds); a partly used
GPU counts as used. Replicas that spread (a Deployment's pods: the default PodTopologySpread constraint of
``nodeorder``) prefer nodes that hold none of the job's pods yet.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from enum import IntEnum, StrEnum

from rackscale.model.placement import NodeAlloc
from rackscale.model.topology import MILLI_PER_GPU
from rackscale.model.view import StateView
from rackscale.scheduler.placement.request import GroupRequest, take_units, units_fit

Allocs = list[NodeAlloc]
FADING = 0.8  # hypernode.binpack.normal-pod.fading: a tier-t HyperNode weighs fading^(t-1)
_DIGITS = 12  # scores are compared rounded: equal in arithmetic, equal here


class Mode(StrEnum):
    """A job's ``networkTopology`` as Volcano reads it."""

    NONE = "none"  # no networkTopology: node ordering only ("normal pods")
    SOFT = "soft"  # mode: soft (converted to hard at the highest tier, the virtual root included)
    HARD_RACK = "hard-1"  # mode: hard, highestTierAllowed: 1
    HARD_REGION = "hard-2"  # mode: hard, highestTierAllowed: 2


class Tier(IntEnum):
    RACK = 1
    REGION = 2
    CLUSTER = 3  # ClusterTopHyperNode, the scheduler's virtual root


# The plugin's HyperNode gradients: the tiers tried, lowest first.
GRADIENTS: dict[Mode, tuple[Tier, ...]] = {
    Mode.HARD_RACK: (Tier.RACK,),
    Mode.HARD_REGION: (Tier.RACK, Tier.REGION),
    Mode.SOFT: (Tier.RACK, Tier.REGION, Tier.CLUSTER),
}


def network_topology(req: GroupRequest) -> Mode:
    """The ``networkTopology`` a request stands for (docs/baselines.md, the ``volcano`` section)."""
    if req.one_rack:
        return Mode.HARD_RACK
    if req.one_region:
        return Mode.HARD_REGION
    if req.prefer_one_rack:
        return Mode.SOFT
    return Mode.NONE  # a preferred region alone: Volcano's soft mode names no tier, so no networkTopology


def binpack(used: float, request: float, capacity: float) -> float:
    """The plugin's HyperNode binpack score of one resource: 0 when the request does not fit."""
    if capacity <= 0 or used + request > capacity:
        return 0.0
    return (used + request) / capacity


Domain = tuple[int, list[int]]  # (HyperNode index: rack, region or 0 for the root; candidate racks in it)
Where = tuple[Tier, int]  # a HyperNode: its tier and index


class _Call:
    """One ``place`` call: the candidate racks and what the group has taken so far (nothing is written to
    the state; the slices are built at the end)."""

    def __init__(self, state: StateView, req: GroupRequest, rng: random.Random) -> None:
        self.state, self.req, self.rng = state, req, rng
        unit = req.unit
        self.w = float(unit.gpus) if unit.gpus else unit.gpu_milli / MILLI_PER_GPU  # GPUs per unit
        self.at_least = unit.gpus
        # Whole GPUs and nothing else: a node holds node_whole // gpus units, read from the buckets.
        self.fast = unit.gpus > 0 and not unit.cpu_milli and not unit.memory_mib
        cluster = state.cluster
        racks = {
            r
            for m in req.models
            for r in state.racks_descending(m, self.at_least)
            if req.rack_allowed(r) and cluster.racks[r].gpu_model == m
        }
        self.racks = sorted(racks)
        self.fit: dict[int, dict[int, int]] = {}  # rack -> {node: units it can still take}, read on demand
        self.added: dict[int, float] = {}  # rack -> GPUs this group took there
        self.added_region: dict[int, float] = {}
        self.placed: dict[int, int] = {}  # rack -> units of this group there
        self.taken: dict[int, int] = {}  # node -> units
        self._region_free: dict[int, int] | None = None
        self._region_cap: dict[int, int] = {}

    # ------------------------------------------------------------------ nodes
    def nodes(self, r: int) -> dict[int, int]:
        got = self.fit.get(r)
        if got is None:
            got = {}
            for n in sorted(self.state.rack_node_index[r].descending(self.at_least)):
                k = units_fit(self.state, n, self.req.unit)
                if k > 0:
                    got[n] = k
            self.fit[r] = got
        return got

    def capacity(self, r: int) -> int:
        """Units rack ``r`` holds now."""
        if r not in self.fit and self.fast:
            buckets = self.state.rack_node_index[r].buckets
            w = self.req.unit.gpus
            return sum((c // w) * len(buckets[c]) for c in range(w, len(buckets)))
        return sum(self.nodes(r).values())

    def counts(self, r: int) -> tuple[int, int]:
        """Nodes of rack ``r`` that hold a unit now: (fresh, stale); stale ones already hold the job's pods
        (only a spreading replica tells them apart)."""
        avoid = self.req.avoid_nodes if self.req.spread else frozenset()
        if r not in self.fit and self.fast and not (avoid and r in self.req.avoid_racks):
            return self.state.rack_node_index[r].count_at_least(self.at_least), 0
        fresh = stale = 0
        for n, k in self.nodes(r).items():
            if k > 0:
                if n in avoid:
                    stale += 1
                else:
                    fresh += 1
        return fresh, stale

    def pick_node(self, r: int, fresh: bool) -> int:
        avoid = self.req.avoid_nodes if self.req.spread else frozenset()
        nodes = [n for n, k in self.nodes(r).items() if k > 0 and (n not in avoid) == fresh]
        return nodes[self.rng.randrange(len(nodes))]

    def take(self, n: int) -> int:
        r = self.state.cluster.nodes[n].rack
        self.fit[r][n] -= 1
        self.taken[n] = self.taken.get(n, 0) + 1
        self.placed[r] = self.placed.get(r, 0) + 1
        self.added[r] = self.added.get(r, 0.0) + self.w
        g = self.state.cluster.racks[r].region
        self.added_region[g] = self.added_region.get(g, 0.0) + self.w
        return r

    def allocs(self) -> Allocs:
        return [a for n in sorted(self.taken) for a in take_units(self.state, n, self.req.unit, self.taken[n])]

    # ------------------------------------------------------------------ HyperNode usage (GPUs)
    def rack_usage(self, r: int) -> tuple[float, float]:
        """(used, allocatable) GPUs of rack ``r``, this group's units included."""
        cap = self.state.cluster.racks[r].gpus
        return cap - self.state.rack_whole[r] + self.added.get(r, 0.0), float(cap)

    def region_usage(self, g: int) -> tuple[float, float]:
        if self._region_free is None:  # the rack buckets per (model, region): no rack scan
            free: dict[int, int] = {}
            for (_, region), ix in self.state.rack_index.items():
                b = ix.buckets
                free[region] = free.get(region, 0) + sum(c * len(b[c]) for c in range(1, len(b)))
            self._region_free = free
        cap = self._region_cap.get(g)
        if cap is None:
            cluster = self.state.cluster
            cap = self._region_cap[g] = sum(cluster.racks[r].gpus for r in cluster.regions[g].racks)
        return cap - self._region_free.get(g, 0) + self.added_region.get(g, 0.0), float(cap)


def _lca(where: Where | None, rack: int, region_of: Sequence[int]) -> Where:
    if where is None:
        return (Tier.RACK, rack)
    tier, i = where
    if tier is Tier.RACK and i == rack:
        return where
    same_region = region_of[i] == region_of[rack] if tier is Tier.RACK else tier is Tier.REGION and i == region_of[rack]
    if same_region:
        return (Tier.REGION, region_of[rack])
    return (Tier.CLUSTER, 0)


class Volcano:
    """Volcano's placement of one job (a placement group) with the network-topology-aware plugin on."""

    name = "volcano"

    def __init__(self, seed: int = 0, *, fading: float = FADING) -> None:
        self._rng = random.Random(seed)
        self.fading = fading

    def place(self, state: StateView, req: GroupRequest) -> Allocs | None:
        if req.units <= 0:
            return []
        c = _Call(state, req, self._rng)
        mode = network_topology(req)
        if mode is Mode.NONE:
            return self._normal_pods(c)
        for tier in GRADIENTS[mode]:
            domain = self._best_hypernode(c, tier)
            if domain is not None:
                return self._fill(c, domain[1])
        return None

    # ------------------------------------------------------------------ hard (and soft) topology
    def _domains(self, c: _Call, tier: Tier) -> list[Domain]:
        if tier is Tier.RACK:
            need = c.req.units * c.at_least  # whole GPUs a rack must have free
            return [(r, [r]) for r in c.racks if c.state.rack_whole[r] >= need]
        if tier is Tier.CLUSTER:
            return [(0, c.racks)] if c.racks else []
        by_region: dict[int, list[int]] = {}
        for r in c.racks:
            by_region.setdefault(c.state.cluster.racks[r].region, []).append(r)
        return sorted(by_region.items())

    def _best_hypernode(self, c: _Call, tier: Tier) -> Domain | None:
        """``allocateForJob`` on one gradient: the HyperNodes of ``tier`` that hold the gang, the one with the
        highest binpack score (``selectBestHyperNodeForJob``), ties at random."""
        request = c.req.units * c.w
        scored: list[tuple[float, Domain]] = []
        for d in self._domains(c, tier):
            if tier is Tier.RACK:
                used, cap = c.rack_usage(d[0])
            elif tier is Tier.REGION:
                used, cap = c.region_usage(d[0])
            else:
                used, cap = 0.0, 1.0  # the root alone: nothing to compare
            scored.append((round(binpack(used, request, cap), _DIGITS), d))
        scored.sort(key=lambda s: -s[0])  # stable: HyperNodes in index order within a score
        best: list[Domain] = []
        top = 0.0
        for score, d in scored:
            if best and score < top:
                break
            if sum(c.capacity(r) for r in d[1]) >= c.req.units:  # the dry run succeeds
                best.append(d)
                top = score
        return best[c.rng.randrange(len(best))] if best else None

    def _fill(self, c: _Call, racks: list[int]) -> Allocs | None:
        """Task by task inside the chosen HyperNode: the node nearest the job's ``AllocatedHyperNode`` (the LCA
        tier), then the rack holding more of its tasks, then at random."""
        region_of = [rk.region for rk in c.state.cluster.racks]
        where: Where | None = None

        def key(r: int) -> tuple[float, ...]:
            near = 0 if where is None else -_lca(where, r, region_of)[0]
            return (near, c.placed.get(r, 0))

        def taken(r: int) -> None:
            nonlocal where
            where = _lca(where, r, region_of)

        # The rack just used stays the best while it holds a unit: its LCA and task count lead.
        return self._tasks(c, racks, key, keep=True, taken=taken)

    # ------------------------------------------------------------------ no networkTopology
    def _normal_pods(self, c: _Call) -> Allocs | None:
        """Every task on its own, on the whole cluster, scored by HyperNode-level binpacking: the fullest rack
        once the task is in, weighed with its region (tier weights fading^(t-1))."""
        f = self.fading
        region_of = [rk.region for rk in c.state.cluster.racks]

        def key(r: int) -> tuple[float, ...]:
            used, cap = c.rack_usage(r)
            g_used, g_cap = c.region_usage(region_of[r])
            score = (binpack(used, c.w, cap) + f * binpack(g_used, c.w, g_cap)) / (1 + f)
            return (round(score, _DIGITS),)

        # A task raises its own rack's score most: that rack stays the best while it holds one.
        return self._tasks(c, c.racks, key, keep=c.w > 0)

    def _tasks(
        self,
        c: _Call,
        racks: list[int],
        key: Callable[[int], tuple[float, ...]],
        *,
        keep: bool,
        taken: Callable[[int], None] = lambda r: None,
    ) -> Allocs | None:
        """The request's units one at a time, each on the best node of ``racks`` (:meth:`_next_rack` by ``key``);
        ``keep``: the rack just used stays the choice while it holds one more (unless the units spread), which
        ``key`` would give anyway (a shortcut). ``taken`` is told of each unit's rack."""
        current = -1
        for _ in range(c.req.units):
            if keep and current >= 0 and not c.req.spread and c.counts(current)[0] > 0:
                r, fresh = current, True
            else:
                chosen = self._next_rack(c, racks, key)
                if chosen is None:
                    return None
                r, fresh = chosen
            current = c.take(c.pick_node(r, fresh))
            taken(current)
        return c.allocs()

    # ------------------------------------------------------------------ the best node
    def _next_rack(
        self, c: _Call, racks: list[int], key: Callable[[int], tuple[float, ...]]
    ) -> tuple[int, bool] | None:
        """The rack of the next task: among the nodes that hold one, those with the highest (fresh for a
        spreading replica, then ``key`` of their rack) win, one at random (``SelectBestNodeAndScore``).
        Returns the rack drawn with a weight of its count of such nodes, and whether they are fresh."""
        best: list[tuple[int, bool, int]] = []
        top: tuple[float, ...] | None = None
        for r in racks:
            fresh, stale = c.counts(r)
            for is_fresh, count in ((True, fresh), (False, stale)):
                if not count:
                    continue
                k = (1.0 if is_fresh else 0.0, *key(r))
                if top is None or k > top:
                    top, best = k, [(r, is_fresh, count)]
                elif k == top:
                    best.append((r, is_fresh, count))
        if not best:
            return None
        draw = c.rng.randrange(sum(n for _, _, n in best))
        for r, is_fresh, count in best:
            if draw < count:
                return r, is_fresh
            draw -= count
        raise AssertionError("unreachable")  # pragma: no cover
