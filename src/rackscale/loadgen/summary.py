"""LoadGen's own account of a run: ``mlperf_log_summary.txt`` and ``mlperf_log_detail.txt`` parsed into a
:class:`LoadGenResult`.

The summary's layout is written by ``PerformanceSummary::LogSummary`` (mlcommons/inference
loadgen/results.cc): ``key : value`` lines, ``Result is : VALID|INVALID``, one ``  X satisfied : Yes|NO``
line per constraint, ``Recommendations:`` and ``Early Stopping Result:`` with `` * `` bullets, then the
latency stats (``99.00 percentile latency (ns)   : N``) and ``Test Parameters Used``. The throughput line
depends on the scenario: ``Scheduled``/``Completed samples per second`` (Server), ``Samples per second``
(Offline), ``QPS w/ loadgen overhead`` (SingleStream). The detail log is ``:::MLLOG {json}`` lines; from it
come the query count and the errors and warnings (``metadata.is_error`` / ``is_warning``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rackscale.model.errors import RackscaleError

MAX_LOG_BYTES = 64 * 1024 * 1024  # a detail log of a long run is a few MiB; more is no LoadGen log
_PERCENTILE = re.compile(r"^(\d+(?:\.\d+)?) percentile latency \(ns\)$")
_TARGET_PERCENTILE = re.compile(r"^(\d+(?:\.\d+)?)th percentile latency \(ns\)$")
_CONSTRAINT = re.compile(r"^(.+?) satisfied\s*:\s*(Yes|NO|Skipped)\s*$")
_MLLOG = ":::MLLOG "


class SummaryError(RackscaleError, ValueError):
    """A log that is missing or is not LoadGen's (the message names the file)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Constraint:
    name: str  # "Performance constraints", "Min duration", "Min queries", "Early stopping"
    satisfied: bool | None  # None: LoadGen skipped it


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadGenResult:
    scenario: str
    mode: str
    valid: bool
    constraints: tuple[Constraint, ...]
    recommendations: tuple[str, ...]  # LoadGen's own words for each unmet constraint
    early_stopping: tuple[str, ...]
    scheduled_qps: float | None = None  # Server
    completed_qps: float | None = None  # Server
    samples_per_second: float | None = None  # Offline
    qps_with_overhead: float | None = None  # SingleStream
    qps_without_overhead: float | None = None  # SingleStream
    target_latency_ns: int | None = None  # SingleStream: the latency at its target percentile
    min_latency_ns: int | None = None
    max_latency_ns: int | None = None
    mean_latency_ns: int | None = None
    percentiles_ns: tuple[tuple[float, int], ...] = ()  # (50.0, ns), (90.0, ns), ...
    query_count: int | None = None  # from the detail log
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    parameters: tuple[tuple[str, str], ...] = ()

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why LoadGen says INVALID: each unmet constraint, with LoadGen's recommendations and early
        stopping verdict; empty for a VALID run."""
        if self.valid:
            return ()
        unmet = [f"{c.name} not satisfied" for c in self.constraints if c.satisfied is False]
        failed_early = any(c.name == "Early stopping" and c.satisfied is False for c in self.constraints)
        return (*unmet, *self.recommendations, *(self.early_stopping if failed_early else ()))

    @property
    def throughput(self) -> float | None:
        """Samples per second that the endpoint served: completed (Server), samples/s (Offline), QPS with
        LoadGen's overhead (SingleStream)."""
        for v in (self.completed_qps, self.samples_per_second, self.qps_with_overhead):
            if v is not None:
                return v
        return None

    def percentile_ns(self, p: float) -> int | None:
        return next((ns for q, ns in self.percentiles_ns if abs(q - p) < 1e-9), None)


def read_log(path: Path) -> str:
    """A LoadGen log's text, bounded (the adapter the tests feed real logs through)."""
    try:
        size = path.stat().st_size
        if size > MAX_LOG_BYTES:
            raise SummaryError(f"{path}: {size:,} bytes: too big for a LoadGen log")
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise SummaryError(f"{path}: LoadGen wrote no such log (did the run start?)") from None
    except OSError as e:
        raise SummaryError(f"{path}: cannot read ({e.strerror or e})") from None


def load_result(summary: Path, detail: Path | None = None) -> LoadGenResult:
    return parse_result(read_log(summary), None if detail is None else read_log(detail), source=str(summary))


