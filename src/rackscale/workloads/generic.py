"""What every trace loader shares (:class:`TraceLoad`, the options, reading rows with their line numbers), and
rackscale's own generic trace format: CSV or JSONL with the columns of :data:`GENERIC_COLUMNS`.

An I/O edge module: it reads files. Rows are parsed with the ``csv`` module and checked by hand (no
pydantic per row), so that a trace of 100k rows loads in a fraction of a second. Every bad row becomes a
:class:`SpecProblem` carrying its line; the loader skips it or raises one :class:`SpecError` listing all.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol, TypeVar

from rackscale.model.spec_docs import MAX_UNITS
from rackscale.model.spec_errors import SpecError, SpecProblem
from rackscale.model.specs import job_from_dict
from rackscale.model.workload import BUILTIN_PRIORITY_CLASSES, JobKind, JobSpec, Level, Resources, TopologyConstraint

__all__ = ["GENERIC_COLUMNS", "GENERIC_REQUIRED", "OnError", "TraceLoad", "TraceOptions", "load_generic"]

OnError = Literal["skip", "reject"]
ON_ERROR_VALUES: tuple[str, ...] = ("skip", "reject")
GENERIC_COLUMNS: tuple[str, ...] = (
    "name", "kind", "submit_time", "duration", "gpus", "gpu_milli", "cpu_milli", "memory_mib", "queue", "priority",
    "gpu_models",
)  # fmt: skip
GENERIC_REQUIRED: tuple[str, ...] = ("name", "kind", "submit_time", "gpus")
_KINDS = tuple(k.value for k in JobKind)
_T = TypeVar("_T")
_BIG = 1 << 62  # bound of cpu_milli and memory_mib: no real node comes near
_TOPOLOGY = {  # what the builders give each kind
    "training": TopologyConstraint(),
    "inference": TopologyConstraint(required=Level.RACK, preferred=Level.RACK),
    "batch": TopologyConstraint(required=None, preferred=None),
}


class _Reader(Protocol):
    """What ``csv.reader`` returns."""

    line_num: int

    def __next__(self) -> list[str]: ...


# --------------------------------------------------------------------------------------------- results
@dataclass(frozen=True, slots=True)
class TraceLoad:
    """The jobs read from a trace, sorted by submit time, and the rows skipped (each with its line and why)."""

    jobs: tuple[JobSpec, ...]
    skipped: tuple[SpecProblem, ...]
    source: str

    def skipped_lines(self) -> list[str]:
        """One text line per skipped row: ``file:line: column: why (fix: ...)``."""
        return [p.render(self.source) for p in self.skipped]


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceOptions:
    """The knobs every job loader takes (see docs/workloads.md)."""

    on_error: str = "skip"
    gpu_scale: float = 1.0
    arrival_scale: float = 1.0
    time_window: tuple[float, float] | None = None
    max_jobs: int | None = None
    tenant_map: Mapping[str, str] | None = None

    def check(self) -> None:
        """Raise :class:`SpecError` naming every option with a bad value."""
        bad: list[SpecProblem] = []
        if self.on_error not in ON_ERROR_VALUES:
            bad.append(SpecProblem(("on_error",), f"unknown value {self.on_error!r}", 'use "skip" or "reject"'))
        for key, value in (("gpu_scale", self.gpu_scale), ("arrival_scale", self.arrival_scale)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not (0 < value < math.inf):
                bad.append(SpecProblem((key,), f"must be a finite number > 0, got {value!r}", "e.g. 2.0 or 0.5"))
        if self.time_window is not None:
            window = self.time_window
            ok = isinstance(window, tuple | list) and len(window) == 2
            ok = ok and all(isinstance(v, int | float) and not isinstance(v, bool) for v in window)
            if not ok or not (0 <= window[0] < window[1]):
                fix = "give (start, end) in seconds of the trace's clock, 0 <= start < end (end may be math.inf)"
                bad.append(SpecProblem(("time_window",), f"invalid window {self.time_window!r}", fix))
        if self.max_jobs is not None and (
            isinstance(self.max_jobs, bool) or not isinstance(self.max_jobs, int) or self.max_jobs < 0
        ):
            bad.append(SpecProblem(("max_jobs",), f"must be a whole number >= 0, got {self.max_jobs!r}", "or None"))
        if bad:
            raise SpecError(bad, "trace options")

    def scale_gpus(self, gpus: int) -> int:
        """``gpus`` x ``gpu_scale``, rounded half up, at least 1."""
        if self.gpu_scale == 1.0:
            return gpus
        return max(1, int(gpus * self.gpu_scale + 0.5))

    def queue(self, name: str) -> str:
        return self.tenant_map.get(name, name) if self.tenant_map else name

    def arrange(self, records: list[tuple[float, _T]]) -> list[tuple[int, float, _T]]:
        """Sort ``(trace time, item)`` records by time (stable: file order breaks ties), keep the window and
        ``max_jobs``; give ``(rank in the whole trace from 1, submit time, item)``.

        The submit time counts from the window's start (0 without a window), divided by ``arrival_scale``.
        """
        records.sort(key=_first)
        lo, hi = self.time_window if self.time_window is not None else (0.0, math.inf)
        origin = lo if self.time_window is not None else 0.0
        scale, cap = self.arrival_scale, self.max_jobs
        out: list[tuple[int, float, _T]] = []
        if cap == 0:
            return out
        for rank, (t, item) in enumerate(records, 1):
            if t < lo:
                continue
            if t >= hi:
                break
            out.append((rank, (t - origin) / scale if scale != 1.0 else t - origin, item))
            if cap is not None and len(out) >= cap:
                break
        return out

    def finish(self, source: str, jobs: Sequence[JobSpec], problems: Sequence[SpecProblem]) -> TraceLoad:
        if problems and self.on_error == "reject":
            raise SpecError(problems, source)
        return TraceLoad(tuple(jobs), tuple(problems), source)


def _first(record: tuple[float, object]) -> float:
    return record[0]


# --------------------------------------------------------------------------------------------- reading
def read_text(path: str | os.PathLike[str], what: str) -> tuple[str, str]:
    """``(source, text)`` of the file at ``path``; a :class:`SpecError` with a fix if it cannot be read."""
    source = os.fspath(path)
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            return source, f.read()
    except FileNotFoundError:
        fix = f"check the path (relative paths start at {os.getcwd()}); the public traces are in ../shared/traces/"
        problem = SpecProblem((), "file not found", fix)
    except IsADirectoryError:
        problem = SpecProblem((), "is a directory", f"give the path of the {what} file itself")
    except UnicodeDecodeError as err:
        problem = SpecProblem((), f"not UTF-8 text (byte {err.start})", f"save the {what} as UTF-8 text")
    except OSError as err:
        problem = SpecProblem((), f"cannot read: {err.strerror or err}", "check that it is a readable file")
    raise SpecError([problem], source)


@dataclass(slots=True)
class CsvTable:
    """An opened CSV trace: its header's column indexes and the rows still to read."""

    source: str
    columns: dict[str, int]
    width: int
    reader: _Reader
    header_line: int

    def rows(self, problems: list[SpecProblem]) -> Iterator[tuple[int, list[str]]]:
        """``(line, fields)`` of each row; blank lines pass silently, rows of the wrong width are reported."""
        reader = self.reader
        prev, width = self.header_line, self.width
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as err:
                problems.append(SpecProblem((), f"unreadable CSV: {err}", "check the quoting of this row", prev + 1))
                if reader.line_num == prev:
                    return
                prev = reader.line_num
                continue
            line, prev = prev + 1, reader.line_num
            if len(row) != width:
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                fix = "give one value per header column (empty for an optional one); quote values with commas"
                problems.append(SpecProblem((), f"has {len(row)} fields, the header has {width}", fix, line))
                continue
            yield line, row


