"""The serving accounting of many instants and services in one numpy pass, bit for bit the scalar loop's.

A pass takes runs of instants, each run over one :class:`ServeTable` (the services running then), and
lays every (instant, service) pair out in one flat array, instant by instant, services in name order
(the table's columns tiled once per instant); then each term is one numpy operation over all of them and
each KPI sum one left fold. numpy's fixed cost per call, not the arithmetic, was most of the per-instant
accounting: a pass now costs a few calls per table, not some forty per instant.

Bit for bit: every term is computed with the same IEEE operations in the same order as the scalar code
(``ServicesMixin._serve_each``; elementwise ``+ - * /``, ``min``/``max``, ``ceil`` and comparisons are
exact in numpy as in Python; no transcendental function is vectorised: the demand's ``cos`` is evaluated
with ``math`` once per instant and distinct peak hour), and every KPI sum is a sequential left fold over
the terms in the scalar loop's order (``np.add.accumulate`` runs strictly left to right; ``np.sum``'s
pairwise summation would round differently). tests/host/test_serve_table.py checks both against each other.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from rackscale.host import serving
from rackscale.host.kpis import KpiAccumulator
from rackscale.host.serve_table import COLUMNS, LLM_COLUMNS, ServeTable
from rackscale.llm.job_plans import LOAD_LEVELS

LOG100 = math.log(100.0)  # the p99 of an exponential sojourn is ln(100) / rate (serving.p99_latency_s)

_USED = COLUMNS.index("peak_hour")  # the columns a pass reads (those before it)

F64 = NDArray[np.float64]
Run = tuple[ServeTable, Sequence[float], Sequence[float]]
"""A run of instants over one table: (table, the intervals' lengths, their midpoints), in time order."""


def fold(start: float, terms: F64) -> float:
    """``start + terms[0] + terms[1] + ...``, left to right (a Python loop of ``+=`` adds the same)."""
    if terms.size == 0:
        return start
    return float(np.add.accumulate(np.concatenate(([start], terms)))[-1])


def _folds(starts: Sequence[float], terms: Sequence[F64]) -> list[float]:
    """:func:`fold` of several sums at once: sum ``k`` is ``starts[k]`` then ``terms[k]``, added left to
    right by ``np.add.accumulate`` along each row.

    A term a sum skips (a service whose p99 missed its SLO, say) is +0.0 there: adding +0.0 leaves any sum
    unchanged, since a sum that starts at +0.0 is never -0.0 (x + y is -0.0 only when both are -0.0)."""
    sums = np.empty((len(starts), terms[0].size + 1))
    sums[:, 0] = starts
    for k, x in enumerate(terms):
        sums[k, 1:] = x
    out: list[float] = np.add.accumulate(sums, axis=1)[:, -1].tolist()
    return out


def _fold_into(kpi: KpiAccumulator, names: Sequence[str], terms: Sequence[F64]) -> None:
    """:func:`_folds` of the accumulator's sums ``names``, written back to them."""
    for name, total in zip(names, _folds([getattr(kpi, n) for n in names], terms), strict=True):
        setattr(kpi, name, total)


_LLM_SUMS = (
    "user_tokens",
    "user_tok_s_tokens",
    "ttft_weight_finite",
    "ttft_s_weighted",
    "interactivity_weight",
    "interactivity_met_weight",
    "ttft_weight",
    "ttft_met_weight",
)


def serve_vector(t: ServeTable, kpi: KpiAccumulator, dt: float, t_mid: float) -> None:
    """Add one interval of every service in ``t`` to ``kpi``, as ``ServicesMixin._serve_each`` would."""
    serve_runs([(t, [dt], [t_mid])], kpi)


def serve_runs(runs: Sequence[Run], kpi: KpiAccumulator) -> None:
    """Add every interval of ``runs`` (in time order) to ``kpi``, as that many calls of
    ``ServicesMixin._serve_each`` would, in one pass."""
    cols: list[F64] = []
    waves: list[F64] = []
    dts: list[F64] = []
    lcols: list[F64] = []
    lidx: list[NDArray[np.intp]] = []
    at = 0  # where the run's first (instant, service) pair is in the flat arrays
    for t, run_dts, mids in runs:
        n, k = len(t.names), len(run_dts)
        if not n or not k:
            continue
        cols.append(np.tile(t.cols[:_USED], k))  # (columns, k * n): instant by instant, services in name order
        # The wave per (instant, distinct peak hour) with ``math.cos``, as the scalar code, then per service.
        w = np.array([[serving.daily_wave(h, m) for h in t.peak_hours] for m in mids], dtype=np.float64)
        waves.append(w[:, t.wave].ravel())
        dts.append(np.repeat(np.array(run_dts, dtype=np.float64), n))
        if t.service.size:
            lcols.append(np.tile(t.lcols, k))
            lidx.append(((at + n * np.arange(k, dtype=np.intp))[:, None] + t.service).ravel())
        at += k * n
    if not cols:
        return
    c = np.concatenate(cols, axis=1) if len(cols) > 1 else cols[0]
    peak, trough, capacity, replicas, tokens_per_request, slo, mu = c
    wave = np.concatenate(waves)
    dt = np.concatenate(dts)
    demand = peak * (trough + (1.0 - trough) * wave)  # serving.demand_tokens_per_s's expression
    served = np.minimum(demand, capacity) * dt
    weight = demand * dt
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lam = demand / replicas / tokens_per_request
        ok = (replicas > 0.0) & (capacity > 0.0)  # else no finite p99 (serving.p99_latency_s)
        p99 = np.where(ok & (lam < mu), LOG100 / (mu - lam), math.inf)
    finite = np.isfinite(p99)
    _fold_into(
        kpi,
        ("tokens", "slo_weight", "slo_met_weight", "overloaded_weight"),
        (served, weight, np.where(p99 <= slo, weight, 0.0), np.where(finite, 0.0, weight)),
    )
    worst = float(np.where(finite, p99, -math.inf).max())
    if worst > -math.inf:
        kpi.worst_p99_latency_s = max(kpi.worst_p99_latency_s, worst)
    if lidx:
        lc = np.concatenate(lcols, axis=1) if len(lcols) > 1 else lcols[0]
        s = np.concatenate(lidx) if len(lidx) > 1 else lidx[0]
        _serve_llm(lc, kpi, s=s, demand=demand, capacity=capacity, served=served, weight=weight)


def _serve_llm(
    lc: F64, kpi: KpiAccumulator, *, s: NDArray[np.intp], demand: F64, capacity: F64, served: F64, weight: F64
) -> None:
    """``ServicesMixin._serve_llm`` with ``ReplicaServing.at_load`` for every (instant, LLM group) at once:
    ``lc`` their numbers (``LLM_COLUMNS`` then the steps), ``s`` their (instant, service) pairs."""
    share, emitted, prefill_share, prefill_s, inter_slo, ttft_slo = lc[: len(LLM_COLUMNS)]
    steps = lc[len(LLM_COLUMNS) :]  # (LOAD_LEVELS, pairs)
    has_inter, has_ttft = ~np.isnan(inter_slo), ~np.isnan(ttft_slo)
    tokens = served[s]
    w = weight[s]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        load = demand[s] / capacity[s]
        x = np.minimum(np.maximum(load, 0.0), 1.0)
        level = np.maximum(1.0, np.ceil(x * LOAD_LEVELS)).astype(np.intp) - 1
        step = steps[level, np.arange(level.size)]
        inter = emitted / step * (1.0 - x * prefill_share)
        ttft = np.where(load < 1.0, (prefill_s + step) / (1.0 - load), math.inf)
        tf = np.isfinite(ttft)
        ws = w * share
        terms = (
            tokens * share,
            inter * tokens * share,
            np.where(tf, ws, 0.0),
            np.where(tf, ttft * w * share, 0.0),
            np.where(has_inter, ws, 0.0),
            np.where(has_inter & (inter >= inter_slo), ws, 0.0),
            np.where(has_ttft, ws, 0.0),
            np.where(has_ttft & (ttft <= ttft_slo), ws, 0.0),
        )
    _fold_into(kpi, _LLM_SUMS, terms)


__all__ = ["LOG100", "Run", "fold", "serve_runs", "serve_vector"]
