"""Inference services on the host: capacity, the daily demand they serve, and autoscaling.

A mixin of :class:`rackscale.host.host.ClusterHost` (it reads the host's state and queue). The simulator
calls ``_autoscale`` on its periodic tick; the accounting (``_serve``) runs under both clocks.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from rackscale.host import serving
from rackscale.host.kpis import KpiAccumulator
from rackscale.host.perf import Layout, replica_tokens_per_s
from rackscale.host.runs import JobRun
from rackscale.model.state import ClusterState
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobSpec, ServingProfile
from rackscale.scheduler import PendingQueue
from rackscale.scheduler.cycles import CycleDriver


class ServicesMixin:
    cluster: GPUCluster
    state: ClusterState
    pending: PendingQueue
    kpi: KpiAccumulator
    runs: dict[str, JobRun]
    serving_jobs: set[str]
    cycles: CycleDriver

    if TYPE_CHECKING:  # the host's

        def _enqueue(self, spec: JobSpec) -> None: ...

    def _profile(self, spec: JobSpec) -> ServingProfile:
        return spec.serving or ServingProfile()

    def _rescale(self, r: JobRun, now: float) -> None:
        """Replicas changed (start or scale-up): recompute the service's capacity."""
        rj = self.state.running.get(r.spec.name)
        if rj is None:
            return
        per_replica = Layout.packed(self.cluster, max(r.spec.unit.gpus, 1))
        r.replica_tps = replica_tokens_per_s(self.cluster, r.spec, per_replica, speed=r.speed)

    def _autoscale(self, now: float) -> bool:
        """Returns whether replicas were removed (capacity freed); scale-ups are queued as fresh work."""
        freed = False
        for name in sorted(self.serving_jobs):
            r = self.runs[name]
            spec = r.spec
            rj = self.state.running[spec.name]
            prof = self._profile(spec)
            lo = spec.min_units or 1
            hi = spec.max_units or spec.units
            want = serving.desired_replicas(
                demand_tps=serving.demand_tokens_per_s(prof, now),
                replica_tps=r.replica_tps,
                target=prof.target_utilisation,
                lo=lo,
                hi=max(hi, lo),
            )
            have = rj.placement.units
            if want > have and spec.name not in self.pending:
                self._enqueue(replace(spec, units=want, min_units=have + 1))  # noted as arrived for the cycle
            elif want < have:
                self._scale_down(r, have - want)
                freed = True
        return freed

    def _scale_down(self, r: JobRun, n: int) -> None:
        """Remove ``n`` replicas that each hold one slice (the last placed first)."""
        rj = self.state.running[r.spec.name]
        if r.spec.unit.gpus > self.state.max_node_gpus:
            return  # multi-node replicas are kept (their slices are merged)
        allocs = rj.placement.allocs
        victims = allocs[len(allocs) - n :] if n < len(allocs) else ()
        if victims:
            self.state.retract(r.spec.name, tuple(victims), len(victims))

    def _serve(self, dt: float, t_mid: float) -> None:
        for name in sorted(self.serving_jobs):
            r = self.runs[name]
            prof = self._profile(r.spec)
            rj = self.state.running.get(r.spec.name)
            replicas = rj.placement.units if rj is not None else 0
            demand = serving.demand_tokens_per_s(prof, t_mid)
            capacity = r.replica_tps * replicas
            self.kpi.tokens += min(demand, capacity) * dt
            p99 = serving.p99_latency_s(
                demand_tps=demand, capacity_tps=capacity, replicas=replicas, tokens_per_request=prof.tokens_per_request
            )
            weight = demand * dt
            self.kpi.slo_weight += weight
            if p99 <= prof.slo_p99_s:
                self.kpi.slo_met_weight += weight
            if math.isfinite(p99):
                self.kpi.worst_p99_latency_s = max(self.kpi.worst_p99_latency_s, p99)
            else:
                self.kpi.overloaded_weight += weight
