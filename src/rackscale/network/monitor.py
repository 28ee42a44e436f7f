"""The NetworkMonitor: the traffic of every running job, and the load it puts on the fabric.

Each job's :class:`~rackscale.network.traffic.Traffic` is computed once when it is added. Its
inter-rack flows (one per inter-rack ring edge) are routed one by one: the flow's rate is
``bytes_per_step * steps_per_s * 8 / 1e9`` Gb/s, :func:`select_best_path` picks the lowest-latency spine
plane with room for it under the load so far, and the flow's rate is added to every link of that path.
Since load raises a path's latency, successive flows spread over the spines. When no path has room the
flow still runs (a placed job does not stop sending) and takes the roomiest path; its route says so.

Routes are fixed when a job is added and undone exactly when it is removed; flows are not rebalanced
when other jobs leave. Every add and remove costs O(flows of the job x spines per region), which is
O(racks of the job) for training; nothing scans the cluster or the other jobs.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from rackscale.model.placement import Placement
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobSpec
from rackscale.network.exact import exact, to_float
from rackscale.network.links import Link, LinkLoad, rack_uplink_capacity_gbps
from rackscale.network.paths import Path, get_low_latency_paths, select_best_path
from rackscale.network.traffic import Flow, Traffic, traffic_for

BITS_PER_BYTE = 8
GIGA = 1e9


@dataclass(frozen=True, slots=True)
class Route:
    """Where one flow of a job runs, at what rate; ``fits`` is False when it overloads its path."""

    flow: Flow
    gbps: float
    path: Path
    fits: bool


@dataclass(frozen=True, slots=True)
class UplinkLoad:
    """A rack's RDMA links to the spines. Capacity is per direction (links are full duplex)."""

    rack: int
    egress_gbps: float
    ingress_gbps: float
    capacity_gbps: float

    @property
    def load_gbps(self) -> float:
        """Egress plus ingress."""
        return self.egress_gbps + self.ingress_gbps

    @property
    def utilisation(self) -> float:
        """The busier direction's load / the capacity of one direction."""
        busier = max(self.egress_gbps, self.ingress_gbps)
        if self.capacity_gbps > 0:
            return busier / self.capacity_gbps
        return math.inf if busier > 0 else 0.0


@dataclass(frozen=True, slots=True)
class TrafficTotals:
    """Sums over the running jobs: bytes per step per tier, and bytes per second per tier.

    Bytes per step of jobs stepping at different rates do not add up to a rate; the intra-rack share
    is therefore weighted by bytes per second (the DESIGN's KPI: NVLink bytes / all bytes moved).
    """

    jobs: int = 0
    nvlink: float = 0.0
    rdma: float = 0.0
    backbone: float = 0.0
    nvlink_bytes_per_s: float = 0.0
    rdma_bytes_per_s: float = 0.0
    backbone_bytes_per_s: float = 0.0

    @property
    def total(self) -> float:
        return self.nvlink + self.rdma + self.backbone

    @property
    def total_bytes_per_s(self) -> float:
        return self.nvlink_bytes_per_s + self.rdma_bytes_per_s + self.backbone_bytes_per_s

    @property
    def intra_rack_share(self) -> float:
        """NVLink bytes/s / all bytes/s; 1.0 when nothing moves."""
        total = self.total_bytes_per_s
        return self.nvlink_bytes_per_s / total if total > 0 else 1.0


@dataclass(frozen=True, slots=True)
class _Running:
    traffic: Traffic
    steps_per_s: float
    routes: tuple[Route, ...]


