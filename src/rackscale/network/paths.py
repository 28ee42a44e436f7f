"""Path choice for flows between racks: every candidate path, lowest latency first, and the best that
has room for a flow.

Candidates (the fabric of :mod:`rackscale.network.links`): one path per spine plane ``s``.

- same region:   ``up(src, s) -> spine s -> down(dst, s)``
- across regions: ``up(src, s) -> spine s -> backbone(src region, dst region, s) -> spine s of the
  destination region -> down(dst, s)``

Latency of a path is the sum of its hops. A hop's unloaded latency is its tier's ``latency_us`` (RDMA
for up/down links, backbone for backbone links; the switches are folded into them), so an idle path in a
region costs ``2 * rdma.latency_us`` and one across regions ``2 * rdma.latency_us +
backbone.latency_us``. Load adds queueing, M/M/1-like: a hop at utilisation ``u`` takes
``latency / (1 - u)``, with ``u`` capped so that the factor never exceeds :data:`QUEUE_CAP` (an
overloaded hop is slow, not infinitely slow, so paths stay comparable).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rackscale.model.topology import GPUCluster
from rackscale.network.links import Link, LinkKind, LinkLoad, link_capacity_gbps

QUEUE_CAP = 10.0  # a loaded hop is at most this many times slower than an idle one
P99_UTILISATION_CAP = 0.99  # the p99 model's busiest link is taken at most this loaded (a finite answer)


def hop_latency_us(base_us: float, utilisation: float) -> float:
    """``base_us / (1 - u)`` with ``u`` clamped to ``[0, 1 - 1/QUEUE_CAP]``."""
    u = min(max(utilisation, 0.0), 1.0 - 1.0 / QUEUE_CAP)
    return base_us / (1.0 - u)


def p99_latency_s(base_s: float, utilisation: float) -> float:
    """A tier's latency plus queueing on its busiest link: M/M/1 waiting grows as u / (1 - u), and its p99 is
    ln(100) times the mean, taking the tier's latency as the service time (``u`` clamped to [0, 0.99])."""
    util = min(max(utilisation, 0.0), P99_UTILISATION_CAP)
    return base_s * (1.0 + math.log(100.0) * util / (1.0 - util))


def tier_p99_latency_s(cluster: GPUCluster, busiest_uplink: float) -> dict[str, float]:
    """The modelled p99 latency of each tier (``nvlink``, ``rdma``, ``backbone``), in seconds: NVLink unloaded
    (its load is not modelled), the fabric tiers queued behind the busiest rack uplink's utilisation (what
    ``rackscale_network_latency_p99_seconds`` exports, under ``rackscale serve`` and the Kubernetes scheduler)."""
    t = cluster.tiers
    return {
        "nvlink": p99_latency_s(t.nvlink.latency_us * 1e-6, 0.0),
        "rdma": p99_latency_s(t.rdma.latency_us * 1e-6, busiest_uplink),
        "backbone": p99_latency_s(t.backbone.latency_us * 1e-6, busiest_uplink),
    }


@dataclass(frozen=True, slots=True)
class Path:
    """One candidate route from ``src_rack`` to ``dst_rack`` through spine plane ``spine``."""

    src_rack: int
    dst_rack: int
    spine: int
    links: tuple[Link, ...]
    latency_us: float  # under the load it was computed with
    spare_gbps: float  # the least room left on any of its links, never negative
    utilisation: float  # its busiest link's load / capacity (math.inf for a link without capacity)


@dataclass(frozen=True, slots=True)
class PathChoice:
    """The answer of :func:`select_best_path`.

    ``path`` is the lowest-latency path with at least ``required_gbps`` spare, or ``None`` when no
    candidate has that much; ``best_spare_gbps`` is then the most any candidate has (0.0 with no
    candidates) and ``roomiest`` that candidate, for a caller that must route the flow anyway.
    """

    path: Path | None
    required_gbps: float
    best_spare_gbps: float
    roomiest: Path | None

    @property
    def fits(self) -> bool:
        return self.path is not None


def get_low_latency_paths(cluster: GPUCluster, *, src_rack: int, dst_rack: int, load: LinkLoad) -> list[Path]:
    """Every path from ``src_rack`` to ``dst_rack`` under ``load``, lowest latency first.

    Ties go to the path with more spare bandwidth, then to the lower spine index, so the order is
    deterministic. Raises ``ValueError`` when both racks are the same (that traffic stays on NVLink and
    never enters the fabric) or the cluster has no spine to route through.
    """
    if src_rack == dst_rack:
        raise ValueError(f"rack {src_rack} talks to itself over NVLink; there is no fabric path to choose")
    if cluster.spines_per_region < 1:
        raise ValueError(f"cluster {cluster.name!r} has no spine switches; racks cannot reach each other")
    src_region = cluster.racks[src_rack].region
    dst_region = cluster.racks[dst_rack].region
    paths = []
    for spine in range(cluster.spines_per_region):
        if src_region == dst_region:
            links: tuple[Link, ...] = (Link.up(src_rack, spine), Link.down(dst_rack, spine))
        else:
            links = (
                Link.up(src_rack, spine),
                Link.backbone(src_region, dst_region, spine),
                Link.down(dst_rack, spine),
            )
        paths.append(_path(cluster, src_rack, dst_rack, spine, links, load))
    paths.sort(key=lambda p: (p.latency_us, -p.spare_gbps, p.spine))
    return paths


def select_best_path(paths: Sequence[Path], bandwidth_req_gbps: float) -> PathChoice:
    """The lowest-latency path with ``spare_gbps >= bandwidth_req_gbps``, or a choice saying none fits.

    ``paths`` need not be sorted. Never raises: a fabric without room is an answer, not an error.
    """
    fitting = [p for p in paths if p.spare_gbps >= bandwidth_req_gbps]
    best = min(fitting, key=lambda p: (p.latency_us, -p.spare_gbps, p.spine), default=None)
    roomiest = min(paths, key=lambda p: (-p.spare_gbps, p.latency_us, p.spine), default=None)
    return PathChoice(
        path=best,
        required_gbps=bandwidth_req_gbps,
        best_spare_gbps=roomiest.spare_gbps if roomiest is not None else 0.0,
        roomiest=roomiest,
    )


def _path(
    cluster: GPUCluster, src_rack: int, dst_rack: int, spine: int, links: tuple[Link, ...], load: LinkLoad
) -> Path:
    latency = 0.0
    spare = math.inf
    busiest = 0.0
    for link in links:
        capacity = link_capacity_gbps(cluster, link)
        used = load.gbps(link)
        u = used / capacity if capacity > 0 else math.inf
        tier = cluster.tiers.backbone if link.kind is LinkKind.BACKBONE else cluster.tiers.rdma
        latency += hop_latency_us(tier.latency_us, u)
        spare = min(spare, max(0.0, capacity - used))
        busiest = max(busiest, u)
    return Path(src_rack, dst_rack, spine, links, latency, spare, busiest)
