"""The runner: the live cluster driven by the service clock, in one thread.

Each step: take the submissions and cancellations the API queued, the exits the backend saw, run a
scheduling cycle, commit every change in one transaction, and only then start or stop work on the backend.
So a crash at any point leaves the store saying no more than what is true or about to be redone: a job the
store says is running was either started or is started again by ``adopt`` on restart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Protocol

from rackscale.backends.base import Backend, Exit, RunningJobRecord
from rackscale.model.spec_errors import SpecError
from rackscale.model.specs import job_from_dict
from rackscale.model.workload import JobSpec
from rackscale.service.clock import ServiceClock
from rackscale.service.live import CANCELLED, PREEMPTED, SCHEDULED, Change, LiveCluster
from rackscale.service.store import PENDING, RUNNING, JobRow, Store

log = logging.getLogger("rackscale.service")


class CycleObserver(Protocol):
    def cycle(self, *, seconds: float | None, changes: list[Change]) -> None:
        """After each step: how long its scheduling cycle took (None: no cycle was needed), what changed."""
        ...


class Runner:
    def __init__(
        self,
        live: LiveCluster,
        store: Store,
        backend: Backend,
        clock: ServiceClock,
        *,
        observer: CycleObserver | None = None,
        interval_s: float = 0.05,
        min_gap_s: float = 0.01,
    ) -> None:
        self.live = live
        self.store = store
        self.backend = backend
        self.clock = clock
        self.observer = observer
        self.interval_s = interval_s
        self.min_gap_s = min_gap_s
        self.lock = threading.RLock()  # held while the live cluster changes; readers take it briefly
        self._inbox: deque[tuple[str, JobSpec | str]] = deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fatal: str | None = None  # set when the store refused a commit: the service stops accepting work
        self.errors = 0
        self.last_step = 0.0

    # ------------------------------------------------------------------ from the API (any thread)
    def submitted(self, spec: JobSpec) -> None:
        self._inbox.append(("submit", spec))
        self._wake.set()

    def cancelled(self, name: str) -> None:
        self._inbox.append(("cancel", name))
        self._wake.set()

    @contextmanager
    def reading(self) -> Iterator[LiveCluster]:
        with self.lock:
            yield self.live

    # ------------------------------------------------------------------ lifecycle
    def recover(self) -> dict[str, int]:
        """Rebuild the live cluster from the store, then let the backend adopt what was running."""
        now = self.clock.now()
        running: dict[str, RunningJobRecord] = {}
        broken: list[Change] = []
        counts = {"running": 0, "pending": 0}
        for row in self.store.jobs(status=[RUNNING, PENDING], limit=10**9):
            try:
                spec = spec_of(row)
            except SpecError as e:  # stored under older rules that no longer accept it: fail it, say why
                broken.append(Change(row.name, "failed", now, "InvalidSpec", f"the stored spec no longer loads: {e}"))
                continue
            if row.status == RUNNING and row.placement is not None and row.started is not None:
                try:
                    self.live.restore(spec, row.placement, started=row.started, now=now)
                except ValueError as e:  # the placement no longer fits this cluster (e.g. a changed spec)
                    broken.append(Change(row.name, "failed", now, "LostPlacement", f"cannot restore: {e}"))
                    continue
                running[row.name] = RunningJobRecord(spec, row.placement, row.started)
                counts["running"] += 1
            else:
                self.live.submit(spec)
                counts["pending"] += 1
        exits = self.backend.adopt(running, now)
        changes = broken + [c for e in exits if (c := self._exit(e, now)) is not None]
        self.store.apply(changes)
        return counts

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="rackscale-runner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self.lock:  # never while a step still runs (backends are called from one thread at a time)
            self.backend.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set() or self.fatal:
                break
            try:
                self.step()
            except Exception as e:  # a bug must not stop the cluster: say it, count it, go on
                self.errors += 1
                log.exception("runner step failed: %s", e)
            time.sleep(self.min_gap_s)  # lets submissions batch up into one cycle

    # ------------------------------------------------------------------ one step
    def step(self) -> list[Change]:
        with self.lock:
            now = self.clock.now()
            changes: list[Change] = []
            stops: list[str] = []
            while self._inbox:
                what, arg = self._inbox.popleft()
                if what == "submit":
                    assert isinstance(arg, JobSpec)
                    if arg.name not in self.live.specs:
                        self.live.submit(arg)
                else:
                    assert isinstance(arg, str)
                    running = arg in self.live.state.running
                    if self.live.cancel(arg, now) is not None and running:
                        stops.append(arg)  # the store already says cancelled: no change to commit
            for name in stops:
                self.backend.stop(name, now=now)
            for e in self.backend.poll(now):
                if (c := self._exit(e, now)) is not None:
                    changes.append(c)
            self.live.account(now)
            t0 = time.perf_counter()
            before = self.live.counters.cycles
            changes += self.live.cycle(now)
            seconds = time.perf_counter() - t0 if self.live.counters.cycles != before else None
            try:
                rejected = self.store.apply(changes)
            except Exception as e:
                self.fatal = f"the store refused a commit: {e}"
                log.error("%s; the service stops taking work (restart it to recover from the store)", self.fatal)
                raise
            self._act(changes, rejected, now)
            self.last_step = now
        if self.observer is not None:
            self.observer.cycle(seconds=seconds, changes=changes)
        return changes

    def _act(self, changes: list[Change], rejected: set[str], now: float) -> None:
        for ch in changes:
            if ch.job in rejected:
                # Cancelled between the decision and the commit: undo it here, never start it.
                if ch.type in (SCHEDULED, PREEMPTED):
                    self.live.cancel(ch.job, now)
                if ch.type == PREEMPTED:
                    self.backend.stop(ch.job, now=now)
                continue
            if ch.type == SCHEDULED and ch.placement is not None:
                spec = self.live.specs[ch.job]
                self.backend.start(spec, ch.placement, now=now)
            elif ch.type == PREEMPTED:
                self.backend.stop(ch.job, now=now)

    def _exit(self, e: Exit, now: float) -> Change | None:
        return self.live.exited(e.job, now, ok=e.ok, exit_code=e.exit_code, reason=e.reason)


def spec_of(row: JobRow) -> JobSpec:
    """The stored document, re-validated, with the name, queue and submit time the service gave it."""
    spec = job_from_dict(row.doc)
    return replace(spec, name=row.name, queue=row.queue, submit_time=row.submitted)


__all__ = ["CANCELLED", "CycleObserver", "Runner", "spec_of"]