def open_csv(
    path: str | os.PathLike[str],
    *,
    what: str,
    required: Sequence[str],
    known: Sequence[str] | None = None,
) -> CsvTable:
    """Read the header of a CSV trace; a missing required column (or, with ``known``, an unknown one) is a
    :class:`SpecError` at the header's line."""
    source, text = read_text(path, what)
    reader = csv.reader(io.StringIO(text, newline=""))
    example = ",".join(known or required)
    try:
        header = next(reader, None)
        while header is not None and not any(h.strip() for h in header):
            header = next(reader, None)
    except csv.Error as err:
        raise SpecError(
            [SpecProblem((), f"unreadable CSV header: {err}", f"start with: {example}", 1)], source
        ) from None
    if header is None:
        raise SpecError([SpecProblem((), "empty file: no header line", f"start with the header: {example}")], source)
    line = reader.line_num
    names = [h.strip() for h in header]
    problems: list[SpecProblem] = []
    missing = [c for c in required if c not in names]
    if missing:
        plural = "s" if len(missing) > 1 else ""
        fix = f"the {what} header is {example} (this one is {','.join(names)})"
        problems.append(SpecProblem((), f"the header lacks the column{plural} {', '.join(missing)}", fix, line))
    for name in names:
        if known is not None and name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            fix = f"{hint}the {what} columns are {', '.join(known)}"
            problems.append(SpecProblem((name,), "unknown column", fix, line))
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(SpecProblem((name,), "the header names this column twice", "keep one of them", line))
    if problems:
        raise SpecError(problems, source)
    return CsvTable(source, {n: i for i, n in enumerate(names)}, len(names), reader, line)


