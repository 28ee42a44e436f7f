"""What the Kubernetes scheduler keeps for its metrics, in plain Python: this package may not import
``prometheus_client`` (an import-linter contract keeps adapters free of the exporter), so the collector that
turns these into Prometheus series lives with the command (``rackscale.cli.kube_metrics``).

- :class:`AttemptResult`: a gang's result in a cycle (``rackscale_schedule_attempts_total{result}``);
- :class:`CycleTimes`: a histogram's state of the cycles' wall time;
- :class:`Waiting`: the pending gangs per namespace as the last cycle saw them, replaced whole by the loop
  thread and read by a scrape, so a scrape never sees a cycle half-counted;
- :class:`GpuUse`: the cluster's GPUs (by state, per rack) as the last snapshot showed them, and the GPU-seconds
  counted up to it (the idle rate's terms), also replaced whole; a scrape adds the time since at those rates.
  It carries the network the snapshot's running gangs load (:class:`rackscale.kube.traffic.NetworkUse`: the
  modelled bytes per tier, counted the same way).
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum

from rackscale.kube.pods import Gang
from rackscale.kube.snapshot import RunningGang
from rackscale.kube.traffic import NetworkUse, network_use
from rackscale.model.state import ClusterState
from rackscale.model.topology import MILLI_PER_GPU
from rackscale.scheduler.cycles import CYCLE_SECONDS_BUCKETS

# The service's buckets, +Inf last (a Prometheus histogram's): one histogram_quantile reads both.
CYCLE_BUCKETS: tuple[float, ...] = (*CYCLE_SECONDS_BUCKETS, math.inf)


class AttemptResult(StrEnum):
    """A gang's result in one cycle, as kube-scheduler's ``scheduler_schedule_attempts_total{result}``."""

    SCHEDULED = "scheduled"  # placed and bound, whole
    UNSCHEDULABLE = "unschedulable"  # no room, or not a job yet (too few members, a bad annotation)
    ERROR = "error"  # placed but not bound: a bind failed (rolled back), or the cycle was refused


def per_result() -> dict[AttemptResult, int]:
    # Every result from the start: a series that appears only on its first increment loses that increment
    # to rate() and increase().
    return dict.fromkeys(AttemptResult, 0)


@dataclass(slots=True)
class CycleTimes:
    """Counts per bucket (not cumulative), their sum: a histogram's state, bounded whatever the cycles.

    Not frozen: the loop thread observes, a scrape reads; the lock keeps a scrape from seeing a count
    without its sum.
    """

    counts: list[int] = field(default_factory=lambda: [0] * len(CYCLE_BUCKETS))
    total: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def observe(self, seconds: float) -> None:
        with self._lock:
            self.counts[bisect.bisect_left(CYCLE_BUCKETS, seconds)] += 1
            self.total += seconds

    def cumulative(self) -> tuple[list[tuple[float, int]], float]:
        """((upper bound, cycles at or under it) per bucket, the sum), as a Prometheus histogram's."""
        with self._lock:
            counts, total = list(self.counts), self.total
        out, seen = [], 0
        for le, n in zip(CYCLE_BUCKETS, counts, strict=True):
            seen += n
            out.append((le, seen))
        return out, total


@dataclass(frozen=True, slots=True, kw_only=True)
class Queued:
    jobs: int  # pending gangs (a lone pod is a gang of one)
    pods: int  # their pending pods
    oldest: float | None  # the oldest pending pod's creationTimestamp (Unix seconds); None: none readable


@dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """The pending gangs of the last cycle per namespace (rackscale's queue under Kubernetes)."""

    queues: Mapping[str, Queued] = field(default_factory=dict)


def waiting(pending: Iterable[Gang]) -> Waiting:
    per: dict[str, list[Gang]] = {}
    for g in pending:
        per.setdefault(g.namespace, []).append(g)
    queues = {}
    for ns, gs in sorted(per.items()):
        created = [t for g in gs for p in g.pending if (t := _created(p)) is not None]
        queues[ns] = Queued(
            jobs=len(gs), pods=sum(len(g.pending) for g in gs), oldest=min(created) if created else None
        )
    return Waiting(queues=queues)


