"""The bytes a placement moves per step on each tier: NVLink inside a rack, RDMA between racks of a
region, the backbone between regions.

Notation: ``S = spec.comm.bytes_per_step``; ``N`` participants (GPUs) in the collective; ``r`` racks
holding them with ``n_i`` in rack ``i``; ``g`` regions. A whole-GPU slice contributes one participant per
listed GPU; a fractional slice (``milli < 1000``) contributes one; a CPU-only slice none.

Every collective orders its participants rack by rack, racks ordered region by region (then by rack
index), so each rack is one contiguous stretch of the ring and each region one stretch of racks. Then
exactly ``r`` ring edges cross racks when ``r > 1``, and ``g`` of those cross regions when ``g > 1``.

- **ring** all-reduce (training ``collective="ring"``, and every tensor-parallel group of an inference
  replica): each of the ``N`` edges carries ``2(N-1)/N * S``; ``N - r`` edges stay in a rack (NVLink),
  ``r - g`` cross racks inside a region (RDMA), ``g`` cross regions (backbone). With ``r == 1`` all ``N``
  edges are NVLink. In all ``2(N-1) * S`` bytes move.
- **hierarchical** (training ``collective="hierarchical"``): reduce-scatter then all-gather inside each
  rack over NVLink, ``2(n_i - 1) * S`` bytes in rack ``i``; between them a ring all-reduce over the ``r``
  racks, ``2(r-1) * S`` bytes in all, ``2(r-1)/r * S`` on each of the rack ring's ``r`` edges, of which
  the ``g`` region-crossing edges are backbone.
- **inference**: the replica's GPUs, taken in placement order in groups of ``spec.unit.gpus``, each ring
  all-reduce ``S`` among themselves; replicas never talk to each other. Fractional and 1-GPU replicas
  move nothing.
- **batch** jobs and single GPUs move nothing.

Each inter-rack ring edge is a :class:`Flow`; a rack's uplink bytes are its egress plus ingress, so the
uplink bytes of all racks add up to twice the inter-rack (RDMA + backbone) bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.model.workload import JobKind, JobSpec

COLLECTIVES = ("ring", "hierarchical")


class Tier(StrEnum):
    NVLINK = "nvlink"
    RDMA = "rdma"
    BACKBONE = "backbone"


@dataclass(frozen=True, slots=True)
class Flow:
    """One inter-rack ring edge: bytes per step from ``src_rack`` to ``dst_rack``."""

    src_rack: int
    dst_rack: int
    bytes_per_step: float
    tier: Tier  # RDMA inside a region, BACKBONE across regions


@dataclass(frozen=True, slots=True)
class Traffic:
    """The bytes one job moves per step, per tier, and the inter-rack flows that make them up."""

    job: str
    nvlink: float = 0.0
    rdma: float = 0.0
    backbone: float = 0.0
    racks: tuple[int, ...] = ()  # every rack the placement touches, ascending
    regions: tuple[int, ...] = ()  # every region the placement touches, ascending
    flows: tuple[Flow, ...] = ()
    uplink_bytes: tuple[tuple[int, float], ...] = ()  # (rack, egress + ingress bytes per step), by rack

    @property
    def total(self) -> float:
        return self.nvlink + self.rdma + self.backbone

    @property
    def inter_rack(self) -> float:
        return self.rdma + self.backbone

    @property
    def intra_rack_share(self) -> float:
        """NVLink bytes / all bytes; 1.0 when nothing moves (no traffic left the rack)."""
        total = self.total
        return self.nvlink / total if total > 0 else 1.0

    def uplink_bytes_of(self, rack: int) -> float:
        return dict(self.uplink_bytes).get(rack, 0.0)


@dataclass(slots=True)
class _Acc:
    """Mutable sums while one job's traffic is built."""

    nvlink: float = 0.0
    flows: list[Flow] = field(default_factory=list)


# A ring member: (region, rack, participants in that rack). Lists of them are sorted, which is the
# rack-by-rack, region-by-region ring order.
_Member = tuple[int, int, int]


