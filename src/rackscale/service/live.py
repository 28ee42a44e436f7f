"""The live cluster: the host (:mod:`rackscale.host`) as the service runs it, under the wall clock.

No I/O here. The service's runner feeds it submissions, cancellations and the exits its backend saw, runs a
cycle, persists the :class:`Change` values it returns, and only then acts on them (start, stop). It is the
simulator's host with the service's options: waiting jobs say why, ended jobs are forgotten (the store
keeps them), a job may be preempted any number of times, and a service without an estimate serves until
cancelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rackscale.host.changes import Change, ChangeKind
from rackscale.host.host import ClusterHost, HostOptions
from rackscale.model.topology import GPUCluster
from rackscale.scheduler.decisions import PreemptionCause
from rackscale.scheduler.framework import Profile

# The change kinds under the names the store and the runner have long used.
SCHEDULED, PREEMPTED, RESIZED, COMPLETED, FAILED, CANCELLED, WAITING, NOTICE = (
    ChangeKind.SCHEDULED,
    ChangeKind.PREEMPTED,
    ChangeKind.RESIZED,
    ChangeKind.COMPLETED,
    ChangeKind.FAILED,
    ChangeKind.CANCELLED,
    ChangeKind.WAITING,
    ChangeKind.NOTICE,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveCounters:
    """What the runner did, for the API and Prometheus: a snapshot of the host's counts (which are the
    simulator's KpiAccumulator, so the KPIs have one definition everywhere)."""

    cycles: int
    preemption_victims: int
    preemption_victims_by_cause: Mapping[PreemptionCause, int]  # every cause, 0 where none
    resizes: int
    completed: int
    failed: int
    cancelled: int
    attempts: Mapping[str, int]


class LiveCluster(ClusterHost):
    """Jobs queued or running, the cluster state, and the network they load (the service's host)."""

    def __init__(self, cluster: GPUCluster, *, policy: str | Profile = "rackscale", seed: int = 0) -> None:
        super().__init__(cluster, policy=policy, seed=seed, options=HostOptions())

    @property
    def counters(self) -> LiveCounters:
        k = self.kpi
        return LiveCounters(
            cycles=k.cycles,
            preemption_victims=k.preemptions,
            preemption_victims_by_cause={c: self.preempted_by[c] for c in PreemptionCause},
            resizes=k.resizes,
            completed=k.completed,
            failed=k.failed,
            cancelled=k.cancelled,
            attempts=dict(self.attempts),
        )

    def exited(self, name: str, now: float, *, ok: bool, exit_code: int | None, reason: str) -> Change | None:
        """The backend saw a running job end."""
        return self.finish(name, now, ok=ok, exit_code=exit_code, reason=reason)


__all__ = [
    "CANCELLED",
    "COMPLETED",
    "FAILED",
    "NOTICE",
    "PREEMPTED",
    "RESIZED",
    "SCHEDULED",
    "WAITING",
    "Change",
    "ChangeKind",
    "LiveCluster",
    "LiveCounters",
]
