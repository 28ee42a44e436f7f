"""The question a placement plugin answers: where do ``units`` units of ``unit`` go?

The scheduler turns a job into one or more :class:`GroupRequest` (a training gang is one group; each
inference replica is one group) and asks the profile's placer. Node-level helpers shared by all placers
live here too; they look only at the nodes of one rack or at index buckets, never at the whole cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from rackscale.model.placement import NodeAlloc
from rackscale.model.topology import MILLI_PER_GPU
from rackscale.model.view import StateView
from rackscale.model.workload import Resources

UNLIMITED = 1 << 30


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupRequest:
    job: str
    units: int
    unit: Resources
    models: tuple[str, ...]  # allowed GPU models that exist in the cluster
    one_rack: bool = False  # hard: all units inside one rack (required rack, or one inference replica)
    prefer_one_rack: bool = False
    allow_split: bool = True  # may a group that prefers one rack be split over racks now?
    one_region: bool = False  # hard
    prefer_one_region: bool = True
    compact: bool = False  # a tensor-parallel group: fewest nodes
    spread: bool = False  # inference replicas: keep away from the job's other nodes and racks (soft)
    avoid_nodes: frozenset[int] = frozenset()
    avoid_racks: frozenset[int] = frozenset()
    exclude_racks: frozenset[int] = frozenset()  # hard: held by a reservation
    only_racks: frozenset[int] | None = None  # hard: where preemption made room

    @property
    def total_gpus(self) -> int:
        return self.units * self.unit.gpus

    def rack_allowed(self, rack: int) -> bool:
        if rack in self.exclude_racks:
            return False
        return self.only_racks is None or rack in self.only_racks


def units_fit(state: StateView, n: int, unit: Resources) -> int:
    """How many units of ``unit`` node ``n`` can take now."""
    if state.node_down[n]:
        return 0
    if unit.gpus:
        k = state.node_whole[n] // unit.gpus
    elif unit.gpu_milli:
        k = 0
        for g in range(len(state.gpu_free[n])):
            k += state.usable_free(n, g) // unit.gpu_milli
    else:
        k = UNLIMITED
    if k and unit.cpu_milli:
        k = min(k, state.cpu_free[n] // unit.cpu_milli)
    if k and unit.memory_mib:
        k = min(k, state.mem_free[n] // unit.memory_mib)
    return k


def take_units(state: StateView, n: int, unit: Resources, k: int) -> list[NodeAlloc]:
    """Slices for ``k`` units on node ``n`` (the caller checked :func:`units_fit`). Fractional units
    go to the GPU whose free share fits most tightly, so whole GPUs stay whole."""
    if unit.gpus:
        gpus = state.whole_free_gpus(n, k * unit.gpus)
        return [NodeAlloc(n, gpus, MILLI_PER_GPU, unit.cpu_milli * k, unit.memory_mib * k)]
    if not unit.gpu_milli:
        return [NodeAlloc(n, (), MILLI_PER_GPU, unit.cpu_milli * k, unit.memory_mib * k)]
    free = [state.usable_free(n, g) for g in range(len(state.gpu_free[n]))]
    out: list[NodeAlloc] = []
    for _ in range(k):
        best = min((g for g, f in enumerate(free) if f >= unit.gpu_milli), key=lambda g: (free[g], g))
        free[best] -= unit.gpu_milli
        out.append(NodeAlloc(n, (best,), unit.gpu_milli, unit.cpu_milli, unit.memory_mib))
    return out


def fill_best_fit(
    state: StateView, candidates_asc: Iterable[int], units: int, unit: Resources, *, avoid: frozenset[int]
) -> list[NodeAlloc] | None:
    """Place ``units`` on the given nodes (fewest-free first), best fit: the remainder goes to the
    tightest node that holds it all, else the roomiest node is filled and we go on. ``None`` if they
    cannot hold it; nothing is changed either way."""
    order: list[int] = []
    fit: dict[int, int] = {}
    for n in candidates_asc:
        if n in avoid:
            continue
        k = units_fit(state, n, unit)
        if k >= units:  # the tightest node that holds it all: the common case, decided early
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


def fill_in_order(
    state: StateView, nodes: Iterable[int], units: int, unit: Resources, *, avoid: frozenset[int]
) -> list[NodeAlloc] | None:
    """Place ``units`` on nodes in the given order, as many as fit on each (first fit)."""
    out: list[NodeAlloc] = []
    remaining = units
    for n in nodes:
        if n in avoid:
            continue
        k = min(units_fit(state, n, unit), remaining)
        if k:
            out.extend(take_units(state, n, unit, k))
            remaining -= k
            if remaining == 0:
                return out
    return None


def _merged(state: StateView, models: tuple[str, ...]) -> list[Sequence[AbstractSet[int]]]:
    return [ix.buckets for m in models if (ix := state.rack_index_all.get(m)) is not None]


def racks_ascending(state: StateView, models: tuple[str, ...], at_least: int) -> Iterator[int]:
    """Racks of any allowed model with >= ``at_least`` whole free GPUs, fewest free first."""
    if len(models) == 1:
        yield from state.racks_ascending(models[0], at_least)
        return
    buckets = _merged(state, models)
    if buckets:
        for c in range(max(at_least, 0), len(buckets[0])):
            for b in buckets:
                yield from b[c]


def racks_descending(state: StateView, models: tuple[str, ...], at_least: int) -> Iterator[int]:
    if len(models) == 1:
        yield from state.racks_descending(models[0], at_least)
        return
    buckets = _merged(state, models)
    if buckets:
        for c in range(len(buckets[0]) - 1, max(at_least, 0) - 1, -1):
            for b in buckets:
                yield from b[c]


def nodes_ascending(state: StateView, models: tuple[str, ...], at_least: int) -> Iterator[int]:
    for m in models:
        yield from state.node_index[m].ascending(at_least)