def traffic_for(cluster: GPUCluster, *, spec: JobSpec, placement: Placement) -> Traffic:
    """The bytes per step ``placement`` of ``spec`` moves on each tier (the module docstring's model).

    Raises ``ValueError`` for a negative or non-finite ``bytes_per_step`` or an unknown training collective.
    """
    size = spec.comm.bytes_per_step
    if not (math.isfinite(size) and size >= 0):
        raise ValueError(f"job {spec.name!r}: bytes_per_step must be finite and >= 0, got {size}")
    acc = _Acc()
    if spec.kind is JobKind.TRAINING:
        members = _members(cluster, [(a.node, _participants(a)) for a in placement.allocs])
        if spec.comm.collective == "ring":
            _ring(acc, members, size)
        elif spec.comm.collective == "hierarchical":
            _hierarchical(acc, members, size)
        else:
            raise ValueError(
                f"job {spec.name!r}: unknown collective {spec.comm.collective!r}; "
                f"expected one of {', '.join(COLLECTIVES)}"
            )
    elif spec.kind is JobKind.INFERENCE and not spec.unit.is_fractional and spec.unit.gpus > 1:
        for group in _tp_groups(placement.allocs, spec.unit.gpus):
            _ring(acc, _members(cluster, [(node, 1) for node in group]), size)
    return _finish(cluster, spec.name, placement, acc)


def _participants(alloc: NodeAlloc) -> int:
    if not alloc.gpus:
        return 0
    return len(alloc.gpus) if alloc.milli >= MILLI_PER_GPU else 1


def _members(cluster: GPUCluster, counts: Sequence[tuple[int, int]]) -> list[_Member]:
    """Fold (node, participants) pairs into ring members in ring order, dropping empty racks."""
    per_rack: dict[int, int] = {}
    for node, n in counts:
        if n > 0:
            rack = cluster.nodes[node].rack
            per_rack[rack] = per_rack.get(rack, 0) + n
    return sorted((cluster.racks[rack].region, rack, n) for rack, n in per_rack.items())


def _tp_groups(allocs: Sequence[NodeAlloc], group: int) -> list[list[int]]:
    """The node of each GPU, in placement order, cut into tensor-parallel groups of ``group`` GPUs.

    Placements name no replica per slice, so the order of the slices decides the groups; a trailing
    remainder (a placement that does not hold whole replicas) is treated as one smaller group.
    """
    nodes = [a.node for a in allocs for _ in range(_participants(a))]
    return [nodes[i : i + group] for i in range(0, len(nodes), group)]


def _ring(acc: _Acc, members: list[_Member], size: float) -> None:
    n_total = sum(n for _, _, n in members)
    if n_total < 2:
        return
    edge = 2 * (n_total - 1) / n_total * size
    racks = len(members)
    if racks == 1:
        acc.nvlink += n_total * edge
        return
    acc.nvlink += (n_total - racks) * edge
    _rack_ring(acc, members, edge)


def _hierarchical(acc: _Acc, members: list[_Member], size: float) -> None:
    for _, _, n in members:
        acc.nvlink += 2 * (n - 1) * size
    racks = len(members)
    if racks > 1:
        # 2(r-1)S over the rack ring's r edges; each rack forwards once and receives once.
        _rack_ring(acc, members, 2 * (racks - 1) / racks * size)


def _rack_ring(acc: _Acc, members: list[_Member], edge: float) -> None:
    """One flow per rack, from each rack to the next in ring order (the last back to the first)."""
    for i, (region, rack, _) in enumerate(members):
        next_region, next_rack, _ = members[(i + 1) % len(members)]
        tier = Tier.RDMA if region == next_region else Tier.BACKBONE
        acc.flows.append(Flow(rack, next_rack, edge, tier))


def _finish(cluster: GPUCluster, job: str, placement: Placement, acc: _Acc) -> Traffic:
    rdma = backbone = 0.0
    uplink: dict[int, float] = {}
    for f in acc.flows:
        if f.tier is Tier.RDMA:
            rdma += f.bytes_per_step
        else:
            backbone += f.bytes_per_step
        uplink[f.src_rack] = uplink.get(f.src_rack, 0.0) + f.bytes_per_step
        uplink[f.dst_rack] = uplink.get(f.dst_rack, 0.0) + f.bytes_per_step
    racks = sorted({cluster.nodes[a.node].rack for a in placement.allocs})
    return Traffic(
        job=job,
        nvlink=acc.nvlink,
        rdma=rdma,
        backbone=backbone,
        racks=tuple(racks),
        regions=tuple(sorted({cluster.racks[r].region for r in racks})),
        flows=tuple(acc.flows),
        uplink_bytes=tuple(sorted(uplink.items())),
    )
