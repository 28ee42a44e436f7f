"""Our options -> ``mlperf_loadgen.TestSettings``, validated before LoadGen sees them.

The fields are LoadGen's (mlcommons/inference loadgen/test_settings.h, read through the binding
loadgen/bindings/python_api.cc): ``scenario``, ``mode``, ``server_target_qps``, ``server_target_latency_ns``,
``server_target_latency_percentile``, ``offline_expected_qps``, ``single_stream_expected_latency_ns``,
``single_stream_target_latency_percentile``, ``min_duration_ms``, ``max_duration_ms``, ``min_query_count``.
LoadGen itself takes any number (a negative QPS, a zero duration) and fails later or never, so each value
is checked here and a bad one names its option."""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from rackscale.model.errors import RackscaleError

LOADGEN_EXTRA = "pip install 'rackscale[loadgen]'"
MAX_SAMPLES = 1_000_000  # the query sample library's size: LoadGen keeps an index per sample
MAX_CONCURRENCY = 1024
MAX_QUERIES = 10**9  # queries of one run (LoadGen generates them all up front): --min-queries, rate x duration
LOADGEN_INT_MAX = 2**63 - 1  # LoadGen's durations (ms) and latencies (ns) are 64-bit integers


class Scenario(StrEnum):
    """The LoadGen scenarios this verb drives (MultiStream needs several samples per query: not here)."""

    SERVER = "Server"
    OFFLINE = "Offline"
    SINGLE_STREAM = "SingleStream"


class Mode(StrEnum):
    """PerformanceOnly: timing only, no accuracy log (what the plan's validation runs)."""

    PERFORMANCE_ONLY = "PerformanceOnly"


class LoadGenMissing(RackscaleError, ImportError):
    """The ``mlperf_loadgen`` module is not installed."""


class SettingsError(RackscaleError, ValueError):
    """A bad option: ``option`` is its command-line name, the message says what it must be."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option} {message}")
        self.option = option


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """One LoadGen run. ``target_qps`` is the Server's Poisson arrival rate and the Offline's expected
    throughput (LoadGen sizes the one Offline query as expected QPS x min duration x 1.1); ``latency_bound_ms``
    is the Server's latency bound and the SingleStream's expected latency (which sizes that run).
    ``latency_percentile`` None keeps LoadGen's default (Server 99, SingleStream 90)."""

    scenario: Scenario
    mode: Mode = Mode.PERFORMANCE_ONLY
    target_qps: float = 10.0
    latency_bound_ms: float = 100.0
    latency_percentile: float | None = None
    min_duration_s: float = 10.0
    max_duration_s: float | None = None
    min_query_count: int = 100
    sample_count: int = 1024
    concurrency: int = 32

    def __post_init__(self) -> None:
        _positive("--target-qps", self.target_qps)
        _positive("--latency-bound-ms", self.latency_bound_ms)
        _positive("--duration-s", self.min_duration_s)
        if self.latency_percentile is not None and not 0 < self.latency_percentile < 100:
            raise SettingsError("--latency-percentile", f"must be between 0 and 100 (got {self.latency_percentile:g})")
        if self.max_duration_s is not None:
            _positive("--max-duration-s", self.max_duration_s)
            if self.max_duration_s < self.min_duration_s:
                raise SettingsError(
                    "--max-duration-s",
                    f"must be at least --duration-s ({self.max_duration_s:g} < {self.min_duration_s:g})",
                )
        _count("--min-queries", self.min_query_count, 1, MAX_QUERIES)
        _fits("--latency-bound-ms", self.latency_bound_ms, 1e6, "ns")
        _fits("--duration-s", self.min_duration_s, 1e3, "ms")
        if self.max_duration_s is not None:
            _fits("--max-duration-s", self.max_duration_s, 1e3, "ms")
        # The queries LoadGen generates for the min duration: Server and Offline at --target-qps (Offline's
        # one query holds that many samples), SingleStream one per expected latency.
        if self.scenario is Scenario.SINGLE_STREAM:
            option, rate = "--latency-bound-ms", 1e3 / max(self.latency_bound_ms, 1e-6)
        else:
            option, rate = "--target-qps", self.target_qps
        if rate * self.min_duration_s > MAX_QUERIES:
            raise SettingsError(
                option,
                f"with --duration-s {self.min_duration_s:g} asks LoadGen for {rate * self.min_duration_s:.3g} "
                f"queries, more than {MAX_QUERIES:,} (fix: a shorter --duration-s or a "
                f"{'longer latency' if option == '--latency-bound-ms' else 'lower rate'})",
            )
        _count("--sample-count", self.sample_count, 1, MAX_SAMPLES)
        _count("--concurrency", self.concurrency, 1, MAX_CONCURRENCY)


def _positive(option: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise SettingsError(option, f"must be a finite number above 0 (got {value})")


def _fits(option: str, value: float, per_unit: float, unit: str) -> None:
    if value * per_unit > LOADGEN_INT_MAX:
        raise SettingsError(option, f"is too large for LoadGen's 64-bit {unit} (got {value:g})")


def _count(option: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SettingsError(option, f"must be a whole number from {low} to {high:,} (got {value})")


def import_loadgen() -> Any:
    """The ``mlperf_loadgen`` module (a C++ extension without type information, hence ``Any``)."""
    try:
        return importlib.import_module("mlperf_loadgen")
    except ImportError as e:
        raise LoadGenMissing(f"the MLPerf LoadGen is not installed: {LOADGEN_EXTRA}") from e


def to_test_settings(opts: RunOptions, lg: Any) -> Any:
    """``opts`` as a ``lg.TestSettings``. Durations and latencies go in as LoadGen's integer ms / ns."""
    ts = lg.TestSettings()
    ts.scenario = getattr(lg.TestScenario, opts.scenario.value)
    ts.mode = getattr(lg.TestMode, opts.mode.value)
    ts.min_duration_ms = max(1, round(opts.min_duration_s * 1000))
    # 0 is LoadGen's "no cap"; a cap ends a run that cannot reach min_query_count (LoadGen then says why).
    ts.max_duration_ms = 0 if opts.max_duration_s is None else max(1, round(opts.max_duration_s * 1000))
    ts.min_query_count = opts.min_query_count
    latency_ns = max(1, round(opts.latency_bound_ms * 1e6))
    if opts.scenario is Scenario.SERVER:
        ts.server_target_qps = float(opts.target_qps)
        ts.server_target_latency_ns = latency_ns
        if opts.latency_percentile is not None:
            ts.server_target_latency_percentile = opts.latency_percentile / 100
    elif opts.scenario is Scenario.OFFLINE:
        ts.offline_expected_qps = float(opts.target_qps)
    else:
        ts.single_stream_expected_latency_ns = latency_ns
        if opts.latency_percentile is not None:
            ts.single_stream_target_latency_percentile = opts.latency_percentile / 100
    return ts
