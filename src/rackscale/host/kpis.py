"""The KPIs, with the exact definitions of DESIGN.md section 5, accumulated while the simulation runs.

- allocation ratio: allocated GPU-seconds / available (healthy) GPU-seconds.
- idle rate: GPU-seconds left unallocated *while jobs that could use them wait* (at most the waiting
  jobs' demand), over the available GPU-seconds of those same periods. Idle capacity with no waiting
  work is not the scheduler's fault: reported apart as ``idle_no_work_share``. The part of the idle rate
  while the smallest waiting job needed no more GPUs than were free is ``idle_fitting_rate`` (room a
  waiting job could have used now); the rest is GPUs freed while only gangs larger than the free room
  waited (a gang's drain).
- intra-rack traffic share: bytes carried on NVLink / all bytes moved by jobs.
- single-rack share: starts of multi-GPU training gangs that fit one rack (the largest) placed in one rack,
  over those starts; a larger gang cannot be in one rack and counts instead for the fewest-racks share
  (placed in ``ceil(GPUs / rack GPUs)`` racks). (Before issue 13 the single-rack share counted the larger
  gangs too, as misses they could not avoid.)
- JCT and queueing delay (first start - submit): mean / p50 / p99, overall and per job kind.
- throughput: training samples/s and inference tokens/s over the makespan; cost = every GPU of the
  cluster at its hourly price for the makespan (idle GPUs cost too); cost per million tokens and per
  million samples; cost efficiency = throughput / (cost per hour x 3600), as the seed writes it.
- fragmentation: the share of free GPUs in racks too full to host the typical (median) pending request.
- inference: SLO attainment (share of served demand-time whose p99 latency met the SLO), the worst finite
  p99, and the share of demand-time a service was overloaded (demand above capacity: no finite p99).
- LLM services (jobs with ``llm``): interactivity SLO attainment (share of their demand-time whose tokens/s
  per user met ``interactivity_slo``, over the services that set one), TTFT SLO attainment (likewise, time
  to first token within ``ttft_slo_s``; an overloaded interval misses it), the mean tokens/s per user
  (weighted by the tokens served) and the mean TTFT (weighted by demand-time, overloaded intervals left out).

A KPI with nothing to measure is ``None`` (JSON ``null``, shown "n/a"), never a perfect or a zero score:
no time elapsed (nothing ran: no makespan, no ratios over time, no idle rate, no throughput), no job
waiting at a sample (fragmentation), no byte moved (intra-rack share), no multi-GPU training started
(single-rack share; none larger than a rack: fewest-racks share), no job completed or started (JCT,
queueing), no inference served (SLO attainment,
worst p99, overloaded share), no LLM service with that SLO or none served (the LLM KPIs), no output (cost
per unit of it), or a free cluster (cost efficiency). A run in which no job ever waited has an idle rate of
0: no GPU stayed idle while work waited.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import cast

from rackscale.model.workload import JobKind

Kpi = float | int | None
"""One KPI's value: ``None`` where there was nothing to measure."""


