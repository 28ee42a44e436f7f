"""The running services' constants for the per-instant serving accounting, kept as arrays in name order.

``ServicesMixin._serve`` runs at every instant of a simulation, over every running service: at a hundred
services and two million instants it was 70 % of the million-job run. Its per-service constants (capacity,
replicas, the M/M/1 service rate, the LLM replica groups) change only when a service starts, stops or is
rescaled, so they are kept here (:class:`ServeTable`: one column per service, one per LLM replica group),
and :mod:`rackscale.host.serve_pass` computes the instants' terms with numpy.

At the million's scale a service starts or stops about every tenth instant, so a new table is mostly the
last one with one service more or less: :func:`next_table` splices the changed services' columns into the
last table's arrays (a few numpy calls) rather than converting every service again (:func:`full_table`,
the reference it must equal: tests/host/test_serve_table.py checks it at every instant of a run).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
from numpy.typing import NDArray

from rackscale.host.runs import JobRun
from rackscale.llm.job_plans import LOAD_LEVELS
from rackscale.llm.jobs import ReplicaServing
from rackscale.model.running import RunningJob
from rackscale.model.workload import JobSpec, ServingProfile

VECTOR_MIN = 24  # below this many services the scalar loop is faster than numpy's per-call overhead
SPLICE_MAX = 8  # at most this many changed services are spliced into the last table; more: a full build

F64 = NDArray[np.float64]
Groups = Mapping[str, tuple[tuple[ReplicaServing, int], ...]]

# A service's numbers, one row of ``ServeTable.cols`` each, in this order (``Row.vec``).
COLUMNS = ("peak", "trough", "capacity", "replicas", "tokens_per_request", "slo", "mu", "peak_hour", "llm_rows")
# Each LLM replica group's numbers, one row of ``ServeTable.lcols`` each (``Row.llm_vec``, the groups one
# after another): its share of the service's replicas, the SLOs (nan: none), then its decode step at each
# of the LOAD_LEVELS load levels.
LLM_COLUMNS = ("share", "emitted", "prefill_share", "prefill_s", "inter_slo", "ttft_slo")
LLM_WIDTH = len(LLM_COLUMNS) + LOAD_LEVELS
_LLM_ROWS = COLUMNS.index("llm_rows")
_PEAK_HOUR = COLUMNS.index("peak_hour")


@dataclass(frozen=True, slots=True)
class Row:
    """One service's constants, and what they were computed from (reused while all of it is the same)."""

    run: JobRun
    rj: RunningJob | None
    replica_tps: float
    groups: tuple[tuple[ReplicaServing, int], ...] | None
    vec: tuple[float, ...]  # ``COLUMNS``
    llm_vec: tuple[float, ...]  # ``LLM_WIDTH`` per LLM replica group
    vector: bool  # its LLM groups know their step at every load level (else the scalar loop is used)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeTable:
    """The running services' constants, in name order. ``version``, ``names`` and ``running`` are what it
    was built from (the version of the services' capacities, and the running jobs by identity);
    ``vector``: False when some service cannot be vectorised (the scalar loop is used)."""

    version: int
    names: tuple[str, ...]
    running: list[RunningJob | None]
    rows: tuple[Row, ...]
    vector: bool
    cols: F64  # (len(COLUMNS), services), each row contiguous
    lcols: F64  # (LLM_WIDTH, LLM groups): the groups of the services in name order, each in its order
    peak_hours: tuple[float, ...]  # the distinct peak hours: the wave is computed once for each
    wave: NDArray[np.intp]  # each service's peak hour (index into ``peak_hours``)
    service: NDArray[np.intp]  # each LLM group's service (index into the services)

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
    llm: list[tuple[float, ReplicaServing, float, float]] = []
    if r.spec.llm is not None and valid and gs:
        total = sum(n for _, n in gs)
        inter, ttft = r.spec.llm.interactivity_slo, r.spec.llm.ttft_slo_s
        for served, n in gs:
            llm.append((n / total, served, math.nan if inter is None else inter, math.nan if ttft is None else ttft))
    vec = (
        prof.peak_tokens_per_s,
        prof.trough_fraction,
        capacity,
        float(replicas),
        prof.tokens_per_request,
        prof.slo_p99_s,
        capacity / replicas / prof.tokens_per_request if valid else 0.0,  # mu, requests/s per replica
        prof.peak_hour,
        float(len(llm)),
    )
    llm_vec = tuple(
        v
        for share, s, inter_slo, ttft_slo in llm
        for v in (share, s.emitted, s.prefill_share, s.prefill_s, inter_slo, ttft_slo, *s.level_steps)
    )
    vector = all(len(s.level_steps) == LOAD_LEVELS for _, s, _, _ in llm)
    return Row(r, rj, r.replica_tps, gs, vec, llm_vec, vector)


@dataclass(frozen=True, slots=True, kw_only=True)
class Inputs:
    """What a table is built from: the running services' runs and jobs, profiles and LLM replica groups.
    ``rows``: each service's constants from earlier builds, reused while what they were computed from is
    the same, updated by the builds (services no longer named are dropped by a full build)."""

    runs: Mapping[str, JobRun]
    running: Mapping[str, RunningJob]
    profile_of: Callable[[JobSpec], ServingProfile]
    groups: Groups
    rows: dict[str, Row]

    def row(self, name: str, rj: RunningJob | None) -> Row:
        r = self.runs[name]
        row = self.rows.get(name)
        if (
            row is None
            or row.run is not r
            or row.rj is not rj
            or row.replica_tps != r.replica_tps
            or row.groups is not self.groups.get(name)
        ):
            row = self.rows[name] = _row(name, r, rj, self.profile_of(r.spec), self.groups)
        return row


