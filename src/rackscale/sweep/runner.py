"""Running cells: a local process pool (default) or Ray tasks, each result appended as soon as it is back.

- A cell that raises is recorded with its error (status ``failed``); the sweep goes on.
- A lost worker is retried, bounded: on the pool (a killed process breaks the whole pool:
  ``BrokenProcessPool``) the pool is rebuilt and the cells that were in flight are resubmitted, each at
  most ``retries`` more times; on Ray the task's ``max_retries`` does it (Ray retries a task whose worker
  died, not one that raised: https://docs.ray.io/en/latest/ray-core/fault_tolerance/tasks.html).
- On Ray each distinct trace file is put in the object store once (``ray.put``) and every task gets the
  reference; Ray resolves a top-level ObjectRef argument to its value in the worker, from the node's
  local object store (copied once per node, not once per task).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from rackscale.sweep.cells import run_cell
from rackscale.sweep.results import ResultsWriter

CellFn = Callable[[dict[str, Any], bytes | None], dict[str, Any]]
RAY_EXTRA = "Ray is not installed: pip install 'rackscale[sweep]' (ray[default] and pyarrow)"


class CellStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"


class Event(StrEnum):
    STARTED = "started"
    DONE = "done"
    FAILED = "failed"
    RETRIED = "retried"


@dataclass(frozen=True, slots=True, kw_only=True)
class Cell:
    key: str
    options: dict[str, Any]  # every option, defaults included (what the worker rebuilds the cell from)
    label: dict[str, Any]  # the options that differ from the defaults (what the table shows)
    trace: Path | None = None


@dataclass(slots=True, kw_only=True)
class Stats:
    done: int = 0
    failed: int = 0
    retried: int = 0
    trace_puts: int = 0
    wall_s: float = 0.0
    errors: list[str] = field(default_factory=list)


OnEvent = Callable[[Event, Cell], None]


def guarded(cell_fn: CellFn, options: dict[str, Any], trace: bytes | None) -> tuple[str, Any]:
    """Runs in the worker: an exception of the cell comes back as its error, so it never breaks a worker."""
    try:
        return CellStatus.OK.value, cell_fn(options, trace)
    except Exception as e:
        last = traceback.extract_tb(e.__traceback__)[-1:]
        where = f" (at {Path(last[0].filename).name}:{last[0].lineno})" if last else ""
        return CellStatus.FAILED.value, f"{type(e).__name__}: {' '.join(str(e).split())}{where}"


def _record(
    cell: Cell, status: str, payload: Any, *, attempts: int | None, elapsed: float, runner: str
) -> dict[str, Any]:
    from rackscale.sweep.cells import project_version

    rec: dict[str, Any] = {"key": cell.key, "options": cell.label, "status": status, "attempts": attempts}
    rec.update(version=project_version(), runner=runner, elapsed_s=round(elapsed, 3), finished_at=time.time())
    if status == CellStatus.OK:
        rec.update(payload)
    else:
        rec["error"] = str(payload)
    return rec


class _Sink:
    def __init__(self, writer: ResultsWriter, stats: Stats, on_event: OnEvent | None, runner: str) -> None:
        self.writer, self.stats, self.on_event, self.runner = writer, stats, on_event, runner

    def event(self, kind: Event, cell: Cell) -> None:
        if self.on_event is not None:
            self.on_event(kind, cell)

    def finish(self, cell: Cell, status: str, payload: Any, *, attempts: int | None, elapsed: float) -> None:
        self.writer.append(_record(cell, status, payload, attempts=attempts, elapsed=elapsed, runner=self.runner))
        if status == CellStatus.OK:
            self.stats.done += 1
            self.event(Event.DONE, cell)
        else:
            self.stats.failed += 1
            self.stats.errors.append(str(payload))
            self.event(Event.FAILED, cell)


def run_pool(
    cells: Sequence[Cell],
    writer: ResultsWriter,
    *,
    workers: int,
    retries: int = 2,
    cell_fn: CellFn = run_cell,
    on_event: OnEvent | None = None,
) -> Stats:
    """Every cell on a pool of ``workers`` processes, at most ``workers`` in flight (so that the cells a
    broken pool takes down are exactly those that were running, and only they are charged an attempt)."""
    stats = Stats()
    sink = _Sink(writer, stats, on_event, "pool")
    attempts = {c.key: 0 for c in cells}
    queue = list(cells)
    t0 = time.perf_counter()
    while queue:
        lost: list[Cell] = []
        # no more processes than cells: a fork-started pool starts all of its workers at once
        with ProcessPoolExecutor(max_workers=max(1, min(workers, len(queue)))) as pool:
            running: dict[Future[tuple[str, Any]], tuple[Cell, float]] = {}
            while queue or running:
                while queue and len(running) < workers and not lost:
                    cell = queue.pop(0)
                    attempts[cell.key] += 1
                    try:
                        fut = pool.submit(guarded, cell_fn, cell.options, None)
                    except BrokenProcessPool:
                        lost.append(cell)
                        break
                    running[fut] = (cell, time.perf_counter())
                    sink.event(Event.STARTED, cell)
                if not running:
                    break
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in finished:
                    cell, started = running.pop(fut)
                    try:
                        status, payload = fut.result()
                    except BrokenProcessPool:
                        lost.append(cell)
                        continue
                    sink.finish(
                        cell, status, payload, attempts=attempts[cell.key], elapsed=time.perf_counter() - started
                    )
                if lost:  # the pool is broken: what still runs there is lost too
                    for fut, (cell, _) in running.items():
                        fut.cancel()
                        lost.append(cell)
                    running.clear()
        for cell in lost:
            if attempts[cell.key] > retries:
                why = f"worker lost {attempts[cell.key]} times (a killed or crashed process); gave up"
                sink.finish(cell, CellStatus.FAILED, why, attempts=attempts[cell.key], elapsed=0.0)
            else:
                stats.retried += 1
                sink.event(Event.RETRIED, cell)
                queue.insert(0, cell)
    stats.wall_s = time.perf_counter() - t0
    return stats


def run_ray(
    cells: Sequence[Cell],
    writer: ResultsWriter,
    *,
    address: str | None,
    retries: int = 2,
    cell_fn: CellFn = run_cell,
    on_event: OnEvent | None = None,
) -> Stats:
    """One Ray task per cell on the cluster at ``address`` (``auto``: the one this machine belongs to;
    None: the one this process is already connected to), results taken as they finish (``ray.wait``)."""
    try:
        import ray  # type: ignore[import-not-found, unused-ignore]
        from ray.exceptions import RayError  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        from rackscale.sweep.spec import SweepError

        raise SweepError([RAY_EXTRA]) from None
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
    stats = Stats()
    sink = _Sink(writer, stats, on_event, "ray")
    t0 = time.perf_counter()
    refs: dict[Path, Any] = {}
    for cell in cells:  # each distinct trace file once, however many cells read it
        if cell.trace is not None and cell.trace not in refs:
            refs[cell.trace] = ray.put(_read_trace(cell.trace))
            stats.trace_puts += 1
    task = ray.remote(num_cpus=1, max_retries=retries)(guarded)
    pending: dict[Any, tuple[Cell, float]] = {}
    for cell in cells:
        ref = refs.get(cell.trace) if cell.trace is not None else None
        pending[task.remote(cell_fn, cell.options, ref)] = (cell, time.perf_counter())
        sink.event(Event.STARTED, cell)
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            cell, started = pending.pop(ref)
            try:
                status, payload = ray.get(ref)
            except RayError as e:  # the worker died more than max_retries times, or the node went away
                status, payload = CellStatus.FAILED.value, f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
            sink.finish(cell, status, payload, attempts=None, elapsed=time.perf_counter() - started)
    stats.wall_s = time.perf_counter() - t0
    return stats


def _read_trace(path: Path) -> bytes:
    from rackscale.sweep.spec import SweepError

    try:
        return path.read_bytes()
    except OSError as e:
        raise SweepError([f"trace {path}: cannot read it ({e.strerror or e})"]) from None


def make_cells(options: Sequence[Any], *, done: Mapping[str, Any] | None = None) -> tuple[list[Cell], int]:
    """The cells of validated ``CellOptions``, less those whose key has an ``ok`` record in ``done``; and
    how many were skipped so."""
    from rackscale.sweep.cells import cell_key, trace_file

    out, skipped = [], 0
    for o in options:
        key = cell_key(o)
        if done is not None and (done.get(key) or {}).get("status") == CellStatus.OK:
            skipped += 1
            continue
        out.append(Cell(key=key, options=o.model_dump(mode="json"), label=o.canonical(), trace=trace_file(o)))
    return out, skipped
