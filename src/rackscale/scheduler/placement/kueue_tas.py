"""Kueue's Topology Aware Scheduling (TAS) as a placer: ``kueue-tas``.

Kueue assigns a pod set to topology domains in two phases (``findTopologyAssignment`` in
kubernetes-sigs/kueue ``pkg/cache/scheduler/tas_flavor_snapshot.go``; docs/baselines.md cites the lines):

1. count, for every node, how many pods of the pod set fit, and sum the counts up the tree;
2. a) find the domains at the requested level that take the whole pod set: the lowest level first, one
      level up at a time for a *preferred* level, never up for a *required* one; at the top level (or for
      an unconstrained pod set) take several domains greedily;
   b) walk down level by level, taking the children of the chosen domains in sorted order: each gives all
      the pods it holds, and the last one (the one the rest fits in) is swapped for the tightest that fits.

``BestFit`` sorts domains by free pods, most first, and swaps in the fitting domain with the fewest free
pods; ``LeastFreeCapacity`` sorts fewest first and takes them as they come. With ``TASProfileMixed`` (on by
default since Kueue v0.15) unconstrained pod sets use ``LeastFreeCapacity`` and all others ``BestFit``.

Our levels are region > rack > node (the hostname level is the lowest: pods are assigned to nodes). What
a :class:`GroupRequest` asks maps to Kueue's annotations:

- a required rack or region: ``podset-required-topology`` at that level;
- a preferred rack: ``podset-preferred-topology: rack``;
- no rack wish but one region preferred (a training gang without a rack preference):
  ``podset-preferred-topology: region``;
- no wish at all (batch tasks): no annotation. On a TAS-only ClusterQueue Kueue then uses TAS implicitly
  (``TASPodSetRequests.Implied``), at the lowest level and *unconstrained* (``isUnconstrained``).

Kueue ignores pod anti-affinity under TAS (its docs' "Limitations"), so replicas are not spread. Each GPU
model is one ResourceFlavor, tried in the cluster's order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from rackscale.model.placement import NodeAlloc
from rackscale.model.view import StateView
from rackscale.scheduler.placement.request import GroupRequest, take_units, units_fit

Allocs = list[NodeAlloc]
Caps = Mapping[int, int]


class Lvl(IntEnum):
    """Topology levels, highest first (Kueue's ``levelKeys`` order)."""

    REGION = 0
    RACK = 1
    NODE = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class TasRequest:
    """A pod set's topology request as Kueue reads it."""

    level: Lvl
    required: bool = False
    unconstrained: bool = False


def tas_request(req: GroupRequest) -> TasRequest:
    """The Kueue annotation a request stands for (see the module docstring)."""
    if req.one_rack:
        return TasRequest(level=Lvl.RACK, required=True)
    if req.one_region:
        return TasRequest(level=Lvl.REGION, required=True)
    if req.prefer_one_rack:
        return TasRequest(level=Lvl.RACK)
    if req.prefer_one_region:
        return TasRequest(level=Lvl.REGION)
    return TasRequest(level=Lvl.NODE, unconstrained=True)  # implied TAS: lowest level, unconstrained


@dataclass(frozen=True, slots=True, kw_only=True)
class Tree:
    """Phase 1 for one flavor: pods that fit per domain (only domains holding some), and the tree's edges."""

    caps: tuple[dict[int, int], dict[int, int], dict[int, int]]  # per level: domain index -> pods
    children: tuple[dict[int, list[int]], dict[int, list[int]]]  # region -> racks, rack -> nodes


def fill_in_counts(state: StateView, req: GroupRequest, model: str) -> Tree:
    """Pods (units) that fit on every node of ``model`` the request may use, summed up to racks and regions.

    Full racks and full nodes are skipped through the free-GPU buckets: only nodes that can hold a unit
    are looked at (no per-GPU scan for whole-GPU units)."""
    w = req.unit.gpus
    cluster = state.cluster
    nodes: dict[int, int] = {}
    racks: dict[int, int] = {}
    regions: dict[int, int] = {}
    rack_nodes: dict[int, list[int]] = {}
    region_racks: dict[int, list[int]] = {}
    for r in state.racks_descending(model, w):
        if not req.rack_allowed(r):
            continue
        held: list[int] = []
        total = 0
        for n in state.rack_node_index[r].descending(w):
            k = units_fit(state, n, req.unit)
            if k > 0:
                nodes[n] = k
                held.append(n)
                total += k
        if total:
            g = cluster.racks[r].region
            racks[r] = total
            rack_nodes[r] = held
            regions[g] = regions.get(g, 0) + total
            region_racks.setdefault(g, []).append(r)
    return Tree(caps=(regions, racks, nodes), children=(region_racks, rack_nodes))


def sorted_domains(domains: Sequence[int], caps: Caps, *, least_free: bool) -> list[int]:
    """Kueue's ``sortedDomains``: by free pods (most first for BestFit, fewest first for LeastFreeCapacity),
    then by the domain's place in the tree (its ``levelValues``; our indexes follow the tree's order)."""
    if least_free:
        return sorted(domains, key=lambda d: (caps[d], d))
    return sorted(domains, key=lambda d: (-caps[d], d))


def best_fit_domain(domains: Sequence[int], caps: Caps, need: int) -> int:
    """Kueue's ``findBestFitDomain``: the first domain with the fewest free pods that still holds ``need``
    (``domains[0]`` when none does)."""
    best = domains[0]
    for d in domains:
        if need <= caps[d] < caps[best]:
            best = d
    return best


def update_counts_to_minimum(domains: Sequence[int], caps: Caps, count: int, *, best_fit: bool) -> dict[int, int]:
    """Kueue's ``updateCountsToMinimum``: domains in order give all their pods until the rest fits in one;
    with BestFit that last one is the tightest of the remaining that holds the rest. Empty if they cannot."""
    out: dict[int, int] = {}
    remaining = count
    for i, d in enumerate(domains):
        if best_fit and caps[d] >= remaining:
            d = best_fit_domain(domains[i:], caps, remaining)
        if caps[d] >= remaining:
            out[d] = remaining
            return out
        out[d] = caps[d]
        remaining -= caps[d]
    return {}


def find_level_with_fit_domains(
    tree: Tree, level: Lvl, count: int, tas: TasRequest, *, least_free: bool
) -> tuple[Lvl, list[int]] | None:
    """Kueue's ``findLevelWithFitDomains``: the domains at ``level`` or above to assign the pod set to."""
    caps = tree.caps[level]
    ordered = sorted_domains(list(caps), caps, least_free=least_free)
    if least_free:
        for d in ordered:
            if caps[d] >= count:
                return level, [d]
    elif ordered and caps[ordered[0]] >= count:
        return level, [best_fit_domain(ordered, caps, count)]
    if tas.required:
        return None
    if level > Lvl.REGION and not tas.unconstrained:
        return find_level_with_fit_domains(tree, Lvl(level - 1), count, tas, least_free=least_free)
    # The top level (or an unconstrained pod set): several domains, in sorted order, the last one best fit.
    chosen: list[int] = []
    remaining = count
    for i, d in enumerate(ordered):
        if remaining <= 0:
            break
        if not least_free and caps[d] >= remaining:
            d = best_fit_domain(ordered[i:], caps, remaining)
        chosen.append(d)
        remaining -= caps[d]
    return (level, chosen) if remaining <= 0 else None


def find_topology_assignment(tree: Tree, count: int, tas: TasRequest, *, least_free: bool) -> dict[int, int]:
    """Pods per node for the whole pod set, or empty if it does not fit."""
    found = find_level_with_fit_domains(tree, tas.level, count, tas, least_free=least_free)
    if found is None:
        return {}
    fit_level, domains = found
    assigned = update_counts_to_minimum(domains, tree.caps[fit_level], count, best_fit=not least_free)
    for lvl in range(fit_level, Lvl.NODE):
        # Above the slice level Kueue sorts the children of all chosen domains together and fills them
        # greedily, without capping a child by what its parent was given.
        kids = [c for d in assigned for c in tree.children[lvl][d]]
        caps = tree.caps[lvl + 1]
        ordered = sorted_domains(kids, caps, least_free=least_free)
        assigned = update_counts_to_minimum(ordered, caps, count, best_fit=not least_free)
    return assigned


class KueueTAS:
    """Kueue TAS's assignment of one pod set (a placement group) to nodes."""

    name = "kueue-tas"

    def __init__(self, *, profile_mixed: bool = True) -> None:
        # TASProfileMixed (beta, default on since v0.15): LeastFreeCapacity for unconstrained pod sets.
        # Off: BestFit for every pod set, Kueue's default before v0.15.
        self.profile_mixed = profile_mixed

    def place(self, state: StateView, req: GroupRequest) -> Allocs | None:
        if req.units <= 0:
            return []
        tas = tas_request(req)
        least_free = tas.unconstrained and self.profile_mixed
        for model in req.models:  # one ResourceFlavor per GPU model, in the cluster's order
            tree = fill_in_counts(state, req, model)
            pods = find_topology_assignment(tree, req.units, tas, least_free=least_free)
            if pods:
                return [a for n in sorted(pods) for a in take_units(state, n, req.unit, pods[n])]
        return None