# --------------------------------------------------------------------------------------------- values
class RowCheck:
    """Reads the values of one row, recording one problem per bad value (``ok`` turns False).

    Each reader returns ``None`` for an absent value (empty, or a missing JSON key) and for a bad one; an
    absent ``required`` value is a problem too, so ``ok`` tells the two apart.
    """

    __slots__ = ("line", "ok", "problems")

    def __init__(self, line: int, problems: list[SpecProblem]) -> None:
        self.line = line
        self.problems = problems
        self.ok = True

    def fail(self, column: str, message: str, fix: str = "") -> None:
        self.ok = False
        self.problems.append(SpecProblem((column,) if column else (), message, fix, self.line))

    def _absent(self, column: str, value: object, required: bool) -> bool:
        if value is None or (isinstance(value, str) and not value.strip()):
            if required:
                self.fail(column, "missing value", f"give a value for {column}")
            return True
        return False

    def text(self, column: str, value: object, *, required: bool = True) -> str | None:
        if self._absent(column, value, required):
            return None
        if not isinstance(value, str):
            self.fail(column, f"must be text, got {value!r}", f"write {column} as a string")
            return None
        return value.strip()

    def number(self, column: str, value: object, *, required: bool = True, negative: str = "") -> float | None:
        """A finite number >= 0 (``negative``: the message for one < 0)."""
        if self._absent(column, value, required):
            return None
        try:
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise ValueError
            x = float(value)
        except (ValueError, OverflowError):
            self.fail(column, f"not a number: {value!r}", f"write {column} as a plain number, e.g. 3600")
            return None
        if not math.isfinite(x):
            self.fail(column, f"not a finite number: {value!r}", f"write {column} as a plain number")
            return None
        if x < 0:
            self.fail(column, negative or f"must be >= 0, got {value!r}", f"{column} cannot be negative")
            return None
        return x

    def whole(
        self, column: str, value: object, *, required: bool = True, low: int = 0, high: int = MAX_UNITS
    ) -> int | None:
        """A whole number in ``low..high`` (``8`` or ``8.0``)."""
        x = self.number(column, value, required=required)
        if x is None:
            return None
        if not x.is_integer():
            self.fail(column, f"must be a whole number, got {value!r}", "drop the fraction")
            return None
        if not low <= x <= high:
            self.fail(column, f"must be in {low}..{high}, got {value!r}", f"use a value from {low} to {high}")
            return None
        return int(x)


def gpu_models(value: object, check: RowCheck, column: str) -> frozenset[str] | None:
    """``'A|B'`` (or a JSON list) -> ``frozenset({'A', 'B'})``; empty -> ``None`` (any model)."""
    if value is None:
        return None
    if isinstance(value, str):
        names = [s.strip() for s in value.split("|")]
    elif isinstance(value, list) and all(isinstance(s, str) for s in value):
        names = [s.strip() for s in value]
    else:
        check.fail(column, f"must be model names separated by '|', got {value!r}", "e.g. V100M16|V100M32")
        return None
    models = frozenset(n for n in names if n)
    return models or None


