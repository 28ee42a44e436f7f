"""Slurm's topology/block (24.11) with select/cons_tres as a placer: ``slurm-block``.

SchedMD/slurm ``src/plugins/topology/block`` (docs/baselines.md cites the lines):

- Base blocks are the blocks of ``topology.conf``: here the racks (one NVLink domain each), in index order.
  ``BlockSizes`` lists the planning base block size (in nodes) and the larger enforced sizes, each a
  power-of-two multiple of it; unset, the sizes are 1, 2, 4, 8 and 16 base blocks (``block_record.c``),
  cut at the first that covers every block. A level of 2^k base blocks aggregates blocks
  ``[i * 2^k, (i + 1) * 2^k)``.
- A job (or one ``--segment`` of it) of n nodes goes to the smallest enforced level whose blocks hold
  n nodes (``_get_block_level``), to the block of that level with the fewest available nodes that still
  holds it (best fit, the last such block on ties), and inside it to base blocks chosen by
  ``_choose_best_bblock``: the fewest lower-level blocks, then the fewest base blocks (the tightest that
  holds the rest, else the roomiest); nodes are taken in index order (``eval_nodes_block.c``).
- ``--segment=N`` splits the job into equal segments of N nodes, each placed that way on its own, the
  nodes of earlier segments excluded; N must divide the job size.

Our jobs carry no segment size, so the profile chooses one (``SegmentPolicy.AUTO``): a job that fits in a
base block is one segment; a job of whole base blocks (a multiple of its node count) gets segments of one
base block each; any other job runs without ``--segment`` (Slurm refuses uneven segments), i.e. in the
smallest aggregated block that holds it. A job's size in nodes is its units over the units a node holds.

What Slurm counts in nodes (a block "holds" a job if it has enough available nodes, and GPUs are checked
only once a block is chosen) is counted here in the job's units (a node holds as many as ``units_fit``),
so a block with idle nodes but too few free GPUs is never chosen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from rackscale.model.placement import NodeAlloc
from rackscale.model.topology import GPUCluster
from rackscale.model.view import StateView
from rackscale.scheduler.placement.baselines import one_region_at_a_time
from rackscale.scheduler.placement.request import UNLIMITED, GroupRequest, take_units, units_fit

Allocs = list[NodeAlloc]
DEFAULT_LEVELS = (0, 1, 2, 3, 4)  # block_record.c: BlockSizes unset -> bit_nset(block_levels, 0, 4)


class SegmentPolicy(StrEnum):
    AUTO = "auto"  # one segment if the job fits a base block, else one per whole base block (see above)
    OFF = "off"  # never --segment: the whole job in the smallest aggregated block that holds it


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockLayout:
    """The blocks of one cluster: ``count`` base blocks (racks) of ``bblock_nodes`` planned nodes each, and
    the enforced levels (a level-k block spans 2^k base blocks), ascending."""

    count: int
    bblock_nodes: int
    levels: tuple[int, ...]

    @classmethod
    def of(cls, cluster: GPUCluster, block_sizes: Sequence[int] | None = None) -> BlockLayout:
        count = len(cluster.racks)
        if block_sizes:
            base = block_sizes[0]
            wanted = []
            for size in block_sizes:
                ratio = size // base
                if size % base or ratio & (ratio - 1):
                    raise ValueError(f"BlockSizes: {size} is not a power-of-two multiple of {base}")
                wanted.append(ratio.bit_length() - 1)
        else:
            base = len(cluster.racks[0].nodes) if count else 1  # Slurm: the first block's node count
            wanted = list(DEFAULT_LEVELS)
        levels: list[int] = []
        for k in sorted(set(wanted)):
            levels.append(k)
            if 1 << k >= count:  # no larger level is of use: this one covers every block
                break
        return cls(count=count, bblock_nodes=max(base, 1), levels=tuple(levels))

    def block_level(self, nodes: int) -> tuple[int | None, int]:
        """``_get_block_level``: the enforced level for a job of ``nodes`` nodes (None: the whole cluster is
        one block) and the level below it that ``_choose_best_bblock`` minimises."""
        need = math.ceil(math.log2(max(1, -(-nodes // self.bblock_nodes))))
        lower = max((k for k in self.levels if k <= need - 1), default=0)
        level = next((k for k in self.levels if k >= need), None)
        return level, lower


class SlurmBlock:
    """topology/block's node selection for one placement group."""

    name = "slurm-block"

    def __init__(
        self, *, block_sizes: Sequence[int] | None = None, segment: SegmentPolicy = SegmentPolicy.AUTO
    ) -> None:
        self.block_sizes = tuple(block_sizes) if block_sizes else None
        self.segment = segment
        self._layout: tuple[GPUCluster, BlockLayout] | None = None

    def layout(self, cluster: GPUCluster) -> BlockLayout:
        if self._layout is None or self._layout[0] is not cluster:
            self._layout = (cluster, BlockLayout.of(cluster, self.block_sizes))
        return self._layout[1]

    def place(self, state: StateView, req: GroupRequest) -> Allocs | None:
        if req.one_region and not req.one_rack:  # Slurm knows no regions: a partition per region
            return one_region_at_a_time(state, req, lambda r: self.place(state, r), roomiest_first=False)
        if req.units <= 0:
            return []
        layout = self.layout(state.cluster)
        out: Allocs = []
        used: set[int] = set()
        for units, nodes in self.segments(state, req, layout):
            got = _segment(state, req, layout, units, nodes, used)
            if got is None:
                return None
            out.extend(got)
            used.update(a.node for a in got)
        return out

    def segments(self, state: StateView, req: GroupRequest, layout: BlockLayout) -> list[tuple[int, int]]:
        """(units, nodes) of each segment, in order."""
        w = req.unit.gpus
        per_node = max(state.max_node_gpus // w, 1) if w else UNLIMITED
        nodes = -(-req.units // per_node)
        base = layout.bblock_nodes
        if req.one_rack:  # a required rack: one segment inside one base block
            return [(req.units, min(nodes, base))]
        if self.segment is SegmentPolicy.OFF or nodes <= base or nodes % base:
            return [(req.units, nodes)]
        k = nodes // base
        per = base * per_node
        return [(per, base)] * (k - 1) + [(req.units - per * (k - 1), base)]


def _rack_caps(state: StateView, req: GroupRequest, used: set[int]) -> tuple[list[int], dict[int, int]]:
    """Units each rack and node can take (nodes of earlier segments excluded). Racks without a whole free
    GPU for a whole-GPU unit are skipped without looking at their nodes."""
    cluster = state.cluster
    w = req.unit.gpus
    racks = [0] * len(cluster.racks)
    nodes: dict[int, int] = {}
    for r, rack in enumerate(cluster.racks):
        if rack.gpu_model not in req.models or not req.rack_allowed(r) or state.rack_whole[r] < w:
            continue
        for n in rack.nodes:
            k = 0 if n in used else units_fit(state, n, req.unit)
            if k:
                nodes[n] = k
                racks[r] += k
    return racks, nodes


def _segment(
    state: StateView, req: GroupRequest, layout: BlockLayout, units: int, nodes: int, used: set[int]
) -> Allocs | None:
    """One segment (or the whole job) of ``units`` units and ``nodes`` planned nodes, as eval_nodes_block."""
    racks, node_caps = _rack_caps(state, req, used)
    level, lower = layout.block_level(nodes)
    per_block = layout.count if level is None else 1 << level
    per_ll = 1 << lower
    max_ll = -(-nodes // (per_ll * layout.bblock_nodes))
    track_ll = per_block != per_ll * max_ll  # Slurm tracks lower-level blocks only then
    best, best_total = -1, 0
    for b in range(-(-layout.count // per_block)):
        members = range(b * per_block, min((b + 1) * per_block, layout.count))
        total = sum(racks[r] for r in members)
        avail = total
        if track_ll:  # what the job may use: its max_ll roomiest lower-level blocks
            lls: dict[int, int] = {}
            for r in members:
                lls[r >> lower] = lls.get(r >> lower, 0) + racks[r]
            avail = sum(sorted(lls.values(), reverse=True)[:max_ll])
        if avail >= units and (best == -1 or total <= best_total):
            best, best_total = b, total
    if best == -1:
        return None
    members = range(best * per_block, min((best + 1) * per_block, layout.count))
    on_ll: dict[int, int] | None = None
    if track_ll:
        on_ll = {}
        for r in members:
            on_ll[r >> lower] = on_ll.get(r >> lower, 0) + racks[r]
    required: set[int] = set()
    out: Allocs = []
    rem = units
    while True:
        pick, same = _choose_best_bblock(members, racks, on_ll, required, lower, rem)
        if pick == -1 or (max_ll <= 0 and not same):
            return None
        required.add(pick)
        took = 0
        for n in state.cluster.racks[pick].nodes:  # nodes in index order, as select/cons_tres
            k = min(node_caps.get(n, 0), rem - took)
            if k:
                out.extend(take_units(state, n, req.unit, k))
                took += k
                if took == rem:
                    return out
        if not took:
            return None  # stalled: no base block adds anything
        rem -= took
        if not same:
            max_ll -= 1


def _choose_best_bblock(
    members: range, racks: Sequence[int], on_ll: dict[int, int] | None, required: set[int], lower: int, rem: int
) -> tuple[int, bool]:
    """``_choose_best_bblock`` over the block's unused base blocks: (the one to use next, whether its
    lower-level block is one already in use)."""
    best, best_fit, best_same = -1, False, True
    for i in members:
        if i in required:
            continue
        fit = racks[i] >= rem
        if on_ll is not None and (best >> lower) != (i >> lower):
            same = any(j >> lower == i >> lower for j in required)
            if best == -1 or (same and not best_same):
                best, best_fit, best_same = i, fit, same
                continue
            if not same and best_same:
                continue
            ll, ll_best = on_ll[i >> lower], on_ll[best >> lower]
            ll_fit, best_ll_fit = ll >= rem, ll_best >= rem
            if ll_fit != best_ll_fit:
                if ll_fit:
                    best, best_fit, best_same = i, fit, same
                continue
            if ll != ll_best:  # both fit: the smaller (less fragmentation); neither: the larger
                if (ll < ll_best) == ll_fit:
                    best, best_fit, best_same = i, fit, same
                continue
        if (
            best == -1
            or (fit and not best_fit)
            or (not fit and not best_fit and racks[i] >= racks[best])
            or (fit and racks[i] <= racks[best])
        ):
            best, best_fit = i, fit
    return best, best_same
