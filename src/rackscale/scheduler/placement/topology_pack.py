"""rackscale's placement: pack gangs into the fewest NVLink domains, keep whole racks and GPUs free.

- A group that fits in one rack goes to the rack with the fewest free GPUs that holds it (best fit on
  the rack level preserves whole free racks for large gangs), then to best-fit nodes inside that rack.
- A group larger than a rack takes the fewest racks of one region: whole free racks side by side
  (the tightest window of rack indexes), and the remainder in the best-fit rack.
- Inference replicas spread over nodes and over the job's ``spread_racks`` racks (availability), then
  pack into the fullest of those racks: no replica takes an empty rack the spread does not ask for.
- Tasks without communication (batch) fill the fullest nodes first, in racks already in use before racks
  no job uses (those stay whole for gangs).
- Shared-GPU (fractional) units go to the partly used GPU they fit most tightly, else open a GPU as batch
  tasks do. On clusters of one-node racks they, and one-node batch units of a GPU-sharing workload, go
  where the expected GPU fragmentation grows least (:mod:`rackscale.scheduler.placement.fragmentation`).
  The rule, with the measurements behind it: docs/placement.md.
"""

from __future__ import annotations

from collections.abc import Iterator

from rackscale.model.placement import NodeAlloc
from rackscale.model.view import StateView
from rackscale.scheduler.placement.fragmentation import FragmentAware
from rackscale.scheduler.placement.request import (
    GroupRequest,
    fill_best_fit,
    fill_in_order,
    nodes_ascending_in_rack,
    nodes_sparing_racks,
    own_racks_ascending,
    racks_ascending,
    take_units,
    units_fit,
)

Allocs = list[NodeAlloc]
_NONE: frozenset[int] = frozenset()


