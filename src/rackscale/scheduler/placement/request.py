"""The question a placement plugin answers: where do ``units`` units of ``unit`` go?

The scheduler turns a job into one or more :class:`GroupRequest` (a training gang is one group; each
inference replica is one group) and asks the profile's placer. Node-level helpers shared by all placers
live here too; they look only at the nodes of one rack or at index buckets, never at the whole cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from itertools import chain

from rackscale.model.placement import NodeAlloc
from rackscale.model.topology import MILLI_PER_GPU
from rackscale.model.view import StateView
from rackscale.model.workload import Resources

UNLIMITED = 1 << 30
# ``tuple(range(k))`` and ``(g,)``, built once (``take_units`` hands them out rather than build a tuple per
# slice): the first GPUs of a node whose GPUs are all whole free, and one GPU.
_FIRST_GPUS: tuple[tuple[int, ...], ...] = tuple(tuple(range(k)) for k in range(17))
_ONE_GPU: tuple[tuple[int], ...] = tuple((g,) for g in range(16))


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
        want = k * unit.gpus
        free = state.gpu_free[n]
        if state.node_whole[n] == len(free):  # every GPU whole free: the first ones
            gpus = _FIRST_GPUS[want] if want < len(_FIRST_GPUS) else tuple(range(want))
        elif not state.gpu_failed[n]:  # ``state.whole_free_gpus``, with no failed GPU to skip:
            if want == 1:  # (most jobs) the first whole free GPU, found in C
                g = free.index(MILLI_PER_GPU)
                gpus = _ONE_GPU[g] if g < len(_ONE_GPU) else (g,)
            else:  # a loop: a comprehension builds a function and a frame per call
                picked: list[int] = []
                for g, f in enumerate(free):
                    if f == MILLI_PER_GPU:
                        picked.append(g)
                        if len(picked) == want:
                            break
                gpus = tuple(picked)
        else:
            gpus = state.whole_free_gpus(n, want)
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
    gpus = unit.gpus
    # Whole GPUs and nothing else (nearly every gang): a node's fit is its whole-free count divided,
    # read here rather than through ``units_fit`` (a down node has none whole free).
    whole = state.node_whole if gpus and not unit.cpu_milli and not unit.memory_mib else None
    order: list[int] = []
    fit: list[int] = []
    for n in candidates_asc:
        if n in avoid:
            continue
        k = whole[n] // gpus if whole is not None else units_fit(state, n, unit)
        if k >= units:  # the tightest node that holds it all: the common case, decided early
            return take_units(state, n, unit, units)
        if k > 0:
            order.append(n)
            fit.append(k)
    if sum(fit) < units:
        return None
    # The roomiest node first, the first of equals first (a stable sort, as ``max`` picks the first);
    # as soon as the roomiest left holds the remainder, the first node in order that holds it takes it.
    out: list[NodeAlloc] = []
    remaining = units
    taken: set[int] = set()
    for i in sorted(range(len(order)), key=fit.__getitem__, reverse=True):
        if fit[i] >= remaining:
            tight = next(j for j in range(len(order)) if fit[j] >= remaining and j not in taken)
            out.extend(take_units(state, order[tight], unit, remaining))
            return out
        out.extend(take_units(state, order[i], unit, fit[i]))
        remaining -= fit[i]
        taken.add(i)
    raise AssertionError("unreachable: the nodes hold the units")  # pragma: no cover


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
    """Racks of any allowed model with >= ``at_least`` whole free GPUs, fewest free first.

    For one model, the same order as ``state.racks_ascending``, read as a chain of the buckets (C-level
    iteration): a cycle looks at thousands of racks, and each would otherwise pass through three
    generators."""
    if len(models) == 1:
        ix = state.rack_index_all.get(models[0])
        return chain.from_iterable(ix.buckets[max(at_least, 0) :]) if ix is not None else iter(())
    return _merged_ascending(_merged(state, models), at_least)


def racks_descending(state: StateView, models: tuple[str, ...], at_least: int) -> Iterator[int]:
    if len(models) == 1:
        ix = state.rack_index_all.get(models[0])
        return chain.from_iterable(reversed(ix.buckets[max(at_least, 0) :])) if ix is not None else iter(())
    return _merged_descending(_merged(state, models), at_least)


def _merged_ascending(buckets: list[Sequence[AbstractSet[int]]], at_least: int) -> Iterator[int]:
    if buckets:
        for c in range(max(at_least, 0), len(buckets[0])):
            for b in buckets:
                yield from b[c]


def _merged_descending(buckets: list[Sequence[AbstractSet[int]]], at_least: int) -> Iterator[int]:
    if buckets:
        for c in range(len(buckets[0]) - 1, max(at_least, 0) - 1, -1):
            for b in buckets:
                yield from b[c]


def nodes_ascending_in_rack(state: StateView, rack: int, at_least: int) -> Iterator[int]:
    """``state.rack_node_index[rack].ascending(at_least)``, as a chain of its buckets (see above)."""
    return chain.from_iterable(state.rack_node_index[rack].buckets[max(at_least, 0) :])


def nodes_ascending(state: StateView, models: tuple[str, ...], at_least: int) -> Iterator[int]:
    for m in models:
        yield from state.node_index[m].ascending(at_least)
