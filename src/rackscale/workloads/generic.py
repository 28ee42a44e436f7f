"""rackscale's own generic trace format: CSV or JSONL with the columns of :data:`GENERIC_COLUMNS`
(:func:`load_generic`).

An I/O edge module: it reads files. Every bad row becomes a :class:`SpecProblem` carrying its line; the
loader skips it or raises one :class:`SpecError` listing all. What every trace loader shares lives in
:mod:`~rackscale.workloads.trace_load` (the result and the options) and :mod:`~rackscale.workloads.trace_rows`
(reading files, checking rows); it is imported from here too, where the other loaders import it from.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Literal

from rackscale.model.spec_errors import SpecError, SpecProblem
from rackscale.model.specs import job_from_dict
from rackscale.model.workload import BUILTIN_PRIORITY_CLASSES, JobKind, JobSpec, Level, Resources, TopologyConstraint
from rackscale.workloads.trace_load import ON_ERROR_VALUES, OnError, TraceLoad, TraceOptions
from rackscale.workloads.trace_rows import CsvTable, RowCheck, gpu_models, open_csv, read_text

__all__ = [
    "GENERIC_COLUMNS",
    "GENERIC_REQUIRED",
    "ON_ERROR_VALUES",
    "CsvTable",
    "OnError",
    "RowCheck",
    "TraceLoad",
    "TraceOptions",
    "gpu_models",
    "load_generic",
    "open_csv",
    "read_text",
]

GENERIC_COLUMNS: tuple[str, ...] = (
    "name", "kind", "submit_time", "duration", "gpus", "gpu_milli", "cpu_milli", "memory_mib", "queue", "priority",
    "gpu_models",
)  # fmt: skip
GENERIC_REQUIRED: tuple[str, ...] = ("name", "kind", "submit_time", "gpus")
_KINDS = tuple(k.value for k in JobKind)
_BIG = 1 << 62  # bound of cpu_milli and memory_mib: no real node comes near
_TOPOLOGY = {  # what the builders give each kind
    "training": TopologyConstraint(),
    "inference": TopologyConstraint(required=Level.RACK, preferred=Level.RACK),
    "batch": TopologyConstraint(required=None, preferred=None),
}


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
