"""The question a placement plugin answers: where do ``units`` units of ``unit`` go?

The scheduler turns a job into one or more :class:`GroupRequest` (a training gang is one group; each
inference replica is one group) and asks the profile's placer. Node-level helpers shared by all placers
live here too; they look only at the nodes of one rack or at index buckets, never at the whole cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from itertools import chain
from typing import NamedTuple

from rackscale.model.placement import NodeAlloc
from rackscale.model.topology import MILLI_PER_GPU
from rackscale.model.view import StateView
from rackscale.model.workload import Resources

UNLIMITED = 1 << 30
# ``tuple(range(k))`` and ``(g,)``, built once (``take_units`` hands them out rather than build a tuple per
# slice): the first GPUs of a node whose GPUs are all whole free, and one GPU.
_FIRST_GPUS: tuple[tuple[int, ...], ...] = tuple(tuple(range(k)) for k in range(17))
_ONE_GPU: tuple[tuple[int], ...] = tuple((g,) for g in range(16))


class GroupRequest(NamedTuple):
    """One placement group's request (built with keywords).

    A named tuple rather than a frozen dataclass, like the cycle's ``JobShape``: one is built for every job
    a cycle tries (2,062 in the 10,000-job backlog cycle at 100,000 GPUs), and a frozen dataclass of these
    15 fields takes 2.8 us to build (each field set through ``object.__setattr__``), a tuple 0.8 us."""

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
    # How many racks a spreading job's replicas span before further ones pack into those (JobSpec.spread_racks).
    spread_racks: int = 2
    avoid_nodes: frozenset[int] = frozenset()
    avoid_racks: frozenset[int] = frozenset()
    exclude_racks: frozenset[int] = frozenset()  # hard: held by a reservation
    only_racks: frozenset[int] | None = None  # hard: where preemption made room

    @property
    def total_gpus(self) -> int:
        return self.units * self.unit.gpus

    @property
    def widens(self) -> bool:
        """Does this replica go to a rack the job does not use yet? Only until it spans ``spread_racks``."""
        return self.spread and len(self.avoid_racks) < self.spread_racks

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


def own_racks_ascending(state: StateView, req: GroupRequest, at_least: int) -> list[int]:
    """The racks the request's job uses (``avoid_racks``) that are allowed and have ``at_least`` whole free
    GPUs of an allowed model, fewest free first. A job's racks are few: sorted here, no rack scan."""
    racks, whole = state.cluster.racks, state.rack_whole
    own = [
        r for r in req.avoid_racks if whole[r] >= at_least and racks[r].gpu_model in req.models and req.rack_allowed(r)
    ]
    own.sort(key=lambda r: (whole[r], r))
    return own


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


def nodes_sparing_racks(state: StateView, models: tuple[str, ...], at_least: int) -> Iterator[int]:
    """:func:`nodes_ascending` (fullest node first) for units that need no rack: the nodes of racks no job
    uses come last, so those racks stay whole for the gangs that need one; the fully free nodes of racks in
    use come fullest rack first (best fit on the rack level, from the rack index: no node scan). On a
    cluster of one-node racks a rack is a node and the order is :func:`nodes_ascending`'s."""
    cluster = state.cluster
    if cluster.max_rack_gpus <= state.max_node_gpus:
        yield from nodes_ascending(state, models, at_least)
        return
    nodes, rack_jobs, top = cluster.nodes, state.rack_jobs, state.max_node_gpus
    later: list[int] = []  # partly free nodes of racks no job uses (failed GPUs, smaller nodes): rare
    for m in models:
        buckets = state.node_index[m].buckets
        for c in range(max(at_least, 0), top):
            for n in buckets[c]:
                if rack_jobs[nodes[n].rack]:
                    yield n
                else:
                    later.append(n)
        if at_least <= top:
            for r in state.racks_ascending(m, top):
                if rack_jobs[r] and len(rb := state.rack_node_index[r].buckets) > top:
                    yield from rb[top]
    yield from later
    if at_least <= top:
        for m in models:
            for n in state.node_index[m].buckets[top]:
                if not rack_jobs[nodes[n].rack]:
                    yield n
