"""A cell: its key (what makes a rerun skip it), what it builds (cluster, jobs, SimConfig) and its run.

:func:`build_run` is how ``rackscale simulate`` builds its run too (cli/simulate.py calls it with its flags
as :class:`Names`), so that a cell is exactly one policy's run of that command: one builder, whose every
bad input is a :class:`SweepError` worded in the caller's names.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rackscale.model.specs import MAX_SYNTHETIC_JOBS
from rackscale.model.topology import GPUCluster
from rackscale.sim.records import SimConfig
from rackscale.sweep.perf_cells import PERF_KIND, PerfOptions, model_file, run_perf_cell
from rackscale.sweep.spec import DEFAULT_RACKS, MAX_RACKS, CellOptions, SweepError

if TYPE_CHECKING:
    from rackscale.workloads.trace_load import TraceLoad


def project_version() -> str:
    """The installed distribution's version (what a release changes), else the package's own."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rackscale")
    except PackageNotFoundError:  # a source checkout that is not installed
        from rackscale import __version__

        return __version__


def trace_file(options: CellOptions | PerfOptions) -> Path | None:
    if isinstance(options, PerfOptions):
        return None
    return Path(os.path.expanduser(options.trace.partition(":")[2].strip())) if options.trace else None


def input_files(options: CellOptions | PerfOptions) -> list[Path]:
    """Every file a cell reads: a change to any of them (size or mtime) makes it a new cell."""
    if isinstance(options, PerfOptions):
        f = model_file(options)
        return [f] if f is not None else []
    out = [Path(p) for p in (options.cluster, options.jobs_file) if p]
    out += [Path(p) for p in options.schedules]
    t = trace_file(options)
    return [*out, t] if t else out


def _stamp(path: Path) -> list[int] | str:
    try:
        st = path.stat()
    except OSError:
        return "missing"  # the run will say so; the key still differs from the file's later key
    return [st.st_size, st.st_mtime_ns]