def parse_result(summary_text: str, detail_text: str | None = None, *, source: str = "summary") -> LoadGenResult:
    fields: dict[str, str] = {}
    constraints: list[Constraint] = []
    bullets: dict[str, list[str]] = {"Recommendations": [], "Early Stopping Result": []}
    percentiles: list[tuple[float, int]] = []
    parameters: list[tuple[str, str]] = []
    section, block = "", ""
    for raw in summary_text.splitlines():
        line = raw.rstrip()
        if line.startswith("=====") or not line.strip():
            continue
        if line.strip() in ("MLPerf Results Summary", "Additional Stats", "Test Parameters Used"):
            section, block = line.strip(), ""
            continue
        if line.endswith(":") and line[:-1] in bullets:
            block = line[:-1]
            continue
        if block and (line.startswith(" ") or line.startswith("*")):  # a bullet or its continuation
            text = line.strip()
            items = bullets[block]
            if text.startswith("* "):
                items.append(text[2:])
            elif items:
                items[-1] += " " + text
            continue
        block = ""
        if (m := _CONSTRAINT.match(line.strip())) is not None:
            constraints.append(Constraint(name=m[1], satisfied={"Yes": True, "NO": False}.get(m[2])))
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if section == "Test Parameters Used":
            parameters.append((key, value))
        elif (m := _PERCENTILE.match(key)) is not None:
            percentiles.append((float(m[1]), _int(value, key, source)))
        else:
            fields.setdefault(key, value)
    verdict = fields.get("Result is")
    if verdict not in ("VALID", "INVALID"):
        raise SummaryError(f"{source}: no 'Result is : VALID|INVALID' line: not a LoadGen summary")
    target = next((_int(v, k, source) for k, v in fields.items() if _TARGET_PERCENTILE.match(k)), None)
    errors, warnings, queries = _detail(detail_text)
    return LoadGenResult(
        scenario=fields.get("Scenario", ""),
        mode=fields.get("Mode", ""),
        valid=verdict == "VALID",
        constraints=tuple(constraints),
        recommendations=tuple(bullets["Recommendations"]),
        early_stopping=tuple(bullets["Early Stopping Result"]),
        scheduled_qps=_float(fields.get("Scheduled samples per second"), source),
        completed_qps=_float(fields.get("Completed samples per second"), source),
        samples_per_second=_float(fields.get("Samples per second"), source),
        qps_with_overhead=_float(fields.get("QPS w/ loadgen overhead"), source),
        qps_without_overhead=_float(fields.get("QPS w/o loadgen overhead"), source),
        target_latency_ns=target,
        min_latency_ns=_opt_int(fields.get("Min latency (ns)"), source),
        max_latency_ns=_opt_int(fields.get("Max latency (ns)"), source),
        mean_latency_ns=_opt_int(fields.get("Mean latency (ns)"), source),
        percentiles_ns=tuple(percentiles),
        query_count=queries,
        errors=errors,
        warnings=warnings,
        parameters=tuple(parameters),
    )


def _detail(text: str | None) -> tuple[tuple[str, ...], tuple[str, ...], int | None]:
    """Errors, warnings and ``result_query_count`` of a detail log (lines that are not JSON are skipped:
    a log cut short by a crash still gives what it has)."""
    errors: list[str] = []
    warnings: list[str] = []
    queries: int | None = None
    for line in (text or "").splitlines():
        if not line.startswith(_MLLOG):
            continue
        try:
            rec: Any = json.loads(line[len(_MLLOG) :])
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        meta: dict[str, Any] = rec["metadata"] if isinstance(rec.get("metadata"), dict) else {}
        shown = f"{rec.get('key')}: {rec.get('value')}"
        if meta.get("is_error"):
            errors.append(shown)
        elif meta.get("is_warning"):
            warnings.append(shown)
        if rec.get("key") == "result_query_count" and isinstance(rec.get("value"), int):
            queries = rec["value"]
    return tuple(errors), tuple(warnings), queries


def _float(value: str | None, source: str) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        raise SummaryError(f"{source}: {value!r} is not a number") from None


def _int(value: str, key: str, source: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise SummaryError(f"{source}: {key}: {value!r} is not a whole number") from None


def _opt_int(value: str | None, source: str) -> int | None:
    return None if value is None else _int(value, "latency", source)