class NetworkMonitor:
    """Per-job traffic of the running jobs and the aggregate load on the fabric links."""

    def __init__(self, cluster: GPUCluster) -> None:
        self._cluster = cluster
        self._load = LinkLoad()
        self._jobs: dict[str, _Running] = {}
        # nvlink, rdma, backbone bytes per step, then the same per second; exact (see LinkLoad), so
        # that removing a job restores the totals from before it was added, whatever came between.
        self._sums = [0] * 6
        self._rack_flows: dict[int, int] = {}  # routed flow ends per rack: the racks with uplink load

    @property
    def cluster(self) -> GPUCluster:
        return self._cluster

    @property
    def load(self) -> LinkLoad:
        """The live link load (read it; change it only through :meth:`add_job` / :meth:`remove_job`)."""
        return self._load

    @property
    def jobs(self) -> tuple[str, ...]:
        return tuple(self._jobs)

    def __contains__(self, name: object) -> bool:
        return name in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    # ------------------------------------------------------------------ jobs
    def add_job(self, spec: JobSpec, placement: Placement, *, steps_per_s: float) -> Traffic:
        """Start tracking a running job and route its inter-rack flows; returns its traffic.

        ``ValueError`` (and nothing changed) for a duplicate name, a negative or non-finite step rate,
        byte rates that overflow a float, a malformed comm profile (see :func:`traffic_for`), or
        inter-rack flows on a cluster without spines.
        """
        if spec.name in self._jobs:
            raise ValueError(f"job {spec.name!r} is already monitored; remove it before adding it again")
        if not (math.isfinite(steps_per_s) and steps_per_s >= 0):
            raise ValueError(f"job {spec.name!r}: steps_per_s must be finite and >= 0, got {steps_per_s}")
        traffic = traffic_for(self._cluster, spec=spec, placement=placement)
        rates = [(flow, flow.bytes_per_step * steps_per_s * BITS_PER_BYTE / GIGA) for flow in traffic.flows]
        # Check everything before touching the load, so that a refused job leaves no trace. (Written out, not
        # ``all`` over a generator: this runs at every job start, and most jobs have no inter-rack flow.)
        finite = math.isfinite
        if not (
            finite(traffic.nvlink * steps_per_s)
            and finite(traffic.rdma * steps_per_s)
            and finite(traffic.backbone * steps_per_s)
            and (not rates or all(finite(gbps) for _, gbps in rates))
        ):
            raise ValueError(f"job {spec.name!r}: its byte rates overflow; check bytes_per_step and steps_per_s")
        routes = tuple(self._route(flow, gbps) for flow, gbps in rates if gbps > 0)
        self._jobs[spec.name] = _Running(traffic, steps_per_s, routes)
        self._add_sums(traffic, steps_per_s, sign=1)
        return traffic

    def remove_job(self, name: str) -> Traffic:
        """Stop tracking a job and take its load off the links; ``KeyError`` if it is not monitored."""
        running = self._jobs.pop(name)
        for route in running.routes:
            for link in route.path.links:
                self._load.remove_flow(link, route.gbps)
            for rack in (route.flow.src_rack, route.flow.dst_rack):
                left = self._rack_flows[rack] - 1
                if left:
                    self._rack_flows[rack] = left
                else:
                    del self._rack_flows[rack]
        self._add_sums(running.traffic, running.steps_per_s, sign=-1)
        return running.traffic

    def traffic(self, name: str) -> Traffic:
        """A monitored job's traffic; ``KeyError`` if it is not monitored."""
        return self._jobs[name].traffic

    def routes(self, name: str) -> tuple[Route, ...]:
        """Where a monitored job's inter-rack flows run; ``KeyError`` if it is not monitored."""
        return self._jobs[name].routes

    def totals(self) -> TrafficTotals:
        nvlink, rdma, backbone, nvlink_s, rdma_s, backbone_s = (to_float(v) for v in self._sums)
        return TrafficTotals(len(self._jobs), nvlink, rdma, backbone, nvlink_s, rdma_s, backbone_s)

    # ------------------------------------------------------------------ uplinks
    def uplink(self, rack: int) -> UplinkLoad:
        spines = range(self._cluster.spines_per_region)
        return UplinkLoad(
            rack=rack,
            egress_gbps=sum(self._load.gbps(Link.up(rack, s)) for s in spines),
            ingress_gbps=sum(self._load.gbps(Link.down(rack, s)) for s in spines),
            capacity_gbps=rack_uplink_capacity_gbps(self._cluster, rack),
        )

    def rack_uplink_load_gbps(self, rack: int) -> float:
        """Egress plus ingress on the rack's links to the spines, in Gb/s."""
        return self.uplink(rack).load_gbps

    def uplink_utilisation(self, rack: int) -> float:
        """The busier direction's load over the capacity of one direction (see :class:`UplinkLoad`)."""
        return self.uplink(rack).utilisation

    def hottest_uplinks(self, k: int) -> tuple[UplinkLoad, ...]:
        """The ``k`` most utilised rack uplinks, hottest first (ties: lower rack first).

        Only racks that carry a flow are looked at, so the cost follows the loaded racks, not the cluster.
        """
        if k <= 0:
            return ()
        loads = (self.uplink(rack) for rack in self._rack_flows)
        return tuple(heapq.nsmallest(k, loads, key=lambda u: (-u.utilisation, u.rack)))

    # ------------------------------------------------------------------ internals
    def _route(self, flow: Flow, gbps: float) -> Route:
        paths = get_low_latency_paths(self._cluster, src_rack=flow.src_rack, dst_rack=flow.dst_rack, load=self._load)
        choice = select_best_path(paths, gbps)
        path = choice.path if choice.path is not None else choice.roomiest
        # get_low_latency_paths returns at least one path (it raises for a cluster without spines).
        assert path is not None
        for link in path.links:
            self._load.add_flow(link, gbps)
        for rack in (flow.src_rack, flow.dst_rack):
            self._rack_flows[rack] = self._rack_flows.get(rack, 0) + 1
        return Route(flow, gbps, path, choice.fits)

    def _add_sums(self, traffic: Traffic, steps_per_s: float, *, sign: int) -> None:
        if traffic.total == 0:
            return  # a job that moves no bytes (one GPU, batch) changes no sum: skip the exact arithmetic
        for i, v in enumerate((traffic.nvlink, traffic.rdma, traffic.backbone)):
            # The per-second product is rounded once, as a float, so the add and the remove agree.
            self._sums[i] += sign * exact(v)
            self._sums[i + 3] += sign * exact(v * steps_per_s)