# --------------------------------------------------------------------------------------------- generic
def load_generic(
    path: str | os.PathLike[str],
    *,
    format: Literal["csv", "jsonl"] | None = None,
    on_error: OnError = "skip",
    gpu_scale: float = 1.0,
    arrival_scale: float = 1.0,
    time_window: tuple[float, float] | None = None,
    max_jobs: int | None = None,
    tenant_map: Mapping[str, str] | None = None,
) -> TraceLoad:
    """Read a generic trace: CSV with the header :data:`GENERIC_COLUMNS` (``name,kind,submit_time,gpus``
    required), or JSONL with one job per line (the same keys, or a job document of the YAML job spec).

    ``format`` ``None``: ``.jsonl``/``.ndjson`` files and files starting with ``{`` are JSONL, others CSV.
    """
    opts = TraceOptions(
        on_error=on_error,
        gpu_scale=gpu_scale,
        arrival_scale=arrival_scale,
        time_window=time_window,
        max_jobs=max_jobs,
        tenant_map=tenant_map,
    )
    opts.check()
    if format not in (None, "csv", "jsonl"):
        raise SpecError([SpecProblem(("format",), f"unknown format {format!r}", 'use "csv", "jsonl" or None')])
    if format is None:
        suffix = os.fspath(path).lower().rsplit(".", 1)[-1]
        if suffix in ("jsonl", "ndjson"):
            format = "jsonl"
        elif suffix != "csv":
            source, text = read_text(path, "trace")
            format = "jsonl" if text.lstrip().startswith("{") else "csv"
    problems: list[SpecProblem] = []
    records: list[tuple[float, JobSpec]] = []
    seen: dict[str, int] = {}
    if format == "jsonl":
        source, text = read_text(path, "JSONL trace")
        for line, doc in _json_lines(text, problems):
            _keep(_generic_job(doc, line, problems, opts), line, seen, records, problems)
    else:
        table = open_csv(path, what="generic CSV trace", required=GENERIC_REQUIRED, known=GENERIC_COLUMNS)
        source, cols = table.source, list(table.columns.items())
        for line, row in table.rows(problems):
            doc = {name: row[i] for name, i in cols}
            _keep(_generic_row(doc, RowCheck(line, problems), opts), line, seen, records, problems)
    jobs = [job if t == job.submit_time else replace(job, submit_time=t) for _, t, job in opts.arrange(records)]
    return opts.finish(source, jobs, problems)


def _json_lines(text: str, problems: list[SpecProblem]) -> Iterator[tuple[int, Mapping[str, object]]]:
    for line, raw in enumerate(io.StringIO(text, newline=""), 1):
        if not raw.strip():
            continue
        try:
            doc = json.loads(raw)
        except (json.JSONDecodeError, RecursionError) as err:
            msg = f"{err.msg} at column {err.colno}" if isinstance(err, json.JSONDecodeError) else "nested too deeply"
            problems.append(SpecProblem((), f"invalid JSON: {msg}", "write one JSON object per line", line))
            continue
        if not isinstance(doc, dict):
            fix = 'write one job object per line, e.g. {"name": "j1", "kind": "training", "submit_time": 0, "gpus": 8}'
            problems.append(SpecProblem((), f"expected a JSON object, got {type(doc).__name__}", fix, line))
            continue
        yield line, doc


def _keep(
    job: JobSpec | None,
    line: int,
    seen: dict[str, int],
    records: list[tuple[float, JobSpec]],
    problems: list[SpecProblem],
) -> None:
    if job is None:
        return
    if job.name in seen:
        msg = f"job name {job.name!r} is already used on line {seen[job.name]}"
        problems.append(SpecProblem(("name",), msg, "give every job its own name", line))
        return
    seen[job.name] = line
    records.append((job.submit_time, job))


