"""The per-instant serving accounting of many services at once, bit for bit what the scalar loop adds.

``ServicesMixin._serve`` runs at every instant of a simulation, over every running service: at a hundred
services and two million instants it was 70 % of the million-job run. Its per-service constants (capacity,
replicas, the M/M/1 service rate, the LLM replica groups) change only when a service starts, stops or is
rescaled, so they are kept here as arrays in name order (:class:`ServeTable`), and an instant's terms are
computed with numpy in one pass (:func:`serve_vector`).

Bit for bit: every term is computed with the same IEEE operations in the same order as the scalar code
(elementwise ``+ - * /``, ``min``/``max``, ``ceil`` and comparisons are exact in numpy as in Python; no
transcendental function is vectorised: the demand's ``cos`` is evaluated once per distinct profile with
``math``), and every KPI sum is a sequential left fold over the terms in name order (``np.add.accumulate``
runs strictly left to right; ``np.sum``'s pairwise summation would round differently), so the KPIs are
exactly the scalar loop's. tests/host/test_serve_table.py checks both against each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from rackscale.host import serving
from rackscale.host.kpis import KpiAccumulator
from rackscale.host.runs import JobRun
from rackscale.llm.job_plans import LOAD_LEVELS
from rackscale.llm.jobs import ReplicaServing
from rackscale.model.running import RunningJob
from rackscale.model.workload import JobSpec, ServingProfile

LOG100 = math.log(100.0)  # the p99 of an exponential sojourn is ln(100) / rate (serving.p99_latency_s)
VECTOR_MIN = 24  # below this many services the scalar loop is faster than numpy's per-call overhead

F64 = NDArray[np.float64]
Groups = Mapping[str, tuple[tuple[ReplicaServing, int], ...]]


@dataclass(frozen=True, slots=True, kw_only=True)
class _LlmRows:
    """One row per (LLM service, replica speed group), services in name order, groups in their order."""

    service: NDArray[np.intp]  # the row's service (index into the table's arrays)
    share: F64  # the group's share of the service's replicas
    steps: F64  # (rows, LOAD_LEVELS): the group's decode step at each load level
    emitted: F64
    prefill_share: F64
    prefill_s: F64
    inter_slo: F64  # its service's interactivity SLO (nan: none)
    has_inter: NDArray[np.bool_]
    ttft_slo: F64  # its service's TTFT SLO (nan: none)
    has_ttft: NDArray[np.bool_]
    arange: NDArray[np.intp]
    sums: F64  # (8, rows + 1): the eight LLM sums' buffer (``_serve_llm``)


# One LLM row: (share, replica serving, interactivity SLO or nan, TTFT SLO or nan)
_LlmRow = tuple[float, ReplicaServing, float, float]


@dataclass(frozen=True, slots=True)
class Row:
    """One service's constants, and what they were computed from (reused while all of it is the same)."""

    run: JobRun
    rj: RunningJob | None
    replica_tps: float
    groups: tuple[tuple[ReplicaServing, int], ...] | None
    profile: ServingProfile
    capacity: float
    replicas: float
    mu: float
    ok: bool
    llm: tuple[_LlmRow, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeTable:
    """The running services' constants, in name order. ``version``, ``names`` and ``running`` are what it
    was built from (the version of the services' capacities, and the running jobs by identity);
    ``vector``: False when some service cannot be vectorised (the scalar loop is used)."""

    version: int
    names: tuple[str, ...]
    running: list[RunningJob | None]
    vector: bool
    peak_hours: tuple[float, ...]  # the distinct peak hours: the wave is computed once for each
    wave: NDArray[np.intp]  # each service's peak hour (index into ``peak_hours``)
    peak: F64
    trough: F64
    capacity: F64
    replicas: F64
    tokens_per_request: F64
    slo: F64
    mu: F64  # requests per second per replica (capacity / replicas / tokens per request)
    ok: NDArray[np.bool_]  # replicas > 0 and capacity > 0 (else no finite p99)
    sums: F64  # (4, services + 1): the four sums' buffer
    llm: _LlmRows | None

    def fresh(self, version: int, names_count: int, running: Mapping[str, RunningJob]) -> bool:
        """Still what the services are: same capacities' version, same count, same running jobs."""
        return (
            version == self.version
            and names_count == len(self.names)
            and list(map(running.get, self.names)) == self.running
        )


def _row(name: str, r: JobRun, rj: RunningJob | None, prof: ServingProfile, groups: Groups) -> Row:
    replicas = rj.placement.units if rj is not None else 0
    capacity = r.replica_tps * replicas  # as the scalar loop computes it
    valid = replicas > 0 and capacity > 0
    gs = groups.get(name)
    llm: list[_LlmRow] = []
    if r.spec.llm is not None and valid and gs:
        total = sum(n for _, n in gs)
        inter, ttft = r.spec.llm.interactivity_slo, r.spec.llm.ttft_slo_s
        for served, n in gs:
            llm.append((n / total, served, math.nan if inter is None else inter, math.nan if ttft is None else ttft))
    return Row(
        r,
        rj,
        r.replica_tps,
        gs,
        prof,
        capacity,
        float(replicas),
        capacity / replicas / prof.tokens_per_request if valid else 0.0,
        valid,
        tuple(llm),
    )


def build_table(
    *,
    version: int,
    names: Sequence[str],
    runs: Mapping[str, JobRun],
    running: Mapping[str, RunningJob],
    profile_of: Callable[[JobSpec], ServingProfile],
    groups: Groups,
    rows: dict[str, Row] | None = None,
) -> ServeTable:
    """The table of ``names`` (sorted). ``rows``: each service's constants from earlier builds, reused
    while what they were computed from is the same, updated here (services no longer named are dropped)."""
    cache: dict[str, Row] = rows if rows is not None else {}
    rjs = [running.get(n) for n in names]
    got: list[Row] = []
    for name, rj in zip(names, rjs, strict=True):
        r = runs[name]
        row = cache.get(name)
        if (
            row is None
            or row.run is not r
            or row.rj is not rj
            or row.replica_tps != r.replica_tps
            or row.groups is not groups.get(name)
        ):
            row = cache[name] = _row(name, r, rj, profile_of(r.spec), groups)
        got.append(row)
    if len(cache) > len(got):
        for gone in set(cache) - set(names):
            del cache[gone]
    hours: dict[float, int] = {}
    wave = [hours.setdefault(row.profile.peak_hour, len(hours)) for row in got]
    llm_rows = [(i, x) for i, row in enumerate(got) for x in row.llm]
    vector = all(len(x[1].level_steps) == LOAD_LEVELS for _, x in llm_rows)
    llm = None
    if llm_rows and vector:
        m = len(llm_rows)
        llm = _LlmRows(
            service=np.array([i for i, _ in llm_rows], dtype=np.intp),
            share=np.array([x[0] for _, x in llm_rows]),
            steps=np.array([x[1].level_steps for _, x in llm_rows], dtype=np.float64).reshape(m, LOAD_LEVELS),
            emitted=np.array([x[1].emitted for _, x in llm_rows]),
            prefill_share=np.array([x[1].prefill_share for _, x in llm_rows]),
            prefill_s=np.array([x[1].prefill_s for _, x in llm_rows]),
            inter_slo=np.array([x[2] for _, x in llm_rows]),
            has_inter=np.array([not math.isnan(x[2]) for _, x in llm_rows]),
            ttft_slo=np.array([x[3] for _, x in llm_rows]),
            has_ttft=np.array([not math.isnan(x[3]) for _, x in llm_rows]),
            arange=np.arange(m, dtype=np.intp),
            sums=np.empty((8, m + 1)),
        )
    return ServeTable(
        version=version,
        names=tuple(names),
        running=rjs,
        vector=vector,
        peak_hours=tuple(hours),
        wave=np.array(wave, dtype=np.intp),
        peak=np.array([row.profile.peak_tokens_per_s for row in got], dtype=np.float64),
        trough=np.array([row.profile.trough_fraction for row in got], dtype=np.float64),
        capacity=np.array([row.capacity for row in got], dtype=np.float64),
        replicas=np.array([row.replicas for row in got], dtype=np.float64),
        tokens_per_request=np.array([row.profile.tokens_per_request for row in got], dtype=np.float64),
        slo=np.array([row.profile.slo_p99_s for row in got], dtype=np.float64),
        mu=np.array([row.mu for row in got], dtype=np.float64),
        ok=np.array([row.ok for row in got], dtype=np.bool_),
        sums=np.empty((4, len(got) + 1)),
        llm=llm,
    )


def fold(start: float, terms: F64) -> float:
    """``start + terms[0] + terms[1] + ...``, left to right (a Python loop of ``+=`` adds the same)."""
    if terms.size == 0:
        return start
    return float(np.add.accumulate(np.concatenate(([start], terms)))[-1])


# Several sums at once: row k of ``sums`` is sum k's start then its terms, and ``np.add.accumulate`` along
# the rows adds each left to right. A term a sum skips (a service whose p99 missed its SLO, say) is +0.0
# there: adding +0.0 leaves any sum unchanged, since a sum that starts at +0.0 is never -0.0 (x + y is -0.0
# only when both are -0.0).


def serve_vector(t: ServeTable, kpi: KpiAccumulator, dt: float, t_mid: float) -> None:
    """Add one interval of every service in ``t`` to ``kpi``, as ``ServicesMixin._serve_each`` would."""
    waves = np.array([serving.daily_wave(h, t_mid) for h in t.peak_hours], dtype=np.float64)
    trough = t.trough
    demand = t.peak * (trough + (1.0 - trough) * waves[t.wave])  # serving.demand_tokens_per_s's expression
    served = np.minimum(demand, t.capacity) * dt
    weight = demand * dt
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lam = demand / t.replicas / t.tokens_per_request
        p99 = np.where(t.ok & (lam < t.mu), LOG100 / (t.mu - lam), math.inf)
    finite = np.isfinite(p99)
    sums = t.sums
    sums[:, 0] = (kpi.tokens, kpi.slo_weight, kpi.slo_met_weight, kpi.overloaded_weight)
    sums[0, 1:] = served
    sums[1, 1:] = weight
    sums[2, 1:] = np.where(p99 <= t.slo, weight, 0.0)
    sums[3, 1:] = np.where(finite, 0.0, weight)
    end = np.add.accumulate(sums, axis=1)[:, -1].tolist()
    kpi.tokens, kpi.slo_weight, kpi.slo_met_weight, kpi.overloaded_weight = end
    worst = float(np.where(finite, p99, -math.inf).max())
    if worst > -math.inf:
        kpi.worst_p99_latency_s = max(kpi.worst_p99_latency_s, worst)
    if t.llm is not None:
        _serve_llm(t, t.llm, kpi, demand=demand, served=served, weight=weight)


def _serve_llm(t: ServeTable, g: _LlmRows, kpi: KpiAccumulator, *, demand: F64, served: F64, weight: F64) -> None:
    """``ServicesMixin._serve_llm`` with ``ReplicaServing.at_load`` for every row at once."""
    s = g.service
    tokens = served[s]
    w = weight[s]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        load = demand[s] / t.capacity[s]
        x = np.minimum(np.maximum(load, 0.0), 1.0)
        level = np.maximum(1.0, np.ceil(x * LOAD_LEVELS)).astype(np.intp) - 1
        step = g.steps[g.arange, level]
        inter = g.emitted / step * (1.0 - x * g.prefill_share)
        ttft = np.where(load < 1.0, (g.prefill_s + step) / (1.0 - load), math.inf)
        tf = np.isfinite(ttft)
        ws = w * g.share
        sums = g.sums
        sums[:, 0] = (
            kpi.user_tokens,
            kpi.user_tok_s_tokens,
            kpi.ttft_weight_finite,
            kpi.ttft_s_weighted,
            kpi.interactivity_weight,
            kpi.interactivity_met_weight,
            kpi.ttft_weight,
            kpi.ttft_met_weight,
        )
        sums[0, 1:] = tokens * g.share
        sums[1, 1:] = inter * tokens * g.share
        sums[2, 1:] = np.where(tf, ws, 0.0)
        sums[3, 1:] = np.where(tf, ttft * w * g.share, 0.0)
        sums[4, 1:] = np.where(g.has_inter, ws, 0.0)
        sums[5, 1:] = np.where(g.has_inter & (inter >= g.inter_slo), ws, 0.0)
        sums[6, 1:] = np.where(g.has_ttft, ws, 0.0)
        sums[7, 1:] = np.where(g.has_ttft & (ttft <= g.ttft_slo), ws, 0.0)
    (
        kpi.user_tokens,
        kpi.user_tok_s_tokens,
        kpi.ttft_weight_finite,
        kpi.ttft_s_weighted,
        kpi.interactivity_weight,
        kpi.interactivity_met_weight,
        kpi.ttft_weight,
        kpi.ttft_met_weight,
    ) = np.add.accumulate(sums, axis=1)[:, -1].tolist()


__all__ = ["VECTOR_MIN", "Row", "ServeTable", "build_table", "fold", "serve_vector"]
