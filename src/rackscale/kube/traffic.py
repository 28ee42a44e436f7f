"""The bytes rackscale's running gangs move on each link tier, **modelled** from where their pods run (never
measured on the wire), for serve's ``rackscale_traffic_bytes_total{tier}``, ``rackscale_intra_rack_traffic_ratio``,
``rackscale_uplink_utilization_ratio`` and ``rackscale_network_latency_p99_seconds``.

Each running gang (a pod group of rackscale's, :class:`rackscale.kube.snapshot.RunningGang`) is the job the
scheduler placed: a training gang of its pods' GPUs (:func:`rackscale.kube.pods.gang_spec`). The model is
serve's, run over the snapshot's placements: the bytes a placement's collective moves per step on each tier
(:func:`rackscale.network.traffic.traffic_for`), its inter-rack flows routed over the spines by the
:class:`~rackscale.network.monitor.NetworkMonitor`, and the steps per second the performance model gives on that
placement, slowed by contention on the rack uplinks it crosses (:class:`rackscale.host.progress.Progress`, the
host's own). Pods carry no communication profile, so each gang gets the one rackscale gives a trace's jobs that
carry none (:func:`rackscale.workloads.philly.philly_comm`: ``8e8 x sqrt(GPUs)`` bytes all-reduced per step,
0.5 s of compute per step, a ring). A gang of one GPU, and a lone pod (a batch job to the scheduler), move
nothing.

A snapshot's rates hold until the next snapshot; a scrape adds the time since at them, as
:class:`rackscale.kube.observed.GpuUse` does with GPU-seconds (and carries this, so both restart together at
each term as leader).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rackscale.host.kpis import KpiAccumulator
from rackscale.host.progress import Progress
from rackscale.host.runs import JobRun, RunStatus
from rackscale.kube.pods import live_member
from rackscale.kube.snapshot import RunningGang
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import training
from rackscale.workloads.philly import philly_comm


def running_gang(pod: Mapping[str, Any], *, scheduler: str) -> str | None:
    """The running gang of rackscale's whose member ``pod`` is (named as :func:`rackscale.kube.pods.gangs`
    names it), or None: another scheduler's pod, a lone pod (a batch job: it moves nothing), or one being
    deleted (its gang is stopping)."""
    member = live_member(pod, scheduler=scheduler)
    if member is None or member[1] is None:
        return None
    return f"group:{member[0]}/{member[1]}"


@dataclass(frozen=True, slots=True)
class TierBytes:
    """Bytes (or bytes per second) per link tier."""

    nvlink: float = 0.0
    rdma: float = 0.0
    backbone: float = 0.0

    @property
    def total(self) -> float:
        return self.nvlink + self.rdma + self.backbone

    def plus(self, per_s: TierBytes, seconds: float) -> TierBytes:
        """These bytes and ``seconds`` more at ``per_s`` (never backwards)."""
        dt = max(seconds, 0.0)
        if not dt or not per_s.total:
            return self
        return TierBytes(
            self.nvlink + per_s.nvlink * dt, self.rdma + per_s.rdma * dt, self.backbone + per_s.backbone * dt
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkUse:
    """The network as the snapshot at ``at`` (the scheduler's clock) shows it: the gangs' bytes per second per
    tier, the utilisation of the rack uplinks that carry a flow (by rack index), and the bytes counted up to
    ``at``."""

    at: float = 0.0
    per_s: TierBytes = TierBytes()
    uplinks: Mapping[int, float] = field(default_factory=dict)
    counted: TierBytes = TierBytes()
    # What the rates were computed from: the next snapshot reuses them when both are the same.
    gangs: tuple[RunningGang, ...] = field(default=(), repr=False)
    cluster: GPUCluster | None = field(default=None, repr=False, compare=False)

    @property
    def busiest_uplink(self) -> float:
        return max(self.uplinks.values(), default=0.0)

    def moved(self, now: float) -> TierBytes:
        """The bytes at ``now``: those up to ``at``, plus the time since at this snapshot's rates."""
        return self.counted.plus(self.per_s, now - self.at)


def network_use(
    cluster: GPUCluster, gangs: Sequence[RunningGang], *, at: float, before: NetworkUse | None
) -> NetworkUse:
    """The network ``gangs`` load at ``at``, carrying ``before``'s bytes on to it (None: the first)."""
    gangs = tuple(gangs)
    counted = TierBytes() if before is None else before.moved(at)
    if before is not None and before.cluster is cluster and before.gangs == gangs:
        return replace(before, at=at, counted=counted)  # the same placements move the same bytes
    per_s, uplinks = _model(cluster, gangs)
    return NetworkUse(at=at, per_s=per_s, uplinks=uplinks, counted=counted, gangs=gangs, cluster=cluster)


def _model(cluster: GPUCluster, gangs: Sequence[RunningGang]) -> tuple[TierBytes, dict[int, float]]:
    runs: dict[str, JobRun] = {}
    progress = Progress(cluster, runs=runs, kpi=KpiAccumulator())
    for g in gangs:
        gpus = sum(k for _, k in g.gpus)
        if gpus < 2:
            continue  # no collective
        spec = training(g.job, gpus, comm=philly_comm(gpus))
        placement = Placement(g.job, tuple(NodeAlloc(n, tuple(range(k))) for n, k in g.gpus), gpus)
        r = runs[g.job] = JobRun(spec=spec, work=math.inf, status=RunStatus.RUNNING)
        progress.place(r, placement)
        progress.attach(r, placement)  # its flows on the uplinks, at its uncontended rate (as serve's host)
    nvlink = rdma = backbone = 0.0
    for r in runs.values():
        progress.set_rate(r, 0.0)  # slowed by the contention on the uplinks it crosses, every gang on
        t = r.traffic
        if t is not None:
            nvlink += t.nvlink * r.rate
            rdma += t.rdma * r.rate
            backbone += t.backbone * r.rate
    loaded = progress.monitor.hottest_uplinks(len(cluster.racks))
    return TierBytes(nvlink, rdma, backbone), {u.rack: u.utilisation for u in loaded}


__all__ = ["NetworkUse", "TierBytes", "network_use", "running_gang"]