def full_table(version: int, names: Sequence[str], inputs: Inputs) -> ServeTable:
    """The table of ``names`` (sorted), every service converted (the reference :func:`next_table` equals)."""
    cache = inputs.rows
    rjs = [inputs.running.get(n) for n in names]
    got = [inputs.row(name, rj) for name, rj in zip(names, rjs, strict=True)]
    if len(cache) > len(got):
        for gone in set(cache) - set(names):
            del cache[gone]
    n = len(got)
    cols = np.fromiter(chain.from_iterable(row.vec for row in got), np.float64, n * len(COLUMNS))
    m = sum(len(row.llm_vec) for row in got) // LLM_WIDTH
    vector = all(row.vector for row in got)
    lcols = np.fromiter(chain.from_iterable(row.llm_vec for row in got), np.float64, m * LLM_WIDTH) if vector else None
    return _table(version, tuple(names), rjs, tuple(got), vector, cols.reshape(n, len(COLUMNS)).T, lcols, m)


def _table(
    version: int,
    names: tuple[str, ...],
    rjs: list[RunningJob | None],
    rows: tuple[Row, ...],
    vector: bool,
    cols: F64,
    flat_lcols: F64 | None,
    m: int,
) -> ServeTable:
    """A table over ``cols`` (a row per column) and the LLM groups' numbers (``flat_lcols``, group by
    group; None when not ``vector``)."""
    cols = np.ascontiguousarray(cols)
    peak_hour = cols[_PEAK_HOUR]
    if len(peak_hour) and (peak_hour == peak_hour[0]).all():  # one peak hour (the common case): no sort
        hours, wave = peak_hour[:1], np.zeros(len(names), dtype=np.intp)
    else:
        hours, wave = np.unique(peak_hour, return_inverse=True)
    if flat_lcols is None or not vector:
        lcols = np.empty((LLM_WIDTH, 0))
        service = np.empty(0, dtype=np.intp)
        vector = False
    else:
        lcols = np.ascontiguousarray(flat_lcols.reshape(m, LLM_WIDTH).T)
        service = np.repeat(np.arange(len(names), dtype=np.intp), cols[_LLM_ROWS].astype(np.intp))
    return ServeTable(
        version=version,
        names=names,
        running=rjs,
        rows=rows,
        vector=vector,
        cols=cols,
        lcols=lcols,
        peak_hours=tuple(hours.tolist()),
        wave=wave.astype(np.intp).reshape(len(names)),
        service=service,
    )


def next_table(
    last: ServeTable | None, *, version: int, names: Sequence[str], inputs: Inputs, rescaled: Collection[str]
) -> ServeTable:
    """The table of ``names`` (sorted), as :func:`full_table` gives it. ``last``: the table before, and
    ``rescaled``: the services whose capacity was recomputed since (``ServicesMixin._rescale``: the only
    writer of a run's ``replica_tps`` and LLM groups). The services before and after the changed ones (same
    name, same running job, not rescaled) keep their rows, so their columns are copied as they are and
    only the changed ones are converted; too many changes (or a scalar one), a full build."""
    rjs = [inputs.running.get(n) for n in names]
    if last is None or not last.vector:
        return full_table(version, names, inputs)
    old_names, old_rjs = last.names, last.running
    # The unchanged head and tail: same names, same running jobs (by identity).
    head = 0
    for a, b, x, y in zip(old_names, names, old_rjs, rjs, strict=False):
        if a != b or x is not y:
            break
        head += 1
    tail = 0
    limit = min(len(old_names), len(names)) - head
    while tail < limit and old_names[-1 - tail] == names[-1 - tail] and old_rjs[-1 - tail] is rjs[-1 - tail]:
        tail += 1
    new_end = len(names) - tail
    if new_end - head > SPLICE_MAX or not set(rescaled) <= set(names[head:new_end]):
        return full_table(version, names, inputs)
    middle = [inputs.row(name, rj) for name, rj in zip(names[head:new_end], rjs[head:new_end], strict=True)]
    if not all(row.vector for row in middle):
        return full_table(version, names, inputs)
    for gone in set(old_names[head : len(old_names) - tail]) - set(names):
        inputs.rows.pop(gone, None)
    old_end = len(old_names) - tail
    counts = last.cols[_LLM_ROWS]
    l_head = int(counts[:head].sum())
    l_end = l_head + int(counts[head:old_end].sum())
    k = len(middle)
    block = np.fromiter(chain.from_iterable(row.vec for row in middle), np.float64, k * len(COLUMNS))
    cols = np.concatenate((last.cols[:, :head], block.reshape(k, len(COLUMNS)).T, last.cols[:, old_end:]), axis=1)
    lblock = np.fromiter(chain.from_iterable(row.llm_vec for row in middle), np.float64)
    flat = last.lcols.T.ravel()  # group by group, as ``_table`` takes them
    lflat = np.concatenate((flat[: l_head * LLM_WIDTH], lblock, flat[l_end * LLM_WIDTH :]))
    rows = last.rows[:head] + tuple(middle) + last.rows[old_end:]
    return _table(version, tuple(names), rjs, rows, True, cols, lflat, len(lflat) // LLM_WIDTH)


__all__ = [
    "COLUMNS",
    "LLM_COLUMNS",
    "LLM_WIDTH",
    "VECTOR_MIN",
    "Inputs",
    "Row",
    "ServeTable",
    "full_table",
    "next_table",
]
