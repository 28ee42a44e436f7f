"""The Microsoft Philly 2017 job log (``timestamp,duration,num_gpus,gpu_time,cluster``) as training jobs.

Each row is one training gang of ``num_gpus`` one-GPU workers (as the YAML spec's ``gpusPerWorker: 1``):

- ``submit_time``: seconds since the trace's first ``timestamp`` (read as UTC, ``YYYY-MM-DD HH:MM:SS``);
- ``duration_estimate_s``: ``duration``; ``queue``: the virtual cluster (``cluster``), renamed by ``tenant_map``;
- ``comm``: ``8e8 x sqrt(gpus)`` bytes all-reduced per step with 0.5 s of compute per step (the synthetic
  generator's profile: the model, hence the gradient, grows with the job); checkpoints every 1800 s;
- the name ``philly-NNNNNN`` is the job's rank in submit order over the whole file (ties keep file order),
  so a job keeps its name whatever window or scaling is applied. ``gpu_time`` is not used.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from datetime import datetime

from rackscale.model.spec_docs import MAX_UNITS
from rackscale.model.spec_errors import SpecError, SpecProblem
from rackscale.model.workload import CommProfile, JobKind, JobSpec, Resources, TopologyConstraint
from rackscale.workloads.generic import OnError, RowCheck, TraceLoad, TraceOptions, open_csv

__all__ = ["PHILLY_CHECKPOINT_S", "PHILLY_COLUMNS", "check_philly_file", "load_philly", "philly_comm"]

PHILLY_COLUMNS: tuple[str, ...] = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
_REQUIRED = ("timestamp", "duration", "num_gpus", "cluster")
_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
_SHAPE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", re.ASCII)
_EPOCH = datetime(1970, 1, 1)  # naive datetimes subtracted from it: the timestamps read as UTC
PHILLY_CHECKPOINT_S = 1800.0

_WORKER = Resources(gpus=1)
_TOPOLOGY = TopologyConstraint()  # what `training()` gives: no requirement, one rack preferred

# (timestamp seconds, (line, duration, num_gpus, cluster))
_Record = tuple[float, tuple[int, float, int, str]]


def philly_comm(gpus: int) -> CommProfile:
    """Bytes all-reduced per step grow with the square root of the job's size (the model's)."""
    return CommProfile(bytes_per_step=8e8 * math.sqrt(max(1, gpus)), compute_s_per_step=0.5)


def check_philly_file(path: str | os.PathLike[str]) -> None:
    """A :class:`SpecError` unless ``path`` is a regular file that starts with a Philly header: a folder, a
    device (``/dev/zero`` would be read for ever), a pipe, an empty or non-UTF-8 file is said before a benchmark
    starts its runs on it."""
    if not os.path.isfile(path):
        fix = "give the path of the Philly CSV file itself (../shared/traces/philly/philly.csv)"
        raise SpecError([SpecProblem((), "not a regular file (a folder, a device or a pipe)", fix)], os.fspath(path))
    open_csv(path, what="Philly", required=_REQUIRED)


def load_philly(
    path: str | os.PathLike[str],
    *,
    on_error: OnError = "skip",
    gpu_scale: float = 1.0,
    arrival_scale: float = 1.0,
    time_window: tuple[float, float] | None = None,
    max_jobs: int | None = None,
    tenant_map: Mapping[str, str] | None = None,
) -> TraceLoad:
    """Read a Philly CSV as training jobs sorted by submit time (see the module docstring and
    docs/workloads.md for the mapping and the knobs). Raises only :class:`SpecError`."""
    opts = TraceOptions(
        on_error=on_error,
        gpu_scale=gpu_scale,
        arrival_scale=arrival_scale,
        time_window=time_window,
        max_jobs=max_jobs,
        tenant_map=tenant_map,
    )
    opts.check()
    table = open_csv(path, what="Philly", required=_REQUIRED)
    c = table.columns
    i_ts, i_dur, i_gpus, i_q = c["timestamp"], c["duration"], c["num_gpus"], c["cluster"]
    problems: list[SpecProblem] = []
    records: list[_Record] = []
    shape, iso, epoch, inf = _SHAPE.fullmatch, datetime.fromisoformat, _EPOCH, math.inf
    for line, row in table.rows(problems):
        # The fast path takes clean rows; anything odd goes to _slow_row, which says what is wrong. For a
        # timestamp of exactly the shape YYYY-MM-DD HH:MM:SS, fromisoformat gives what strptime gives, 9x faster.
        record: _Record | None = None
        try:
            text, duration, gpus, queue = row[i_ts], float(row[i_dur]), int(row[i_gpus]), row[i_q]
            clean = queue and queue == queue.strip() and queue.isprintable()  # else: the slow path says why
            if shape(text) and 0.0 <= duration < inf and 0 < gpus <= MAX_UNITS and clean:
                record = ((iso(text) - epoch).total_seconds(), (line, duration, gpus, queue))
        except ValueError:
            pass
        if record is None:
            record = _slow_row(row, line, c, problems)
        if record is not None:
            records.append(record)
    start = min(r[0] for r in records) if records else 0.0
    timed = [(ts - start, data) for ts, data in records]
    comms: dict[int, CommProfile] = {}
    queues: dict[str, str] = {}
    jobs: list[JobSpec] = []
    for rank, submit, (_line, duration, gpus, queue) in opts.arrange(timed):
        n = opts.scale_gpus(gpus)
        comm = comms.get(n) or comms.setdefault(n, philly_comm(n))
        q = queues.get(queue) or queues.setdefault(queue, opts.queue(queue))
        jobs.append(
            JobSpec(
                name=f"philly-{rank:06d}",
                kind=JobKind.TRAINING,
                unit=_WORKER,
                units=n,
                queue=q,
                topology=_TOPOLOGY,
                comm=comm,
                checkpoint_interval_s=PHILLY_CHECKPOINT_S,
                duration_estimate_s=duration,
                submit_time=submit,
            )
        )
    return opts.finish(table.source, jobs, problems)


def _slow_row(row: list[str], line: int, c: Mapping[str, int], problems: list[SpecProblem]) -> _Record | None:
    """Check every value of a row the fast path refused; record a problem for each bad one."""
    check = RowCheck(line, problems)
    text = check.text("timestamp", row[c["timestamp"]])
    ts = 0.0
    if text is not None:
        try:
            ts = (datetime.strptime(text, _TIME_FORMAT) - _EPOCH).total_seconds()
        except ValueError:
            fix = "write the submit time as YYYY-MM-DD HH:MM:SS (UTC), e.g. 2017-10-09 07:01:55"
            check.fail("timestamp", f"not a time: {text!r}", fix)
    duration = check.number("duration", row[c["duration"]], negative=f"negative duration: {row[c['duration']]!r}")
    gpus = check.whole("num_gpus", row[c["num_gpus"]])
    if gpus == 0:
        check.fail("num_gpus", "num_gpus is 0: a Philly job runs on at least one GPU", "drop the row, or fix the count")
    queue = check.text("cluster", row[c["cluster"]])
    if not check.ok or duration is None or gpus is None or queue is None:
        if check.ok:  # cannot happen; never lose a row silently
            check.fail("", "cannot read this row", "compare it with the header")
        return None
    return ts, (line, duration, gpus, queue)
