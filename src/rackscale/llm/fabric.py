"""The links a group of GPUs talks over, and the cost of the collectives LLM work runs on them.

A collective runs on the tier its group spans: NVLink inside one domain, the NIC between domains, the
backbone between regions. Bandwidths are per GPU and one direction (bytes/s); latencies are per
collective step (seconds). Two sources build :class:`Links`: a catalogue :class:`~rackscale.llm.hardware.System`
(``perf``, ``compare-arch``) and a cluster's link tiers (the simulator), so both price a byte alike.

Collectives (bytes are per GPU unless said otherwise):

- **all-reduce**, ring: every edge carries ``2(n-1)/n * S``; the slowest edge sets the pace (NVLink inside a
  domain; the NIC as soon as the ring leaves it). Latency: inside a domain NVSwitch reduces in the switch
  (NVLS, one-shot kernels), two fixed costs whatever ``n``; between domains a tree, ``2 log2(r)`` NIC hops.
- **all-reduce**, hierarchical: reduce-scatter/all-gather inside each domain over NVLink, and an all-reduce
  of the domain shards between domains in which each of a domain's ``k`` GPUs sends ``1/k`` of the data
  over its own NIC: ``2(r-1)/r * S / k_min`` bytes per NIC. Bigger domains shrink the NIC's share.
- **all-to-all** (expert parallel dispatch/combine): each GPU sends ``V`` bytes spread evenly over the
  other members; the part bound for its own domain goes over NVLink, the rest over the NIC, in parallel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

GBIT_BYTES = 1e9 / 8.0


class AllReduce(StrEnum):
    RING = "ring"
    HIERARCHICAL = "hierarchical"


@dataclass(frozen=True, slots=True, kw_only=True)
class Links:
    """Per-GPU, one-direction bandwidth (bytes/s) and per-step latency (s) of each tier."""

    nvlink_bytes_s: float
    nic_bytes_s: float
    backbone_bytes_s: float
    # Fixed costs, measured (aiconfigurator 0.12.0's GB200 tables, docs/perf.md): a small all-reduce under
    # CUDA graphs takes ~4 us (two of these). An all-to-all of one token per rank (hidden 7168, top-8 of 256):
    # TensorRT-LLM's one-sided kernel on GB200 NVL72 takes 19-20 us to dispatch and 31 us to combine at EP8
    # and EP32 alike (TensorRT-LLM tech blog 18), 25 us on average; DeepEP's low-latency kernels ~17 us
    # (aiconfigurator's GB200 table). The TensorRT-LLM figure, as the published runs used TensorRT-LLM.
    nvlink_latency_s: float = 2e-6
    nvlink_a2a_latency_s: float = 25e-6
    nic_latency_s: float = 25e-6  # the same over RDMA: GPU-initiated puts through a leaf/spine pair
    backbone_latency_s: float = 50e-6

    @classmethod
    def from_gbps(
        cls,
        *,
        nvlink_gbps: float,
        nic_gbps: float,
        backbone_gbps: float,
        nvlink_latency_us: float = 2.0,
        nic_latency_us: float = 25.0,
        backbone_latency_us: float = 50.0,
    ) -> Links:
        return cls(
            nvlink_bytes_s=nvlink_gbps * GBIT_BYTES,
            nic_bytes_s=nic_gbps * GBIT_BYTES,
            backbone_bytes_s=backbone_gbps * GBIT_BYTES,
            nvlink_latency_s=nvlink_latency_us * 1e-6,
            nic_latency_s=nic_latency_us * 1e-6,
            backbone_latency_s=backbone_latency_us * 1e-6,
        )


@dataclass(frozen=True, slots=True)
class Span:
    """How a group of GPUs lies over NVLink domains: GPUs per domain, and how many regions it touches."""

    per_domain: tuple[int, ...]
    regions: int = 1

    @classmethod
    def packed(cls, gpus: int, domain_gpus: int) -> Span:
        """The best layout of ``gpus`` GPUs: as few domains as possible, filled in order."""
        gpus, cap = max(gpus, 1), max(domain_gpus, 1)
        full, rest = divmod(gpus, cap)
        return cls((cap,) * full + ((rest,) if rest else ()))

    @classmethod
    def balanced(cls, gpus: int, domain_gpus: int) -> Span:
        """``gpus`` GPUs over as few domains as :meth:`packed`, spread evenly (sizes differ by at most one):
        what a launcher does with ranks whose collective is limited by the domain holding the fewest of
        them (a hierarchical all-reduce's per-NIC bytes; see :func:`all_reduce_s`). 64 ranks, 9 to a domain:
        8 domains of 8, not 7 of 9 and one of 1."""
        gpus, cap = max(gpus, 1), max(domain_gpus, 1)
        domains = -(-gpus // cap)
        q, r = divmod(gpus, domains)
        return cls((q + 1,) * r + (q,) * (domains - r))

    @property
    def gpus(self) -> int:
        return sum(self.per_domain)

    @property
    def domains(self) -> int:
        return len(self.per_domain)

    def sub(self, size: int) -> Span:
        """The span of a subgroup of ``size`` consecutive ranks (e.g. one TP group of a larger instance).

        Ranks are numbered domain by domain, so a subgroup no larger than a domain (and aligned, as
        launchers place them) stays inside it when the domains are at least that large.
        """
        if size >= self.gpus:
            return self
        smallest = min(self.per_domain)
        if size <= smallest:
            return Span((size,), 1)
        return Span.packed(size, smallest)


def _inter(links: Links, span: Span) -> tuple[float, float]:
    """Bandwidth and latency of the tier between the span's domains."""
    if span.regions > 1:
        return min(links.backbone_bytes_s, links.nic_bytes_s), links.backbone_latency_s
    return links.nic_bytes_s, links.nic_latency_s


def all_reduce_s(
    links: Links, span: Span, size_bytes: float, *, algorithm: AllReduce = AllReduce.RING, slowdown: float = 1.0
) -> float:
    """Seconds for one all-reduce of ``size_bytes`` over ``span``; ``slowdown`` (>= 1) stretches the part
    between domains (contention on shared uplinks)."""
    n = span.gpus
    if n < 2 or size_bytes <= 0:
        return 0.0
    intra_lat = 2 * links.nvlink_latency_s
    if span.domains == 1:
        return 2 * (n - 1) / n * size_bytes / links.nvlink_bytes_s + intra_lat
    inter_bw, inter_lat = _inter(links, span)
    inter_bw /= max(slowdown, 1.0)
    r = span.domains
    cross_lat = 2 * math.ceil(math.log2(r)) * inter_lat
    if algorithm is AllReduce.HIERARCHICAL:
        k_max, k_min = max(span.per_domain), min(span.per_domain)
        intra = 2 * (k_max - 1) / k_max * size_bytes / links.nvlink_bytes_s if k_max > 1 else 0.0
        cross = 2 * (r - 1) / r * size_bytes / k_min / inter_bw
        return intra + intra_lat + cross + cross_lat
    return 2 * (n - 1) / n * size_bytes / inter_bw + intra_lat + cross_lat


def all_to_all_s(links: Links, span: Span, send_bytes: float, *, slowdown: float = 1.0) -> float:
    """Seconds for an all-to-all in which every GPU sends ``send_bytes`` spread evenly over the others.

    The worst-placed GPU sets the time: the one in the smallest domain sends the largest share off-domain.
    """
    n = span.gpus
    if n < 2 or send_bytes <= 0:
        return 0.0
    local = min(span.per_domain) - 1
    off = (n - 1 - local) / (n - 1)
    t_nv = send_bytes * (1 - off) / links.nvlink_bytes_s + links.nvlink_a2a_latency_s
    if off <= 0:
        return t_nv
    inter_bw, inter_lat = _inter(links, span)
    t_off = send_bytes * off / (inter_bw / max(slowdown, 1.0)) + inter_lat
    return max(t_nv, t_off)


def ring_bytes_per_nic(span: Span, size_bytes: float, *, algorithm: AllReduce = AllReduce.RING) -> float:
    """Bytes one GPU's NIC carries in an all-reduce (0 inside one domain): the traffic the monitor sees."""
    n = span.gpus
    if n < 2 or span.domains == 1:
        return 0.0
    if algorithm is AllReduce.HIERARCHICAL:
        r = span.domains
        return 2 * (r - 1) / r * size_bytes / min(span.per_domain)
    return 2 * (n - 1) / n * size_bytes


__all__ = ["AllReduce", "Links", "Span", "all_reduce_s", "all_to_all_s", "ring_bytes_per_nic"]