class TopologyPack:
    name = "topology-pack"

    def __init__(self) -> None:
        # GPU-sharing workloads: fractional units, and one-node units once the workload shares GPUs.
        self.sharing = FragmentAware()

    def place(self, state: StateView, req: GroupRequest) -> Allocs | None:
        unit = req.unit
        if _for_sharing(self.sharing, state, req):
            return self.sharing.place(state, req)
        if unit.is_fractional:
            return self._fractional(state, req)
        if not unit.gpus:
            return self._cpu_only(state, req)
        if req.one_rack or req.prefer_one_rack or req.compact or req.one_region:
            got = self._single_rack(state, req)
            if got is not None or req.one_rack or not req.allow_split:
                return got
            return self._multi_rack(state, req)
        return self._fill_fragments(state, req)

    # ------------------------------------------------------------------ one rack
    def _single_rack(self, state: StateView, req: GroupRequest) -> Allocs | None:
        """The best-fit rack; replicas (``spread``) widen to new racks, then pack (see ``_widen``/``_pack``)."""
        total = max(req.total_gpus, 1)
        if req.spread:
            return self._widen(state, req, total) if req.widens else self._pack(state, req, total)
        exclude, only = req.exclude_racks, req.only_racks  # ``rack_allowed``, inline: a check per rack
        for rack in racks_ascending(state, req.models, total):  # lazily: the first best-fit rack usually holds it
            if rack in exclude or (only is not None and rack not in only):
                continue
            got = self._fill_rack(state, rack, req, req.units, avoid=_NONE)
            if got is not None:
                return got
        return None

    def _widen(self, state: StateView, req: GroupRequest, total: int) -> Allocs | None:
        """A replica while the job spans fewer racks than its spread asks: in order of preference, a new
        rack (the fullest that holds it) and new nodes, a rack already used but new nodes (node
        anti-affinity first, as the seed's hostname rule), then anything that fits."""
        candidates = (r for r in racks_ascending(state, req.models, total) if req.rack_allowed(r))
        used: list[int] = []
        for rack in candidates:
            if rack in req.avoid_racks:
                used.append(rack)
                continue
            got = self._fill_rack(state, rack, req, req.units, avoid=req.avoid_nodes)
            if got is not None:
                return got
        for rack in used:
            got = self._fill_rack(state, rack, req, req.units, avoid=req.avoid_nodes)
            if got is not None:
                return got
        return self._anywhere(state, req, total)

    def _pack(self, state: StateView, req: GroupRequest, total: int) -> Allocs | None:
        """A replica once the job spans the racks its spread asks for: the fullest of the job's racks that
        holds it on a node the job does not use (best fit), then other racks, fullest first (partly used
        racks before racks no job uses), new nodes still; then anything that fits."""
        for rack in own_racks_ascending(state, req, total):
            got = self._fill_rack(state, rack, req, req.units, avoid=req.avoid_nodes)
            if got is not None:
                return got
        for rack in racks_ascending(state, req.models, total):
            if rack not in req.avoid_racks and req.rack_allowed(rack):
                got = self._fill_rack(state, rack, req, req.units, avoid=req.avoid_nodes)
                if got is not None:
                    return got
        return self._anywhere(state, req, total)

    def _anywhere(self, state: StateView, req: GroupRequest, total: int) -> Allocs | None:
        for rack in racks_ascending(state, req.models, total):
            if req.rack_allowed(rack):
                got = self._fill_rack(state, rack, req, req.units, avoid=_NONE)
                if got is not None:
                    return got
        return None

    def _fill_rack(
        self, state: StateView, rack: int, req: GroupRequest, units: int, *, avoid: frozenset[int]
    ) -> Allocs | None:
        g = max(req.unit.gpus, 1)
        if units > 1 or g > 1:
            # The units the rack's nodes could hold by whole-free counts alone (CPU, memory and the nodes
            # to avoid only lower it), from its buckets: when fewer than asked, the node-by-node search
            # would fail, and a third of the racks a backlog cycle tries are such racks.
            buckets = state.rack_node_index[rack].buckets
            room = 0
            for c in range(g, len(buckets)):
                room += len(buckets[c]) * (c // g)
            if room < units:
                return None
        return fill_best_fit(state, nodes_ascending_in_rack(state, rack, g), units, req.unit, avoid=avoid)

    # ------------------------------------------------------------------ several racks
    def _multi_rack(self, state: StateView, req: GroupRequest) -> Allocs | None:
        total = req.total_gpus
        free = sum(state.model_free_whole[m] for m in req.models)
        if free < total:
            return None
        # Rank regions by how few racks they would need (free counts only: cheap), then build the
        # allocation for the best one; the next region only if node-level checks fail there.
        ranked = sorted(
            (n, g) for g in range(len(state.cluster.regions)) if (n := self._racks_needed(state, req, g)) is not None
        )
        for _, g in ranked:
            got = self._plan_region(state, req, region=g)
            if got is not None:
                return got
        if req.one_region:
            return None
        return self._plan_region(state, req, region=None)

    @staticmethod
    def _racks_needed(state: StateView, req: GroupRequest, region: int) -> int | None:
        """Racks of ``region`` a greedy fill (roomiest first) would use, or None if it cannot hold it."""
        w = req.unit.gpus
        need, used = req.total_gpus, 0
        for m in req.models:
            for r in state.racks_descending(m, w, region):
                if not req.rack_allowed(r):
                    continue
                need -= (state.rack_whole[r] // w) * w
                used += 1
                if need <= 0:
                    return used
        return None

    def _plan_region(self, state: StateView, req: GroupRequest, *, region: int | None) -> Allocs | None:
        """Fewest racks: whole free racks in the tightest index window, then the best-fit remainder."""
        cluster = state.cluster
        w = req.unit.gpus
        chosen: list[int] = []
        remaining = req.total_gpus
        for m in req.models:
            for g in [region] if region is not None else range(len(cluster.regions)):
                ix = state.rack_index.get((m, g))
                if ix is None or remaining <= 0:
                    continue
                cap = state.rack_capacity_of[(m, g)]
                full = sorted(r for r in ix.buckets[cap] if req.rack_allowed(r))
                q = min(remaining // cap, len(full))
                if q:
                    # The tightest window of rack indexes: racks side by side share switches.
                    window = min(
                        (full[i : i + q] for i in range(len(full) - q + 1)),
                        key=lambda s: (s[-1] - s[0], s[0]),
                    )
                    chosen.extend(window)
                    remaining -= q * cap
        if remaining > 0:
            taken = set(chosen)
            # Best fit for the remainder, then the roomiest racks for whatever is left.
            while remaining > 0:
                rest = [r for r in self._racks_in(state, req, region, at_least=w) if r not in taken]
                if not rest:
                    return None
                tight = next((r for r in rest if state.rack_whole[r] >= remaining), None)
                pick = tight if tight is not None else rest[-1]
                taken.add(pick)
                chosen.append(pick)
                remaining -= (state.rack_whole[pick] // w) * w if tight is None else remaining
        # Units per chosen rack: as many as each holds, the rest on the last. A rack holds exactly its
        # room (its nodes' fits), so the plan is checked on counts before any slice is built.
        unit = req.unit
        whole = state.node_whole if not unit.cpu_milli and not unit.memory_mib else None  # (see fill_best_fit)
        takes: list[int] = []
        units = req.units
        for i, rack in enumerate(chosen):
            nodes = cluster.racks[rack].nodes
            room = (
                sum(whole[n] // w for n in nodes)
                if whole is not None
                else sum(units_fit(state, n, unit) for n in nodes)
            )
            k = units if i == len(chosen) - 1 else min(units, room)
            if k > room:
                return None
            takes.append(k)
            units -= k
        if units:
            return None
        out: Allocs = []
        for rack, k in zip(chosen, takes, strict=True):
            if k:
                got = self._fill_rack(state, rack, req, k, avoid=_NONE)
                if got is None:  # (cannot happen: a rack holds its room)
                    return None
                out.extend(got)
        return out

    def _racks_in(self, state: StateView, req: GroupRequest, region: int | None, *, at_least: int) -> list[int]:
        """Allowed racks with room, fewest free first."""
        out: list[int] = []
        for m in req.models:
            out.extend(r for r in state.racks_ascending(m, at_least, region) if req.rack_allowed(r))
        out.sort(key=lambda r: (state.rack_whole[r], r))
        return out

    # ------------------------------------------------------------------ no topology preference
    def _fill_fragments(self, state: StateView, req: GroupRequest) -> Allocs | None:
        """Fullest nodes first, anywhere allowed, racks no job uses last: fragments get used, whole nodes
        and whole racks stay whole."""
        nodes = nodes_sparing_racks(state, req.models, req.unit.gpus)
        return fill_in_order(state, _allowed(state, req, nodes), req.units, req.unit, avoid=frozenset())

    def _fractional(self, state: StateView, req: GroupRequest) -> Allocs | None:
        """One shared-GPU unit (the scheduler splits fractional jobs into one group per unit). A replica
        goes to a rack its job does not use yet while its spread asks for one (if any holds it)."""
        if req.widens:
            got = self._fractional_in(state, req, skip=req.avoid_racks)
            if got is not None:
                return got
        return self._fractional_in(state, req, skip=_NONE)

    def _fractional_in(self, state: StateView, req: GroupRequest, *, skip: frozenset[int]) -> Allocs | None:
        unit = req.unit
        nodes = state.cluster.nodes
        best: tuple[int, int, int, int] | None = None  # (leftover on GPU, node whole free, node, gpu)
        for m in req.models:
            for n in state.shared_nodes[m]:
                rack = nodes[n].rack
                if rack in skip or not req.rack_allowed(rack) or n in req.avoid_nodes:
                    continue
                if (unit.cpu_milli > state.cpu_free[n]) or (unit.memory_mib > state.mem_free[n]):
                    continue
                for g in range(len(state.gpu_free[n])):
                    f = state.usable_free(n, g)
                    if unit.gpu_milli <= f < 1000:
                        key = (f - unit.gpu_milli, state.node_whole[n], n, g)
                        if best is None or key < best:
                            best = key
        if best is not None:
            _, _, n, g = best
            return [_slice(n, g, unit.gpu_milli, unit.cpu_milli, unit.memory_mib)]
        # Open a whole GPU on the node with the fewest whole free GPUs that fits, racks no job uses last.
        for avoid in (req.avoid_nodes, frozenset()):
            for n in nodes_sparing_racks(state, req.models, 1):
                rack = nodes[n].rack
                if n in avoid or rack in skip or not req.rack_allowed(rack):
                    continue
                if units_fit(state, n, unit):
                    return take_units(state, n, unit, 1)
        return None

    def _cpu_only(self, state: StateView, req: GroupRequest) -> Allocs | None:
        """CPU-only units go first to nodes whose GPUs are all taken, so GPU nodes keep their CPUs."""
        indexes = list(state.node_index.values())  # every node, CPU-only ones included
        nodes = (n for c in range(len(indexes[0].buckets)) for ix in indexes for n in ix.buckets[c])
        return fill_in_order(state, _allowed(state, req, nodes), req.units, req.unit, avoid=frozenset())


def _for_sharing(sharing: FragmentAware, state: StateView, req: GroupRequest) -> bool:
    """On a cluster without multi-node NVLink domains (every rack one node: Kubernetes nodes without clique
    labels, the openb trace): fractional units without a spread (replicas keep their anti-affinity path),
    and, once the workload shares GPUs, single one-node units with no topology wish (batch pods). On NVL72
    racks nothing comes here: shared units there would take GPUs the rack-level gang packing needs (tried:
    the synthetic default's mean JCT grew 17 %), so the rack-aware paths above decide."""
    if state.cluster.max_rack_gpus > state.max_node_gpus:
        return False
    if req.spread or req.one_rack or req.one_region or req.units != 1:
        return False
    if req.unit.is_fractional:
        return True
    if req.prefer_one_rack or req.compact or req.unit.gpus > state.max_node_gpus:
        return False
    sharing.observe(req)
    return sharing.shares_gpus


def _allowed(state: StateView, req: GroupRequest, nodes: Iterator[int]) -> Iterator[int]:
    return (n for n in nodes if req.rack_allowed(state.cluster.nodes[n].rack))


def _slice(n: int, g: int, milli: int, cpu: int, mem: int) -> NodeAlloc:
    return NodeAlloc(n, (g,), milli, cpu, mem)