def _generic_job(
    doc: Mapping[str, object], line: int, problems: list[SpecProblem], opts: TraceOptions
) -> JobSpec | None:
    """A JSONL line: generic keys only -> a generic row; anything else -> a YAML-spec job document."""
    if set(doc) <= set(GENERIC_COLUMNS):
        return _generic_row(doc, RowCheck(line, problems), opts)
    try:
        job = job_from_dict(doc)
    except SpecError as err:
        problems.extend(replace(p, line=line) for p in err.problems)
        return None
    unit = job.unit
    if job.kind is JobKind.TRAINING:
        job = replace(job, units=opts.scale_gpus(job.units))
    elif unit.gpus:
        job = replace(job, unit=replace(unit, gpus=opts.scale_gpus(unit.gpus)))
    return replace(job, queue=opts.queue(job.queue))


def _generic_row(doc: Mapping[str, object], check: RowCheck, opts: TraceOptions) -> JobSpec | None:
    """One generic row (CSV fields are strings; JSONL values may be numbers) as a job, or None if bad."""
    name = check.text("name", doc.get("name"))
    kind = check.text("kind", doc.get("kind"))
    if kind is not None and kind not in _KINDS:
        check.fail("kind", f"unknown kind {kind!r}", f"use one of: {', '.join(_KINDS)}")
    submit = check.number("submit_time", doc.get("submit_time"), negative="negative submit_time")
    duration = check.number("duration", doc.get("duration"), required=False, negative="negative duration")
    gpus = check.whole("gpus", doc.get("gpus"))
    milli = check.whole("gpu_milli", doc.get("gpu_milli"), required=False, high=999)
    cpu = check.whole("cpu_milli", doc.get("cpu_milli"), required=False, high=_BIG)
    mem = check.whole("memory_mib", doc.get("memory_mib"), required=False, high=_BIG)
    queue = check.text("queue", doc.get("queue"), required=False)
    priority = _priority(doc.get("priority"), check)
    models = gpu_models(doc.get("gpu_models"), check, "gpu_models")
    if not check.ok or name is None or kind is None or submit is None or gpus is None:
        return None
    milli, cpu, mem = milli or 0, cpu or 0, mem or 0
    if milli and gpus > 1:
        check.fail("gpu_milli", f"a GPU share needs gpus 0 or 1, got gpus {gpus}", "set gpus to 0, or drop gpu_milli")
    elif kind == "training" and (milli or not gpus):
        check.fail("gpus", "a training job needs whole GPUs (gpus >= 1, no gpu_milli)", "e.g. gpus 8, gpu_milli empty")
    elif kind == "inference" and not (gpus or milli):
        check.fail("gpus", "an inference job with no GPU", "set gpus >= 1, or gpu_milli for a shared GPU")
    elif not (gpus or milli or cpu or mem):
        check.fail("gpus", "the job asks for nothing", "set gpus, gpu_milli, or cpu_milli/memory_mib for a CPU task")
    if not check.ok:
        return None
    whole = 0 if milli else opts.scale_gpus(gpus) if gpus else 0
    # What the builders `training`, `inference` and `batch` give, built directly (they cost 3x more).
    training = kind == "training"
    return JobSpec(
        name=name,
        kind=JobKind(kind),
        unit=Resources(
            gpus=1 if training else whole, gpu_milli=milli, cpu_milli=cpu, memory_mib=mem, gpu_models=models
        ),
        units=whole if training else 1,
        priority=priority,
        queue=opts.queue(queue or "default"),
        topology=_TOPOLOGY[kind],
        duration_estimate_s=duration,
        submit_time=submit,
    )


def _priority(value: object, check: RowCheck) -> int:
    """A whole number, or the name of a built-in priority class; 0 when empty."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return 0
    if isinstance(value, str) and value.strip() in BUILTIN_PRIORITY_CLASSES:
        return BUILTIN_PRIORITY_CLASSES[value.strip()]
    try:
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise ValueError
        number = int(value)
    except ValueError:
        classes = ", ".join(f"{k} ({v})" for k, v in BUILTIN_PRIORITY_CLASSES.items())
        check.fail("priority", f"not a whole number or a priority class: {value!r}", f"use e.g. 100, or: {classes}")
        return 0
    if not -(2**31) <= number < 2**31:
        check.fail("priority", f"out of range: {value!r}", "use a value between -2147483648 and 2147483647")
    return number
