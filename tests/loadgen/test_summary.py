"""The parser of LoadGen's logs, on logs the real library wrote in this test (never hand-written): a stub
endpoint answers in-process after a fixed sleep, so each scenario's log comes in about a second and its
numbers are known from the settings (the rate LoadGen was asked for, the sleep)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rackscale.loadgen.endpoints import RequestFailed
from rackscale.loadgen.settings import RunOptions, Scenario
from rackscale.loadgen.summary import LoadGenResult, SummaryError, load_result, parse_result
from rackscale.loadgen.sut import run_loadgen

SLEEP_S = 0.003


class Sleepy:
    """An endpoint that takes SLEEP_S per sample; every ``fail_every``-th one fails."""

    def __init__(self, fail_every: int = 0) -> None:
        self.calls, self.fail_every = 0, fail_every

    def send(self, index: int) -> None:
        self.calls += 1
        time.sleep(SLEEP_S)
        if self.fail_every and self.calls % self.fail_every == 0:
            raise RequestFailed("HTTP 500")


RUNS = {
    "server-valid": RunOptions(scenario=Scenario.SERVER, target_qps=60, latency_bound_ms=1000, latency_percentile=90,
                               min_duration_s=1, min_query_count=20, concurrency=8),
    "server-over-bound": RunOptions(scenario=Scenario.SERVER, target_qps=60, latency_bound_ms=0.5,
                                    latency_percentile=90, min_duration_s=1, min_query_count=20, concurrency=8),
    # 100 samples/s expected, served at ~8 x 333/s: done long before the 1 s minimum (LoadGen: INVALID)
    "offline-too-short": RunOptions(scenario=Scenario.OFFLINE, target_qps=100, min_duration_s=1, min_query_count=1,
                                    concurrency=8),
    "single-stream": RunOptions(scenario=Scenario.SINGLE_STREAM, latency_bound_ms=3, min_duration_s=0.5,
                                min_query_count=20),
}  # fmt: skip


@pytest.fixture(scope="module")
def results(lg: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[LoadGenResult, Path]]:
    out = {}
    for name, opts in RUNS.items():
        d = tmp_path_factory.mktemp(name)
        files = run_loadgen(opts=opts, endpoint=Sleepy(), log_dir=d, lg=lg)
        assert files.callback_errors == 0
        out[name] = (load_result(files.summary, files.detail), d)
    return out


@pytest.mark.parametrize(
    ("name", "scenario", "valid", "unmet"),
    [
        ("server-valid", "Server", True, []),
        ("server-over-bound", "Server", False, ["Performance constraints", "Early stopping"]),
        ("offline-too-short", "Offline", False, ["Min duration"]),
        ("single-stream", "SingleStream", True, []),
    ],
    ids=["server-valid", "server-over-bound", "offline-too-short", "single-stream"],
)
def test_verdict_and_unmet_constraints(
    results: dict[str, tuple[LoadGenResult, Path]], name: str, scenario: str, valid: bool, unmet: list[str]
) -> None:
    r, d = results[name]
    assert (r.scenario, r.mode, r.valid) == (scenario, "PerformanceOnly", valid)
    assert [c.name for c in r.constraints if c.satisfied is False] == unmet
    assert ("VALID" if valid else "INVALID") in (d / "mlperf_log_summary.txt").read_text()
    assert bool(r.reasons) is not valid


def test_loadgen_s_recommendations_are_the_reasons(results: dict[str, tuple[LoadGenResult, Path]]) -> None:
    over, _ = results["server-over-bound"]
    assert "Reduce target QPS to improve latency." in over.reasons
    assert any("Would need to run at least" in line for line in over.reasons)  # early stopping's verdict
    short, _ = results["offline-too-short"]
    assert "Increase expected QPS so the loadgen pre-generates a larger (coalesced) query." in short.reasons


def test_server_numbers(results: dict[str, tuple[LoadGenResult, Path]]) -> None:
    r, _ = results["server-valid"]
    assert r.scheduled_qps == pytest.approx(60, rel=0.3)  # Poisson arrivals at the asked rate
    assert r.completed_qps is not None and r.throughput == r.completed_qps
    assert r.query_count is not None and r.query_count >= 20
    ps = dict(r.percentiles_ns)
    assert list(ps) == [50.0, 90.0, 95.0, 97.0, 99.0, 99.9]
    assert r.min_latency_ns is not None and r.max_latency_ns is not None
    assert SLEEP_S * 1e9 <= r.min_latency_ns <= ps[50.0] <= ps[90.0] <= ps[99.0] <= r.max_latency_ns
    assert r.percentile_ns(99.0) == ps[99.0] and r.percentile_ns(42.0) is None
    assert ("target_qps", "60") in r.parameters


def test_offline_and_single_stream_throughput(results: dict[str, tuple[LoadGenResult, Path]]) -> None:
    off, _ = results["offline-too-short"]
    assert off.samples_per_second is not None and off.throughput == off.samples_per_second
    assert off.query_count == 1  # Offline: one query holding every sample
    ss, _ = results["single-stream"]
    assert ss.qps_with_overhead is not None and ss.qps_without_overhead is not None
    assert ss.throughput == ss.qps_with_overhead < 1 / SLEEP_S  # one sample at a time, each >= SLEEP_S
    assert ss.target_latency_ns == ss.percentile_ns(90.0)  # SingleStream's headline is its 90th percentile


def test_a_run_whose_requests_fail_still_completes_every_sample(lg: Any, tmp_path: Path) -> None:
    endpoint = Sleepy(fail_every=3)
    opts = RunOptions(scenario=Scenario.SINGLE_STREAM, latency_bound_ms=3, min_duration_s=0.2, min_query_count=10)
    files = run_loadgen(opts=opts, endpoint=endpoint, log_dir=tmp_path, lg=lg)
    r = load_result(files.summary, files.detail)
    assert r.query_count == endpoint.calls and files.callback_errors == 0


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "no 'Result is : VALID|INVALID' line"),
        ("Result is : MAYBE\n", "no 'Result is : VALID|INVALID' line"),
        ("Result is : VALID\nScheduled samples per second : fast\n", "'fast' is not a number"),
        ("Result is : VALID\n50.00 percentile latency (ns)   : 1.5e3x\n", "is not a whole number"),
    ],
    ids=["empty", "bad-verdict", "bad-rate", "bad-latency"],
)
def test_a_log_that_is_not_loadgen_s_is_one_error(text: str, says: str) -> None:
    with pytest.raises(SummaryError, match="summary") as e:
        parse_result(text)
    assert says in str(e.value)


def test_a_detail_log_cut_short_keeps_what_it_has(results: dict[str, tuple[LoadGenResult, Path]]) -> None:
    _, d = results["server-valid"]
    summary = (d / "mlperf_log_summary.txt").read_text()
    detail = (d / "mlperf_log_detail.txt").read_text()
    cut = detail[: detail.index('"result_query_count"') + 30]  # a crash in the middle of a line
    whole = parse_result(summary, detail)
    partial = parse_result(summary, cut + "\n:::MLLOG not json\n:::MLLOG [1]\n")
    assert whole.query_count is not None and partial.query_count is None
    assert partial.valid == whole.valid and partial.percentiles_ns == whole.percentiles_ns


def test_a_missing_log_says_so(tmp_path: Path) -> None:
    with pytest.raises(SummaryError, match="LoadGen wrote no such log"):
        load_result(tmp_path / "mlperf_log_summary.txt")