def percentile(xs: Sequence[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


@dataclass(frozen=True, slots=True, kw_only=True)
class Kpis(Mapping[str, Kpi]):
    """The KPIs of one run (definitions: the module's docstring). ``None``: nothing to measure.

    Typed fields for code; a read-only mapping for tables and output (``kpis["idle_rate"]``), in this
    order, with the per-kind means (``mean_jct_s_training``...) of the kinds that had jobs after it;
    :meth:`as_dict` for JSON.
    """

    completed: int
    failed: int
    allocation_ratio: float | None
    idle_rate: float | None
    idle_no_work_share: float | None
    idle_fitting_rate: float | None
    intra_rack_traffic_share: float | None
    rdma_bytes: float
    backbone_bytes: float
    single_rack_share: float | None
    fewest_racks_share: float | None
    mean_jct_s: float | None
    p50_jct_s: float | None
    p99_jct_s: float | None
    mean_queueing_s: float | None
    p50_queueing_s: float | None
    p99_queueing_s: float | None
    training_samples_per_s: float | None
    inference_tokens_per_s: float | None
    cost_per_hour: float
    cost_per_million_tokens: float | None
    cost_per_million_samples: float | None
    cost_efficiency_samples: float | None
    cost_efficiency_tokens: float | None
    slo_attainment: float | None
    worst_p99_latency_s: float | None
    inference_overloaded_share: float | None
    interactivity_slo_attainment: float | None
    ttft_slo_attainment: float | None
    mean_user_tokens_per_s: float | None
    mean_ttft_s: float | None
    fragmentation: float | None
    preemptions: int
    restarts: int
    resizes: int  # elastic gangs shrunk or grown (each a restart from a checkpoint)
    lost_gpu_hours: float
    makespan_s: float | None
    events: int
    cycles: int
    by_kind: Mapping[str, float] = field(default_factory=dict)  # mean_jct_s_<kind>, mean_queueing_s_<kind>

    def as_dict(self) -> dict[str, Kpi]:
        out: dict[str, Kpi] = {name: getattr(self, name) for name in _KPI_NAMES}
        out.update(self.by_kind)
        return out

    def __getitem__(self, key: str) -> Kpi:
        if key in _KPI_FIELDS:
            return cast(Kpi, getattr(self, key))
        return self.by_kind[key]

    def __iter__(self) -> Iterator[str]:
        yield from _KPI_NAMES
        yield from self.by_kind

    def __len__(self) -> int:
        return len(_KPI_NAMES) + len(self.by_kind)


@dataclass(slots=True)
class KpiAccumulator:
    allocated_gpu_s: float = 0.0
    available_gpu_s: float = 0.0
    idle_waiting_gpu_s: float = 0.0
    idle_fitting_gpu_s: float = 0.0  # ... of it while the smallest waiting job needed no more than was free
    available_while_waiting_gpu_s: float = 0.0
    idle_no_work_gpu_s: float = 0.0
    bytes_nvlink: float = 0.0
    bytes_rdma: float = 0.0
    bytes_backbone: float = 0.0
    samples: float = 0.0
    tokens: float = 0.0
    slo_met_weight: float = 0.0
    slo_weight: float = 0.0
    worst_p99_latency_s: float = 0.0  # the worst finite p99 (an overloaded service has none)
    overloaded_weight: float = 0.0
    interactivity_weight: float = 0.0  # LLM services with an interactivity SLO: demand-time
    interactivity_met_weight: float = 0.0  # ... of it at or above the SLO's tokens/s per user
    ttft_weight: float = 0.0  # LLM services with a TTFT SLO: demand-time
    ttft_met_weight: float = 0.0  # ... of it with the time to first token within the SLO
    user_tokens: float = 0.0  # tokens LLM services served
    user_tok_s_tokens: float = 0.0  # sum of tokens/s per user x tokens served
    ttft_weight_finite: float = 0.0  # LLM demand-time with a finite TTFT (not overloaded)
    ttft_s_weighted: float = 0.0  # sum of TTFT x that demand-time
    frag_samples: list[float] = field(default_factory=list)
    jct: dict[JobKind, list[float]] = field(default_factory=dict)
    queueing: dict[JobKind, list[float]] = field(default_factory=dict)
    completed: int = 0
    failed: int = 0
    cancelled: int = 0  # the service only (a simulated workload is never cancelled)
    preemptions: int = 0
    restarts: int = 0
    resizes: int = 0
    lost_gpu_s: float = 0.0
    events: int = 0
    cycles: int = 0
    multi_gpu_starts: int = 0
    single_rack_starts: int = 0
    multi_rack_starts: int = 0  # starts of training gangs larger than one rack
    fewest_racks_starts: int = 0  # ... of them in the fewest racks they could take

    def interval(
        self, *, dt: float, healthy: float, allocated: float, waiting_demand: float, smallest_fits: bool = True
    ) -> None:
        """Account ``dt`` seconds with ``allocated`` of ``healthy`` GPUs busy and ``waiting_demand`` GPUs
        asked for by jobs that wait; ``smallest_fits``: the smallest waiting job needs no more GPUs than
        are free (else the idle GPUs are waiting for gangs larger than the free room to drain it)."""
        if dt <= 0:
            return
        free = max(healthy - allocated, 0.0)
        self.allocated_gpu_s += allocated * dt
        self.available_gpu_s += healthy * dt
        if waiting_demand > 0:
            self.idle_waiting_gpu_s += min(free, waiting_demand) * dt
            if smallest_fits:
                self.idle_fitting_gpu_s += min(free, waiting_demand) * dt
            self.available_while_waiting_gpu_s += healthy * dt
            self.idle_no_work_gpu_s += max(free - waiting_demand, 0.0) * dt
        else:
            self.idle_no_work_gpu_s += free * dt

    def finished(self, kind: JobKind, *, jct: float) -> None:
        self.completed += 1
        self.jct.setdefault(kind, []).append(jct)

    def started(self, kind: JobKind, *, wait: float) -> None:
        self.queueing.setdefault(kind, []).append(wait)

    def kpis(self, *, makespan_s: float, cluster_gpus: int, price_per_gpu_hour: float) -> Kpis:
        """The KPIs of a run that lasted ``makespan_s`` (first arrival to the last event; 0: nothing ran)."""
        all_jct = [x for xs in self.jct.values() for x in xs]
        all_wait = [x for xs in self.queueing.values() for x in xs]
        span = makespan_s if makespan_s > 0 else None
        cost_per_hour = cluster_gpus * price_per_gpu_hour
        cost = cost_per_hour * span / 3600.0 if span is not None else None
        samples_s = self.samples / span if span is not None else None
        tokens_s = self.tokens / span if span is not None else None
        total_bytes = self.bytes_nvlink + self.bytes_rdma + self.bytes_backbone
        return Kpis(
            completed=self.completed,
            failed=self.failed,
            allocation_ratio=_ratio(self.allocated_gpu_s, self.available_gpu_s),
            # no job waited: no GPU was idle while work waited (0); no time at all: nothing to measure
            idle_rate=_ratio(self.idle_waiting_gpu_s, self.available_while_waiting_gpu_s)
            if self.available_while_waiting_gpu_s > 0
            else (0.0 if self.available_gpu_s > 0 else None),
            idle_no_work_share=_ratio(self.idle_no_work_gpu_s, self.available_gpu_s),
            idle_fitting_rate=_ratio(self.idle_fitting_gpu_s, self.available_while_waiting_gpu_s)
            if self.available_while_waiting_gpu_s > 0
            else (0.0 if self.available_gpu_s > 0 else None),
            intra_rack_traffic_share=_ratio(self.bytes_nvlink, total_bytes),
            rdma_bytes=self.bytes_rdma,
            backbone_bytes=self.bytes_backbone,
            single_rack_share=_ratio(self.single_rack_starts, self.multi_gpu_starts),
            fewest_racks_share=_ratio(self.fewest_racks_starts, self.multi_rack_starts),
            mean_jct_s=statistics.fmean(all_jct) if all_jct else None,
            p50_jct_s=percentile(all_jct, 0.50),
            p99_jct_s=percentile(all_jct, 0.99),
            mean_queueing_s=statistics.fmean(all_wait) if all_wait else None,
            p50_queueing_s=percentile(all_wait, 0.50),
            p99_queueing_s=percentile(all_wait, 0.99),
            training_samples_per_s=samples_s,
            inference_tokens_per_s=tokens_s,
            cost_per_hour=cost_per_hour,
            cost_per_million_tokens=cost / self.tokens * 1e6 if cost is not None and self.tokens else None,
            cost_per_million_samples=cost / self.samples * 1e6 if cost is not None and self.samples else None,
            cost_efficiency_samples=_ratio(samples_s, cost_per_hour * 3600.0),
            cost_efficiency_tokens=_ratio(tokens_s, cost_per_hour * 3600.0),
            slo_attainment=_ratio(self.slo_met_weight, self.slo_weight),
            worst_p99_latency_s=self.worst_p99_latency_s if self.worst_p99_latency_s > 0 else None,
            inference_overloaded_share=_ratio(self.overloaded_weight, self.slo_weight),
            interactivity_slo_attainment=_ratio(self.interactivity_met_weight, self.interactivity_weight),
            ttft_slo_attainment=_ratio(self.ttft_met_weight, self.ttft_weight),
            mean_user_tokens_per_s=_ratio(self.user_tok_s_tokens, self.user_tokens),
            mean_ttft_s=_ratio(self.ttft_s_weighted, self.ttft_weight_finite),
            fragmentation=statistics.fmean(self.frag_samples) if self.frag_samples else None,
            preemptions=self.preemptions,
            restarts=self.restarts,
            resizes=self.resizes,
            lost_gpu_hours=self.lost_gpu_s / 3600.0,
            makespan_s=span,
            events=self.events,
            cycles=self.cycles,
            by_kind=self._by_kind(),
        )

    def _by_kind(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for kind in JobKind:
            if kind in self.jct:
                out[f"mean_jct_s_{kind.value}"] = statistics.fmean(self.jct[kind])
            if kind in self.queueing:
                out[f"mean_queueing_s_{kind.value}"] = statistics.fmean(self.queueing[kind])
        return out


def _ratio(a: float | None, b: float) -> float | None:
    """``a / b``; ``None`` (nothing to measure) where ``a`` is unknown or ``b`` is not positive."""
    return a / b if a is not None and b > 0 else None


_KPI_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Kpis) if f.name != "by_kind")  # output order
_KPI_FIELDS = frozenset(_KPI_NAMES)
