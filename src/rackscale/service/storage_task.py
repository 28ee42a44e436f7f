"""The storage lifecycle as a periodic task of the service (``rackscale serve --storage-lifecycle FILE
--tier hot=PATH ... --storage-every 1h``) and its Prometheus collector (docs/storage.md).

The task runs in its own thread on the wall clock (file ages are wall-clock ages, whatever ``--speed`` the
service clock has), one run at a time (the lifecycle's lock also keeps an operator's run out). The gauges and
counters are read from the task's totals at scrape time, as the service's other state metrics are.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from rackscale.storage.config import TIERS, Lifecycle, Tier
from rackscale.storage.lifecycle import DEFAULT_INCLUDE, LifecycleError, Report, run_lifecycle

log = logging.getLogger("rackscale.service.storage")

STORAGE_METRIC_NAMES = (
    "rackscale_storage_tier_bytes",
    "rackscale_storage_tier_files",
    "rackscale_storage_moved_bytes_total",
    "rackscale_storage_deleted_bytes_total",
    "rackscale_storage_refused_total",
    "rackscale_storage_last_run_timestamp_seconds",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class StorageTaskConfig:
    policy: Lifecycle
    roots: dict[Tier, Path]
    every_s: float
    include: tuple[str, ...] = DEFAULT_INCLUDE


@dataclass(slots=True)
class _Totals:
    last: Report | None = None
    last_run_s: float | None = None
    moved: dict[tuple[Tier, Tier], int] = field(default_factory=dict)
    deleted_bytes: int = 0
    refused: int = 0
    errors: int = 0


def task_config(
    *, config_file: Path, tiers: Sequence[str], every: str, include: Sequence[str] = ()
) -> StorageTaskConfig:
    """``rackscale serve``'s storage options -> the task's config, checked before the service starts.
    Raises ValueError with one line naming the option and the fix."""
    from rackscale.model.spec_errors import SpecError, SpecInvalid
    from rackscale.storage.config import load_lifecycle, parse_duration, parse_tier_options
    from rackscale.storage.lifecycle import check_include, check_roots

    try:
        every_s = parse_duration(every)
    except SpecInvalid as e:
        raise ValueError(f"--storage-every {e.message} (got {every!r}; fix: {e.fix})") from None
    try:
        policy = load_lifecycle(config_file)
    except SpecError as e:
        raise ValueError(str(e)) from None
    folders = tuple(dict.fromkeys([*DEFAULT_INCLUDE, *include]))
    roots = check_roots(parse_tier_options(tiers))  # LifecycleError is a ValueError
    check_include(folders)
    return StorageTaskConfig(policy=policy, roots=roots, every_s=float(every_s), include=folders)


class StorageTask:
    """Runs the lifecycle every ``every_s`` seconds (first at start); ``run_once`` is the unit tests drive."""

    def __init__(self, config: StorageTaskConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self._lock = threading.Lock()
        self._totals = _Totals()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> Report | None:
        c = self.config
        now = self.clock()
        try:
            report = run_lifecycle(roots=c.roots, policy=c.policy, now=now, include=c.include)
        except (LifecycleError, OSError) as e:  # a tier unmounted, a run by hand holding the lock: try later
            log.warning("storage lifecycle: %s (next try in %.0f s)", e, c.every_s)
            with self._lock:
                self._totals.errors += 1
            return None
        with self._lock:
            t = self._totals
            t.last, t.last_run_s = report, now
            for m in report.moved:
                t.moved[(m.src, m.dst)] = t.moved.get((m.src, m.dst), 0) + m.bytes
            t.deleted_bytes += sum(d.bytes for d in report.deleted)
            t.refused += len(report.refused)
        for r in report.refused:
            log.warning("storage lifecycle: %s:%s refused: %s", r.tier, r.rel, r.reason)
        return report

    def totals(self) -> _Totals:
        with self._lock:
            t = self._totals
            return _Totals(t.last, t.last_run_s, dict(t.moved), t.deleted_bytes, t.refused, t.errors)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="rackscale-storage", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)  # a move in progress finishes its file; a kill would be safe too

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # a bug must not end the task silently: it is logged and retried
                log.exception("storage lifecycle run failed")
            self._stop.wait(self.config.every_s)


class StorageCollector(Collector):
    """The lifecycle's gauges (from the last run) and counters (since the service started)."""

    def __init__(self, task: StorageTask) -> None:
        self.task = task

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        t = self.task.totals()
        size = GaugeMetricFamily("rackscale_storage_tier_bytes", "Bytes in a tier after the last run.", labels=["tier"])
        files = GaugeMetricFamily(
            "rackscale_storage_tier_files", "Files in a tier after the last run.", labels=["tier"]
        )
        if t.last is not None:  # no sample before the first run: an empty tier is not what was measured
            for tier in TIERS:
                size.add_metric([str(tier)], t.last.after[tier].bytes)
                files.add_metric([str(tier)], t.last.after[tier].files)
        yield size
        yield files
        # `from` is a Python keyword but a fine label name; the labels name the tiers a move went between.
        moved = CounterMetricFamily(
            "rackscale_storage_moved_bytes", "Bytes moved between tiers.", labels=["from", "to"]
        )
        for i, src in enumerate(TIERS):
            for dst in TIERS[i + 1 :]:
                moved.add_metric([str(src), str(dst)], t.moved.get((src, dst), 0))
        yield moved
        yield CounterMetricFamily(
            "rackscale_storage_deleted_bytes", "Bytes deleted past the last tier.", value=t.deleted_bytes
        )
        yield CounterMetricFamily(
            "rackscale_storage_refused",
            "Files left in place with a reason (symlink, a different file of the same name, an I/O error), per run.",
            value=t.refused,
        )
        last = GaugeMetricFamily(
            "rackscale_storage_last_run_timestamp_seconds", "When the last lifecycle run that completed started."
        )
        if t.last_run_s is not None:
            last.add_metric([], t.last_run_s)
        yield last