def _created(pod: Mapping[str, object]) -> float | None:
    # The API server's clock, not this process's: the age survives a restart or a new leader, which a time
    # of first sight would not (the RackscaleJobPendingTooLong alert would start over on each failover).
    md = pod.get("metadata")
    raw = md.get("creationTimestamp") if isinstance(md, Mapping) else None
    if not isinstance(raw, str):
        return None
    try:
        return datetime.fromisoformat(raw).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class RackUse:
    rack: str
    region: str
    gpus: int
    allocated: float  # a shared GPU counts its share


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSeconds:
    """GPU-seconds since the scheduler started leading (serve's idle-rate terms, on the scheduler's clock)."""

    available: float = 0.0  # healthy GPUs x time
    available_waiting: float = 0.0  # ... while a gang waited: the idle rate's denominator
    idle_waiting: float = 0.0  # free GPUs x time while a gang waited: its numerator

    def after(self, use: GpuUse, seconds: float) -> GpuSeconds:
        """These counts ``seconds`` later, the GPUs being as ``use`` says all along."""
        dt = max(seconds, 0.0)
        healthy = use.allocated + use.free
        if not use.waiting:
            return replace(self, available=self.available + healthy * dt)
        return GpuSeconds(
            available=self.available + healthy * dt,
            available_waiting=self.available_waiting + healthy * dt,
            idle_waiting=self.idle_waiting + use.free * dt,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuUse:
    """The GPUs as a snapshot of the caches showed them at ``at`` (the scheduler's clock), and the counts then,
    by state as ``rackscale serve`` counts them: ``allocated`` what pods hold, ``failed`` the GPUs of nodes not
    Ready or tainted and those not allocatable, ``cordoned`` the free GPUs of cordoned nodes
    (``spec.unschedulable``), ``free`` the rest."""

    at: float
    allocated: float
    free: float
    cordoned: float
    failed: float
    waiting: bool  # a gang of rackscale's waited
    racks: tuple[RackUse, ...]
    counted: GpuSeconds = field(default_factory=GpuSeconds)  # up to ``at``
    network: NetworkUse = field(default_factory=NetworkUse)  # what rackscale's running gangs move (modelled)

    def seconds(self, now: float) -> GpuSeconds:
        """The GPU-seconds at ``now``: those up to ``at``, plus the time since at this use's rates."""
        return self.counted.after(self, now - self.at)


def gpu_use(
    state: ClusterState,
    *,
    at: float,
    waiting: bool,
    before: GpuUse | None,
    gangs: Sequence[RunningGang] = (),
) -> GpuUse:
    """The use ``state`` shows at ``at``, with the network rackscale's running ``gangs`` load, carrying
    ``before``'s counts on to it (None: the first)."""
    c = state.cluster
    gpu_free = state.gpu_free
    racks = tuple(
        RackUse(
            rack=r.name,
            region=c.regions[r.region].name,
            gpus=r.gpus,
            allocated=r.gpus - sum(sum(gpu_free[n]) for n in r.nodes) / MILLI_PER_GPU,
        )
        for r in c.racks
    )
    allocated = state.used_milli / MILLI_PER_GPU
    failed = float(state.failed_gpus_count)
    cordoned = float(state.cordoned_idle_count)
    free = max(c.total_gpus - failed - allocated - cordoned, 0.0)
    counted = GpuSeconds() if before is None else before.seconds(at)
    return GpuUse(
        at=at,
        allocated=allocated,
        free=free,
        cordoned=cordoned,
        failed=failed,
        waiting=waiting,
        racks=racks,
        counted=counted,
        network=network_use(c, gangs, at=at, before=None if before is None else before.network),
    )


__all__ = [
    "CYCLE_BUCKETS",
    "AttemptResult",
    "CycleTimes",
    "GpuSeconds",
    "GpuUse",
    "Queued",
    "RackUse",
    "Waiting",
    "gpu_use",
    "per_result",
    "waiting",
]
