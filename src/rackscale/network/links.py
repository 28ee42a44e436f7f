"""The fabric links between racks, their capacities, and the load they carry.

The model of the fabric (see ``docs/network.md``):

- Each region has ``cluster.spines_per_region`` spine switches (spine *planes*). Every rack connects to
  every spine of its region; its ``rack.uplinks`` RDMA links are spread evenly over the spines.
- Links are full duplex: a rack's *uplink* towards spine ``s`` (its egress) and its *downlink* from
  spine ``s`` (its ingress) are separate links, each of
  ``rack.uplinks * rdma.bandwidth_gbps / spines_per_region`` Gb/s.
- Between two regions, spine ``s`` of one region links to spine ``s`` of the other by one backbone link
  per direction of ``backbone.bandwidth_gbps``, so a region pair has
  ``backbone.bandwidth_gbps * spines_per_region`` Gb/s each way in all.

Loads are in Gb/s.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from rackscale.model.topology import GPUCluster
from rackscale.network.exact import exact, to_float


class LinkKind(StrEnum):
    UP = "up"  # rack -> spine (the rack's egress)
    DOWN = "down"  # spine -> rack (the rack's ingress)
    BACKBONE = "backbone"  # spine s of one region -> spine s of another


@dataclass(frozen=True, slots=True, order=True)
class Link:
    """One directed fabric link. Build with :meth:`up`, :meth:`down` or :meth:`backbone`.

    ``rack`` is set for up/down links, ``src_region``/``dst_region`` for backbone links; unused fields
    are -1 so that every link is a small hashable value.
    """

    kind: LinkKind
    spine: int
    rack: int = -1
    src_region: int = -1
    dst_region: int = -1

    @classmethod
    def up(cls, rack: int, spine: int) -> Link:
        return cls(LinkKind.UP, spine, rack=rack)

    @classmethod
    def down(cls, rack: int, spine: int) -> Link:
        return cls(LinkKind.DOWN, spine, rack=rack)

    @classmethod
    def backbone(cls, src_region: int, dst_region: int, spine: int) -> Link:
        return cls(LinkKind.BACKBONE, spine, src_region=src_region, dst_region=dst_region)


def rack_uplink_capacity_gbps(cluster: GPUCluster, rack: int) -> float:
    """All of a rack's RDMA links, in one direction: ``rack.uplinks * rdma.bandwidth_gbps``."""
    return cluster.racks[rack].uplinks * cluster.tiers.rdma.bandwidth_gbps


def link_capacity_gbps(cluster: GPUCluster, link: Link) -> float:
    """Capacity of one directed link, in Gb/s (the fabric model of the module docstring)."""
    if link.kind is LinkKind.BACKBONE:
        return cluster.tiers.backbone.bandwidth_gbps
    # max(1, ...) only guards a malformed cluster; the paths module refuses spines_per_region < 1.
    return rack_uplink_capacity_gbps(cluster, link.rack) / max(1, cluster.spines_per_region)


class LinkLoad:
    """Current load in Gb/s per directed link. Links that carry no flow are absent (load 0.0).

    This is the view :func:`rackscale.network.paths.get_low_latency_paths` reads;
    :class:`rackscale.network.monitor.NetworkMonitor` keeps one up to date. It can also be filled by
    hand (tests, what-if questions) with :meth:`add_flow`.

    Sums are kept exactly (as integers of 2**-1074: :mod:`rackscale.network.exact`) so that a load depends
    only on the set of flows, not on the order they came and went in: removing a flow restores the
    previous load bit for bit, and removing the last one leaves no residue like 1e-13.
    """

    __slots__ = ("_exact", "_flows", "_gbps")

    def __init__(self) -> None:
        self._exact: dict[Link, int] = {}  # the load, exactly (``exact``)
        self._gbps: dict[Link, float] = {}  # float(self._exact[link]), cached for the path search
        self._flows: dict[Link, int] = {}

    def gbps(self, link: Link) -> float:
        return self._gbps.get(link, 0.0)

    def flows(self, link: Link) -> int:
        """How many flows the link carries."""
        return self._flows.get(link, 0)

    def add_flow(self, link: Link, gbps: float) -> None:
        if not (math.isfinite(gbps) and gbps >= 0):
            raise ValueError(f"a flow carries a finite, non-negative rate, got {gbps} Gb/s on {link}")
        self._set(link, self._exact.get(link, 0) + exact(gbps))
        self._flows[link] = self._flows.get(link, 0) + 1

    def remove_flow(self, link: Link, gbps: float) -> None:
        """Undo one :meth:`add_flow` of ``gbps``. Raises ``KeyError`` if the link carries no flow."""
        count = self._flows[link] - 1
        if count == 0:
            del self._flows[link], self._exact[link], self._gbps[link]
            return
        self._flows[link] = count
        # max(): a caller removing more than it added must not leave a negative load behind.
        self._set(link, max(0, self._exact[link] - exact(gbps)))

    def items(self) -> Iterator[tuple[Link, float]]:
        """The loaded links and their Gb/s, in no particular order."""
        return iter(self._gbps.items())

    def __len__(self) -> int:
        return len(self._gbps)

    def _set(self, link: Link, load: int) -> None:
        self._exact[link] = load
        self._gbps[link] = to_float(load)
