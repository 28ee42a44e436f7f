"""The cost of a collective on a placement: the communication part of the performance model.

Pure and shared: the simulator times steps with it, and the scheduler weighs whether splitting a gang over
racks costs more than waiting for one rack. The model and its assumptions are in ``docs/simulator.md``.

- ring all-reduce of ``S`` bytes over ``N`` GPUs: every edge carries ``2(N-1)/N * S``; the slowest edge
  (NVLink inside one rack; the RDMA NIC, or the backbone, once the ring leaves it) sets the time, plus
  ``2(N-1)`` hops of its latency;
- hierarchical: NVLink inside racks, and ``2(r-1)/r * S / n_min`` bytes per NIC between racks;
- ``slowdown`` (>= 1) stretches the inter-rack part for contention on shared uplinks.
"""

from __future__ import annotations

from dataclasses import dataclass

from rackscale.model.placement import Placement
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.model.workload import JobKind, JobSpec

BITS_PER_BYTE = 8.0
GBIT = 1e9


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a job's GPUs are: participants per rack, with the rack's region (ring order)."""

    members: tuple[tuple[int, int, int], ...]  # (region, rack, participants)

    @property
    def gpus(self) -> int:
        return sum(n for _, _, n in self.members)

    @property
    def racks(self) -> int:
        return len(self.members)

    @property
    def regions(self) -> int:
        return len({g for g, _, _ in self.members})

    @classmethod
    def of(cls, cluster: GPUCluster, placement: Placement) -> Layout:
        per_rack: dict[int, int] = {}
        for a in placement.allocs:
            n = len(a.gpus) if a.milli >= MILLI_PER_GPU else (1 if a.gpus else 0)
            if n:
                r = cluster.nodes[a.node].rack
                per_rack[r] = per_rack.get(r, 0) + n
        return cls(tuple(sorted((cluster.racks[r].region, r, n) for r, n in per_rack.items())))

    @classmethod
    def packed(cls, cluster: GPUCluster, gpus: int) -> Layout:
        """The best placement of ``gpus`` GPUs: full racks of the largest size, in one region."""
        cap = max(cluster.max_rack_gpus, 1)
        members = []
        rest, r = gpus, 0
        while rest > 0:
            members.append((0, r, min(cap, rest)))
            rest -= cap
            r += 1
        return cls(tuple(members))


@dataclass(frozen=True, slots=True)
class StepTime:
    compute_s: float
    comm_s: float

    @property
    def total_s(self) -> float:
        return self.compute_s + self.comm_s


def _bytes_per_s(gbps: float) -> float:
    return gbps * GBIT / BITS_PER_BYTE


def collective_time(
    cluster: GPUCluster,
    layout: Layout,
    *,
    size_bytes: float,
    collective: str = "ring",
    slowdown: float = 1.0,
) -> float:
    """Seconds for one all-reduce of ``size_bytes`` over ``layout``; ``slowdown`` (>= 1) stretches the
    inter-rack part for contention."""
    n = layout.gpus
    if n < 2 or size_bytes <= 0:
        return 0.0
    tiers = cluster.tiers
    nvlink_bw = _bytes_per_s(tiers.nvlink.bandwidth_gbps)
    if layout.racks == 1:
        return 2 * (n - 1) / n * size_bytes / nvlink_bw + 2 * (n - 1) * tiers.nvlink.latency_us * 1e-6
    inter = tiers.backbone if layout.regions > 1 else tiers.rdma
    inter_bw = _bytes_per_s(min(inter.bandwidth_gbps, tiers.rdma.bandwidth_gbps)) / max(slowdown, 1.0)
    lat = inter.latency_us * 1e-6
    if collective == "hierarchical":
        n_max = max(k for _, _, k in layout.members)
        n_min = min(k for _, _, k in layout.members)
        r = layout.racks
        intra = 2 * (n_max - 1) / n_max * size_bytes / nvlink_bw if n_max > 1 else 0.0
        cross = 2 * (r - 1) / r * size_bytes / n_min / inter_bw + 2 * (r - 1) * lat
        return intra + cross
    return 2 * (n - 1) / n * size_bytes / inter_bw + 2 * (n - 1) * lat


def training_step(
    cluster: GPUCluster, spec: JobSpec, layout: Layout, *, slowdown: float = 1.0, speed: float = 1.0
) -> StepTime:
    """``speed``: the GPUs' compute speed relative to the job's estimate (the cluster's ``gpu_speed``).

    An elastic gang keeps its global batch whatever its size (as TorchElastic / ElasticFlow jobs do, so the
    model converges the same): on ``g`` GPUs instead of the ``G`` it asked for, each GPU computes ``G/g`` of
    the asked per-GPU share, while the gradients all-reduced stay the model's size."""
    comm = collective_time(
        cluster, layout, size_bytes=spec.comm.bytes_per_step, collective=spec.comm.collective, slowdown=slowdown
    )
    compute = spec.comm.compute_s_per_step / max(speed, 1e-9)
    if spec.is_elastic and layout.gpus:
        compute *= spec.total_gpus / layout.gpus
    return StepTime(compute, comm)


def ideal_step(cluster: GPUCluster, spec: JobSpec) -> StepTime:
    """The work reference: the step time with every GPU of the job on NVLink (one domain, uncontended).

    The same for every cluster (only the tiers' speeds enter), so one workload carries the same work on
    two architectures; a job larger than a domain, or split over domains, runs slower than its estimate.
    """
    gpus = max(spec.total_gpus, 1) if spec.kind is not JobKind.INFERENCE else max(spec.unit.gpus, 1)
    return training_step(cluster, spec, Layout(((0, 0, gpus),)))
