"""Inference services on the host: capacity, the daily demand they serve, and autoscaling.

A mixin of :class:`rackscale.host.host.ClusterHost` (it reads the host's state and queue). The simulator
calls ``_autoscale`` on its periodic tick; the accounting (``_serve``) runs under both clocks.

A service that names its model (``spec.llm``) is timed replica by replica on the replica's own layout (a
TP-16 replica split over two racks serves less), and each interval also scores what its users see: the
tokens/s per user and the time to first token at the interval's load (``ReplicaServing.at_load``),
against the service's interactivity and TTFT SLOs.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import TYPE_CHECKING

from rackscale.host import serving
from rackscale.host.kpis import KpiAccumulator
from rackscale.host.perf import Layout, replica_tokens_per_s
from rackscale.host.runs import JobRun
from rackscale.llm import jobs as llm_jobs
from rackscale.llm.jobs import ReplicaServing
from rackscale.model.placement import Placement
from rackscale.model.state import ClusterState
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobSpec, ServingProfile
from rackscale.scheduler import PendingQueue
from rackscale.scheduler.cycles import CycleDriver

_DEFAULT_PROFILE = ServingProfile()


@functools.lru_cache(maxsize=64)
def _llm_default(osl: int) -> ServingProfile:
    return ServingProfile(tokens_per_request=float(osl))


class ServicesMixin:
    cluster: GPUCluster
    state: ClusterState
    pending: PendingQueue
    kpi: KpiAccumulator
    runs: dict[str, JobRun]
    serving_jobs: set[str]
    cycles: CycleDriver

    # LLM services only: each distinct replica speed and how many replicas run at it (set by _rescale)
    _llm_replicas: dict[str, tuple[tuple[ReplicaServing, int], ...]]

    if TYPE_CHECKING:  # the host's

        def _enqueue(self, spec: JobSpec) -> None: ...

    def _profile(self, spec: JobSpec) -> ServingProfile:
        """The service's load curve; an LLM service without one asks for its ``osl`` tokens per request."""
        if spec.serving is not None:
            return spec.serving
        return _llm_default(spec.llm.osl) if spec.llm is not None else _DEFAULT_PROFILE

    def _rescale(self, r: JobRun, now: float) -> None:
        """Replicas changed (start or scale-up): recompute the service's capacity."""
        rj = self.state.running.get(r.spec.name)
        if rj is None:
            return
        if llm_jobs.is_llm(r.spec):
            self._rescale_llm(r, rj.placement)
            return
        per_replica = Layout.packed(self.cluster, max(r.spec.unit.gpus, 1))
        r.replica_tps = replica_tokens_per_s(self.cluster, r.spec, per_replica, speed=r.speed)

    def _rescale_llm(self, r: JobRun, placement: Placement) -> None:
        """Each replica on its own layout; the service's capacity is their sum (kept as the mean x count)."""
        counts: dict[ReplicaServing, int] = {}
        for layout in llm_jobs.replica_layouts(self.cluster, placement, r.spec.unit.gpus):
            served = llm_jobs.replica_serving(self.cluster, r.spec, layout)
            counts[served] = counts.get(served, 0) + 1
        total = sum(counts.values())
        r.replica_tps = sum(s.tokens_per_s * n for s, n in counts.items()) / total if total else 0.0
        if not hasattr(self, "_llm_replicas"):
            self._llm_replicas = {}
        self._llm_replicas[r.spec.name] = tuple(counts.items())

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
            if llm_jobs.is_llm(r.spec):
                self._rescale(r, 0.0)  # the replicas that remain may not be the ones that left

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
            if r.spec.llm is not None and replicas > 0 and capacity > 0:
                self._serve_llm(r.spec, demand / capacity, weight, min(demand, capacity) * dt)

    def _serve_llm(self, spec: JobSpec, load: float, weight: float, tokens: float) -> None:
        """What the users of an LLM service saw over an interval at ``load``: each replica speed group takes
        its share of the demand (``weight``) and of the tokens served."""
        assert spec.llm is not None
        groups = getattr(self, "_llm_replicas", {}).get(spec.name, ())
        total = sum(n for _, n in groups)
        inter_slo, ttft_slo = spec.llm.interactivity_slo, spec.llm.ttft_slo_s
        k = self.kpi
        for served, n in groups:
            share = n / total
            inter, ttft = served.at_load(load)
            k.user_tokens += tokens * share
            k.user_tok_s_tokens += inter * tokens * share
            if math.isfinite(ttft):
                k.ttft_weight_finite += weight * share
                k.ttft_s_weighted += ttft * weight * share
            if inter_slo is not None:
                k.interactivity_weight += weight * share
                if inter >= inter_slo:
                    k.interactivity_met_weight += weight * share
            if ttft_slo is not None:
                k.ttft_weight += weight * share
                if ttft <= ttft_slo:
                    k.ttft_met_weight += weight * share
