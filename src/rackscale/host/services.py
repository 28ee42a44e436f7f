"""Inference services on the host: capacity, the daily demand they serve, and autoscaling.

A mixin of :class:`rackscale.host.host.ClusterHost` (it reads the host's state and queue). The simulator
calls ``_autoscale`` on its periodic tick (each service follows its model, no stabilisation: its numbers);
the service's runner calls ``autoscale`` every 15 s with the loads it read (Prometheus, or the model) and
``scaled`` after each cycle, and persists the RESIZED changes they return. Both scale the same way: a
scale-up is queued as pending work the scheduler places like any job, a scale-down removes replicas.
The accounting (``_serve``) runs under both clocks.

A service that names its model (``spec.llm``) is timed replica by replica on the replica's own layout (a
TP-16 replica split over two racks serves less), and each interval also scores what its users see: the
tokens/s per user and the time to first token at the interval's load (``ReplicaServing.at_load``),
against the service's interactivity and TTFT SLOs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from rackscale.host import serving
from rackscale.host.autoscale import (
    HPA_DEFAULT,
    Load,
    NoLoad,
    Reading,
    ScaleBehaviour,
    Stabiliser,
    describe,
    replicas_for,
)
from rackscale.host.changes import Change, ChangeKind
from rackscale.host.kpis import KpiAccumulator
from rackscale.host.perf import Layout, replica_tokens_per_s
from rackscale.host.runs import JobRun
from rackscale.host.serve_batch import ServeBatch
from rackscale.host.serve_pass import serve_vector
from rackscale.host.serve_table import VECTOR_MIN, Inputs, Row, ServeTable, next_table
from rackscale.llm import jobs as llm_jobs
from rackscale.llm.jobs import ReplicaServing
from rackscale.model.placement import Placement
from rackscale.model.state import ClusterState
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobKind, JobSpec, ScaleFallback, ServingProfile
from rackscale.scheduler import PendingQueue
from rackscale.scheduler.cycles import CycleDriver

if TYPE_CHECKING:
    from rackscale.host.host import HostOptions

_DEFAULT_PROFILE = ServingProfile()


@functools.lru_cache(maxsize=64)
def _llm_default(osl: int) -> ServingProfile:
    return ServingProfile(tokens_per_request=float(osl))


def autoscaled(spec: JobSpec) -> bool:
    """The live service scales only the services that ask for it: an ``autoscale`` block, or bounds."""
    return spec.autoscale is not None or spec.min_units > 0 or spec.max_units > 0


def replica_bounds(spec: JobSpec) -> tuple[int, int]:
    """A service's replica bounds: ``(minReplicas or 1, maxReplicas or replicas)`` (the HPA's minReplicas
    defaults to 1 too); the autoscaler and scheduled scaling both scale within them."""
    lo = spec.min_units or 1
    return lo, max(spec.max_units or spec.units, lo)


@dataclass(frozen=True, slots=True)
class AutoscaleStep:
    """What one live autoscaling pass did: the scale-downs (RESIZED changes, now), and the services it
    held where they are, with why (their query had no answer and ``fallback: hold``)."""

    changes: list[Change]
    held: dict[str, str]


@dataclass(slots=True)
class QueuedScaleUp:
    """A scale-up waiting for the scheduler (the autoscaler's or a schedule's): the replicas before it, why,
    and the run it was asked for; ``ServicesMixin.scaled`` reports it once a cycle placed it."""

    have: int
    why: str
    generation: int


@dataclass(slots=True)
class _ServeMemory:
    """Each service's constants, reused by the next table while unchanged, and the services ``_rescale``
    saw since the last table (their capacity may have changed: ``serve_table.next_table``)."""

    rows: dict[str, Row] = field(default_factory=dict)
    rescaled: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _LiveScaling:
    stabilisers: dict[str, Stabiliser] = field(default_factory=dict)
    queued: dict[str, QueuedScaleUp] = field(default_factory=dict)


class ServicesMixin:
    cluster: GPUCluster
    options: HostOptions
    state: ClusterState
    pending: PendingQueue
    kpi: KpiAccumulator
    runs: dict[str, JobRun]
    serving_jobs: set[str]
    cycles: CycleDriver

    # LLM services only: each distinct replica speed and how many replicas run at it (set by _rescale)
    _llm_replicas: dict[str, tuple[tuple[ReplicaServing, int], ...]]

    _live_scaling: _LiveScaling  # created on first use (the live autoscaler's memory)
    _serve_version: int  # bumped whenever a service's capacity may have changed (``_rescale``)
    _serve_cache: ServeTable  # the running services' constants for ``_serve`` (``serve_table``)
    _serve_checked_at: int  # the state's ``inference_version`` when the table was last found fresh
    _serve_memory: _ServeMemory  # what the next table is built from, besides the host's state
    _serve_batch: ServeBatch  # a batching host's instants still owed to the KPIs (``flush_serving``)

    if TYPE_CHECKING:  # the host's

        def _enqueue(self, spec: JobSpec) -> None: ...

        def _dequeue(self, name: str) -> None: ...

    def _profile(self, spec: JobSpec) -> ServingProfile:
        """The service's load curve; an LLM service without one asks for its ``osl`` tokens per request."""
        if spec.serving is not None:
            return spec.serving
        return _llm_default(spec.llm.osl) if spec.llm is not None else _DEFAULT_PROFILE

    def _rescale(self, r: JobRun, now: float) -> None:
        """Replicas changed (start or scale-up): recompute the service's capacity."""
        self._serve_version = getattr(self, "_serve_version", 0) + 1  # the serving table is out of date
        self._serve_state().rescaled.add(r.spec.name)
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
        """The simulator's tick: every service follows its model. Returns whether replicas were removed
        (capacity freed); scale-ups are queued as fresh work."""
        freed = False
        for name in sorted(self.serving_jobs):
            r = self.runs[name]
            have = self.state.running[name].placement.units
            want, _ = self._modelled(r, now)
            if want > have and name not in self.pending:
                self._scale_up(r, have, want)
            elif want < have:
                self._scale_down(r, have - want)
                freed = True
        return freed

    def autoscale(
        self, now: float, *, readings: Mapping[str, Reading], behaviour: ScaleBehaviour = HPA_DEFAULT
    ) -> AutoscaleStep:
        """The live autoscaler (the runner calls it every ``behaviour.every_s``): each autoscaled service
        goes to the replicas its load asks for, stabilised (:class:`Stabiliser`). ``readings``: the load
        of each service with a query. A scale-down happens now (a RESIZED change); a scale-up is queued
        for the scheduler like any job and reported by :meth:`scaled` once a cycle placed it."""
        mem = self._scaling_memory()
        for gone in set(mem.stabilisers) - self.serving_jobs:
            del mem.stabilisers[gone]
        out: list[Change] = []
        held: dict[str, str] = {}
        for name in sorted(self.serving_jobs):
            r = self.runs[name]
            if not autoscaled(r.spec):
                continue
            have = self.state.running[name].placement.units
            decided = self._desired(r, now, readings.get(name), have)
            if isinstance(decided, str):
                held[name] = decided
                continue
            raw, why = decided
            want = mem.stabilisers.setdefault(name, Stabiliser()).stabilise(
                now=now, desired=raw, current=have, behaviour=behaviour
            )
            queued = self.pending.get(name)  # a running service's only pending entry: its scale-up
            if want > have:
                if queued is None or queued.units != want:
                    self._scale_up(r, have, want)
                mem.queued[name] = QueuedScaleUp(have, why, r.generation)
                continue
            if queued is not None:  # no longer needed
                self._dequeue(name)
                mem.queued.pop(name, None)
            if want < have:
                self._scale_down(r, have - want)
                after = self.state.running[name].placement
                if after.units < have:
                    self.cycles.freed = True
                    msg = f"scaled down {have} -> {after.units} replicas: {why}"
                    out.append(Change(name, ChangeKind.RESIZED, now, "ScaledDown", msg, after))
        return AutoscaleStep(out, held)

    def scaled(self, now: float) -> list[Change]:
        """After a cycle: a RESIZED change for each queued scale-up it placed (the store keeps the new
        placement, the backend starts the replicas)."""
        mem = self._scaling_memory()
        out: list[Change] = []
        for name in sorted(mem.queued):
            q = mem.queued[name]
            r = self.runs.get(name)
            rj = self.state.running.get(name)
            if r is None or rj is None or r.generation != q.generation:  # stopped since: its own changes say so
                del mem.queued[name]
                continue
            if name in self.pending:
                continue  # still waiting for room
            del mem.queued[name]
            if rj.placement.units > q.have:
                msg = f"scaled up {q.have} -> {rj.placement.units} replicas: {q.why}"
                out.append(Change(name, ChangeKind.RESIZED, now, "ScaledUp", msg, rj.placement))
        return out

    def _scaling_memory(self) -> _LiveScaling:
        if not hasattr(self, "_live_scaling"):
            self._live_scaling = _LiveScaling()
        return self._live_scaling

    def _modelled(self, r: JobRun, now: float, *, replica_tps: float | None = None) -> tuple[int, str]:
        """Replicas the service's own model asks for now (its daily curve over its replicas' capacity:
        ``replica_tps``, else what its running replicas serve)."""
        prof = self._profile(r.spec)
        lo, hi = replica_bounds(r.spec)
        demand = serving.demand_tokens_per_s(prof, now)
        tps = r.replica_tps if replica_tps is None else replica_tps
        want = serving.desired_replicas(
            demand_tps=demand, replica_tps=tps, target=prof.target_utilisation, lo=lo, hi=hi
        )
        how = f"{tps:,.0f} tokens/s per replica at {prof.target_utilisation:.0%}"
        return want, f"load {demand:,.0f} tokens/s (the service's model), {how}"

    def _start_request(self, r: JobRun, now: float) -> JobSpec:
        """What a job that is not running asks the scheduler for: its spec, except on a host whose services
        start at their model (``HostOptions.services_start_at_model``, the simulator's). There a service whose
        replicas follow its model (bounds and no load query) starts at the replicas the model asks for now,
        within its bounds, as the next tick would scale it: not at all of its ``replicas``, which over-asks
        off-peak, and not at ``minReplicas``, which under-asks at the peak. Its placement still needs only
        ``minReplicas``; a victim search frees room for all it asks (``scheduler.preemption``). The live
        service starts a service at its ``replicas``, as a Deployment does, and its HPA-like autoscaler
        (stabilised) takes it from there.

        Why: a service that took the one large gang's racks got every replica from the freed room, and one
        that took several small jobs' GPUs got its minimum, then one replica a tick while its users missed
        their SLO (docs/benchmarks.md, "Where a service's SLO goes when it preempts small jobs")."""
        spec = r.spec
        if not self.options.services_start_at_model or spec.kind is not JobKind.INFERENCE or not autoscaled(spec):
            return spec
        if spec.autoscale is not None and spec.autoscale.query is not None and spec.autoscale.target is not None:
            return spec  # its load comes from its query, read once it runs: it starts at its replicas
        # Not placed yet: one replica's capacity on a packed layout (what the placer gives when it can).
        packed = Layout.packed(self.cluster, max(spec.unit.gpus, 1))
        want, _ = self._modelled(r, now, replica_tps=replica_tokens_per_s(self.cluster, spec, packed, speed=r.speed))
        return spec if want == spec.units else replace(spec, units=want)

    def _desired(self, r: JobRun, now: float, reading: Reading | None, have: int) -> tuple[int, str] | str:
        """``(replicas, why)`` from the service's query (or its model), or why it holds where it is."""
        a = r.spec.autoscale
        if a is None or a.query is None or a.target is None:
            return self._modelled(r, now)
        if isinstance(reading, Load):
            lo, hi = replica_bounds(r.spec)
            return replicas_for(load=reading, target=a.target, current=have, lo=lo, hi=hi), describe(reading, a.target)
        why = reading.why if isinstance(reading, NoLoad) else "its query was not read"
        if a.fallback is ScaleFallback.HOLD:
            return f"holding {have} replicas: no load from its query ({why})"
        want, model = self._modelled(r, now)
        return want, f"{model}; its query has no answer ({why})"

    def _scale_up(self, r: JobRun, have: int, want: int) -> None:
        self._enqueue(replace(r.spec, units=want, min_units=have + 1))  # noted as arrived for the cycle

    def _scale_down(self, r: JobRun, n: int) -> None:
        """Remove ``n`` replicas, the last placed first (``ClusterState.shed``): replicas merged into one
        node's slice leave it one by one, a replica over whole nodes leaves with its nodes."""
        before = self.state.running[r.spec.name].placement.units
        if self.state.shed(r.spec.name, n).placement.units < before and llm_jobs.is_llm(r.spec):
            self._rescale(r, 0.0)  # the replicas that remain may not be the ones that left

    def _serve(self, dt: float, t_mid: float) -> None:
        """Add the interval's served demand, SLO weights and LLM user KPIs of every running service (in
        name order): with many services, all at once in numpy (``serve_pass``: the very same bits), and on
        a batching host many instants at once (``serve_batch``)."""
        if len(self.serving_jobs) >= VECTOR_MIN:
            table = self._serve_table()
            if table.vector:
                batch: ServeBatch | None = getattr(self, "_serve_batch", None)
                if batch is not None:
                    batch.add(table, self.kpi, dt, t_mid)
                else:
                    serve_vector(table, self.kpi, dt, t_mid)
                return
        self.flush_serving()  # the owed instants come first: the KPI sums keep their order
        self._serve_each(dt, t_mid)

    def flush_serving(self) -> None:
        """Add the instants a batching host still owes to the serving KPIs: call before reading them."""
        batch: ServeBatch | None = getattr(self, "_serve_batch", None)
        if batch is not None:
            batch.flush(self.kpi)

    def _serve_table(self) -> ServeTable:
        """The services' constants, renewed when a service started, stopped or was rescaled since."""
        version = getattr(self, "_serve_version", 0)
        running = self.state.running
        table: ServeTable | None = getattr(self, "_serve_cache", None)
        # No inference job's RunningJob changed since the table was last found fresh (or built): it still is,
        # with no walk over the services (an O(1) answer at nearly every instant; ``fresh`` walks them).
        seen = self.state.inference_version
        if (
            table is not None
            and seen == getattr(self, "_serve_checked_at", -1)
            and version == table.version
            and len(self.serving_jobs) == len(table.names)
        ):
            return table
        self._serve_checked_at = seen
        if table is None or not table.fresh(version, len(self.serving_jobs), running):
            mem = self._serve_state()
            inputs = Inputs(
                runs=self.runs,
                running=running,
                profile_of=self._profile,
                groups=getattr(self, "_llm_replicas", {}),
                rows=mem.rows,
            )
            names = sorted(self.serving_jobs)
            table = self._serve_cache = next_table(
                table, version=version, names=names, inputs=inputs, rescaled=mem.rescaled
            )
            mem.rescaled.clear()
        return table

    def _serve_state(self) -> _ServeMemory:
        if not hasattr(self, "_serve_memory"):
            self._serve_memory = _ServeMemory()
        return self._serve_memory

    def _serve_each(self, dt: float, t_mid: float) -> None:
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