def cell_key(options: CellOptions | PerfOptions, *, version: str | None = None) -> str:
    """sha256 of the canonical JSON of the cell's options, the project's version and its input files' size
    and mtime: stable across runs and machines for the same inputs, different when any of them changes."""
    doc = {
        "options": options.canonical(),
        "version": version if version is not None else project_version(),
        "inputs": {str(p): _stamp(p) for p in input_files(options)},
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class Names:
    """What a build error calls each input: a sweep document's keys, or ``simulate``'s flags."""

    cluster: str = "cluster"
    racks: str = "racks"
    trace: str = "trace"
    jobs_file: str = "jobs_file"
    duration: str = "duration_h"
    jobs: str = "jobs"
    arrival_scale: str = "arrival_scale"
    maintenance: str = "maintenance"
    schedules: str = "schedules"
    start_time: str = "start_time"


KEYS = Names()


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    cluster: GPUCluster
    jobs: list[Any]
    config: SimConfig
    skipped_rows: int = 0


def build_run(
    options: CellOptions,
    *,
    trace_path: Path | None = None,
    names: Names = KEYS,
    on_trace: Callable[[TraceLoad], None] | None = None,
) -> Run:
    """The cluster, the jobs and the SimConfig of one cell, checked in ``simulate``'s order; a bad input is
    a :class:`SweepError` whose text names it as ``names`` does. ``trace_path``: where the trace's bytes lie
    on this machine, when they came through Ray's object store rather than from the cell's own path.
    ``on_trace`` sees a loaded trace (its skipped rows) before the rest is checked."""
    from rackscale.model.spec_errors import SpecError

    try:
        cluster = _cluster(options, names)
        jobs, loaded = _jobs(options, cluster, trace_path, names)
        if loaded is not None and on_trace is not None:
            on_trace(loaded)
        config = _config(options, cluster, names)
    except SpecError as e:
        # its lines as they are: simulate prints them so; a sweep's record folds them into one
        raise SweepError(str(e).split("\n")) from None
    return Run(cluster=cluster, jobs=jobs, config=config, skipped_rows=len(loaded.skipped) if loaded else 0)


def _cluster(options: CellOptions, names: Names) -> GPUCluster:
    if options.cluster is not None and options.racks is not None:
        raise SweepError([f"give either {names.cluster} or {names.racks}, not both"])
    if options.cluster is not None:
        from rackscale.loaders import load_cluster

        return load_cluster(Path(options.cluster))
    n = DEFAULT_RACKS if options.racks is None else options.racks  # simulate's default (cli/common.DEFAULT_RACKS)
    if n < 1:
        raise SweepError([f"{names.racks} must be at least 1 (got {n})"])
    if n > MAX_RACKS:  # a cluster spec's bound (its nodes): past it the cluster is never built
        raise SweepError([f"{names.racks} must be at most {MAX_RACKS:,} (got {n:,})"])
    return GPUCluster.uniform(name=f"nvl72-x{n}", racks_per_region=n)


def _jobs(
    options: CellOptions, cluster: GPUCluster, trace_path: Path | None, names: Names
) -> tuple[list[Any], TraceLoad | None]:
    from rackscale.workloads import SyntheticConfig, load_trace, synthetic_jobs

    if options.trace is not None and options.jobs_file is not None:
        raise SweepError([f"give either {names.trace} or {names.jobs_file}, not both"])
    loaded = None
    if options.trace is not None:
        fmt = options.trace.partition(":")[0]
        spec = f"{fmt}:{trace_path}" if trace_path is not None else options.trace
        window = (0.0, options.duration_h * 3600.0) if options.duration_h is not None else None
        loaded = load_trace(
            spec,
            gpu_scale=options.gpu_scale,
            arrival_scale=options.arrival_scale,
            time_window=window,
            on_error="reject" if options.strict else "skip",
            tenant_map=options.tenant_map,
        )
        jobs = list(loaded.jobs)
    elif options.jobs_file is not None:
        from rackscale.loaders import load_jobs

        jobs = list(load_jobs(Path(options.jobs_file)))
    else:
        hours = options.duration_h if options.duration_h is not None else 24.0
        n = round(options.jobs * options.arrival_scale)
        if n > MAX_SYNTHETIC_JOBS:  # (a sweep document is refused sooner, when it is read)
            raise SweepError(
                [
                    f"{names.jobs} x {names.arrival_scale} is {n:,.4g} synthetic jobs, more than {MAX_SYNTHETIC_JOBS:,}"
                    f" (fix: lower {names.jobs} or {names.arrival_scale})"
                ]
            )
        jobs = synthetic_jobs(
            SyntheticConfig(
                jobs=max(1, n),
                duration_s=hours * 3600.0,
                max_gpus=cluster.total_gpus,
                seed=options.seed,
                elastic_share=options.elastic_share,
            )
        )
    if not jobs:
        raise SweepError([f"the workload has no jobs (check {names.duration} and the trace's time window)"])
    return jobs, loaded


def _config(options: CellOptions, cluster: GPUCluster, names: Names) -> SimConfig:
    from rackscale.host.drains import DrainError
    from rackscale.sim.faults import FaultConfig
    from rackscale.sim.maintenance import parse_window
    from rackscale.sim.schedules import DEFAULT_START_EPOCH, parse_start_time, read_schedule_file

    try:  # a sweep document has checked these already; simulate's flags come here unchecked
        windows = tuple(parse_window(w) for w in options.maintenance)
    except DrainError as e:
        raise SweepError([f"{names.maintenance}: {e}"]) from None
    racks = {r.name for r in cluster.racks}
    for w in windows:
        if w.rack not in racks:
            raise SweepError([f"{names.maintenance}: no rack named {w.rack!r} in this cluster"])
    try:
        start = parse_start_time(options.start_time) if options.start_time is not None else DEFAULT_START_EPOCH
    except ValueError as e:
        raise SweepError([f"{names.start_time}: {e}"]) from None
    schedules: dict[str, Any] = {}
    for f in options.schedules:
        for s in read_schedule_file(Path(f)):
            if s.name in schedules:
                raise SweepError(
                    [f"{names.schedules} {f}: a second schedule named {s.name!r}; give each its own metadata.name"]
                )
            schedules[s.name] = s
    return SimConfig(
        policy=options.policy,
        seed=options.seed,
        faults=FaultConfig(
            gpu_mtbf_h=options.gpu_mtbf_h, node_mtbf_h=options.node_mtbf_h, uplink_mtbf_h=options.uplink_mtbf_h
        ),
        estimates=options.estimates.value,
        maintenance=windows,
        schedules=tuple(schedules.values()),
        start_epoch=start,
    )


def materialize(trace: bytes, *, suffix: str) -> Path:
    """The trace's bytes (from Ray's object store) as a file on this machine, written once per content
    (named by its hash; written aside and renamed so that two workers never read half a file)."""
    digest = hashlib.sha256(trace).hexdigest()[:32]
    path = Path(tempfile.gettempdir()) / f"rackscale-sweep-{digest}{suffix}"
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".rackscale-sweep-")
        with os.fdopen(fd, "wb") as f:
            f.write(trace)
        os.replace(tmp, path)
    return path


def run_cell(options: dict[str, Any], trace: bytes | None = None) -> dict[str, Any]:
    """One cell, in a worker: the KPIs ``simulate --json`` prints for its policy (``kpis``,
    ``failed_reasons``) plus its size and timing, or a ``perf serve`` cell's (``perf_cells``). Raises on a
    bad input; the runner records the error."""
    if options.get("kind") == PERF_KIND:
        return run_perf_cell(options)
    cell = CellOptions.model_validate(options)
    path = None
    if trace is not None and cell.trace is not None:
        path = materialize(trace, suffix=Path(cell.trace.partition(":")[2]).suffix)
    t0 = time.perf_counter()
    run = build_run(cell, trace_path=path)
    from rackscale.sim.gc_policy import batch_gc
    from rackscale.sim.simulator import Simulator

    t1 = time.perf_counter()
    with batch_gc():
        result = Simulator(run.cluster, run.jobs, run.config).run()
    return {
        "kpis": result.kpis.as_dict(),
        "failed_reasons": result.failed_reasons(),
        "jobs": len(run.jobs),
        "gpus": run.cluster.total_gpus,
        "skipped_rows": run.skipped_rows,
        "load_s": t1 - t0,
        "sim_s": time.perf_counter() - t1,
    }
