"""``rackscale loadgen`` end to end: the real MLPerf LoadGen drives the real model server of
tests/loadgen/model_server.py over HTTP, and the report says what LoadGen wrote in its own logs::

    LoadGen (C++ threads) --issue--> HttpSut pool --POST--> Served (numpy MLP)
         ^                                |
         +------ QuerySamplesComplete ----+        then: mlperf_log_summary.txt -> the report
"""

from __future__ import annotations

import itertools
import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.loadgen.conftest import OFFLINE, SERVER_OK, SINGLE
from tests.loadgen.model_server import Served
from typer.testing import CliRunner

from rackscale.cli.app import app

runner = CliRunner()
CLUSTER = Path(__file__).parents[2] / "examples" / "cluster-nvl72.yaml"


def run(url: str, *args: str) -> tuple[int, dict[str, Any]]:
    result = runner.invoke(app, ["loadgen", "--endpoint", url, "--concurrency", "8", "-o", "json", *args])
    assert "Traceback" not in result.output
    try:
        return result.exit_code, json.loads(result.stdout)
    except ValueError:
        pytest.fail(f"exit {result.exit_code}, not JSON: {result.output}")


def ordered(latency: dict[str, float]) -> bool:
    keys = ("min", "p50", "p90", "p99", "max")
    return all(0 < latency[a] <= latency[b] for a, b in itertools.pairwise(keys))


@pytest.mark.parametrize(
    ("path", "api", "scenario", "rate_key"),
    [
        ("/predict", ["--api", "predict"], SERVER_OK, "completed_qps"),
        ("/v1/completions", ["--api", "openai", "--model", "mlp", "--max-tokens", "2"], SERVER_OK, "completed_qps"),
        ("/predict", [], OFFLINE, "samples_per_second"),
        ("/predict", [], SINGLE, "qps_with_overhead"),
    ],
    ids=["server-predict", "server-openai", "offline", "single-stream"],
)
def test_a_run_against_the_real_server_reports_loadgen_s_own_result(
    server: Served, path: str, api: list[str], scenario: list[str], rate_key: str, tmp_path: Path
) -> None:
    before = server.stats()["requests"]
    code, report = run(server.base_url + path, *api, *scenario, "--log-dir", str(tmp_path))
    lg = report["loadgen"]
    summary = (tmp_path / "mlperf_log_summary.txt").read_text()
    assert f"Scenario : {scenario[1]}" in summary and report["scenario"] == scenario[1]
    assert lg["result"] in summary  # the verdict is LoadGen's, read from its file
    assert report["requests"]["failed"] == 0
    # every sample LoadGen issued reached the server (one more: the probe before the run)
    assert server.stats()["requests"] - before == report["requests"]["sent"] + 1
    assert lg[rate_key] > 0 and report["throughput"] == lg[rate_key]
    assert ordered(lg["latency_ms"])
    if scenario is not OFFLINE:  # Offline's validity depends on how fast this shared machine is today
        assert (code, report["valid"], lg["result"]) == (0, True, "VALID"), lg["reasons"]


def test_a_latency_bound_far_below_the_server_s_latency_is_invalid_with_loadgen_s_reason(server: Served) -> None:
    args = [a if a != "2000" else "0.01" for a in SERVER_OK]  # 10 us: no HTTP request is that fast
    code, report = run(server.base_url + "/predict", *args)
    assert (code, report["valid"], report["loadgen"]["result"]) == (1, False, "INVALID")
    assert report["loadgen"]["constraints"]["Performance constraints"] is False
    assert "Reduce target QPS to improve latency." in report["loadgen"]["reasons"]
    assert report["invalid_because"] == ["LoadGen: INVALID"]


def test_failed_requests_are_counted_and_make_the_run_invalid_by_our_account(failing_server: Served) -> None:
    code, report = run(failing_server.base_url + "/predict", *SERVER_OK)
    req = report["requests"]
    # the server failed every 4th request it saw, the probe being the first
    assert req["failed"] == failing_server.stats()["failed"] > 0
    assert req["reasons"] == {"HTTP 500": req["failed"]}
    assert report["valid"] is False and code == 1
    assert f"{req['failed']} of {req['sent']} requests failed" in report["invalid_because"]
    # LoadGen still got a response for each: its run ended, with its own verdict printed beside ours
    assert report["loadgen"]["result"] in ("VALID", "INVALID") and report["loadgen"]["query_count"] == req["sent"]


def test_the_cost_efficiency_is_priced_from_the_cluster_spec(server: Served) -> None:
    _, report = run(server.base_url + "/predict", *SINGLE, "--cluster", str(CLUSTER), "--gpus", "8")
    cost, throughput = report["cost"], report["throughput"]
    assert (cost["gpus"], cost["per_gpu_hour"], cost["currency"], cost["cost_per_hour"]) == (8, 20.0, "CNY", 160.0)
    assert cost["cost_efficiency"] == pytest.approx(throughput / (160.0 * 3600))
    assert cost["samples_per_currency"] == pytest.approx(throughput * 3600 / 160.0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("url", "args", "says"),
    [
        (f"http://127.0.0.1:{_free_port()}/predict", [], "cannot connect"),
        ("{base}/nowhere", [], "HTTP 404 to a predict request: check --endpoint, --api"),
        ("{base}/predict", ["--api", "openai", "--model", "m"], "HTTP 400 to a openai request"),
    ],
    ids=["unreachable", "wrong-path", "wrong-api"],
)
def test_an_endpoint_that_cannot_be_used_is_one_error_line_and_no_run(
    server: Served, url: str, args: list[str], says: str, tmp_path: Path
) -> None:
    result = runner.invoke(
        app, ["loadgen", "--endpoint", url.format(base=server.base_url), *args, "--log-dir", str(tmp_path / "logs")]
    )
    assert result.exit_code == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.stderr
    assert not (tmp_path / "logs").exists()  # LoadGen never started


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--scenario", "MultiStream"], "--scenario must be one of Server, Offline, SingleStream"),
        (["--mode", "AccuracyOnly"], "--mode must be one of PerformanceOnly"),
        (["--api", "grpc"], "--api must be one of openai, predict"),
        (["--target-qps", "0"], "--target-qps must be a finite number above 0"),
        (["--target-qps", "nan"], "--target-qps must be a finite number above 0"),
        (["--latency-bound-ms", "-5"], "--latency-bound-ms must be a finite number above 0"),
        (["--latency-percentile", "100"], "--latency-percentile must be between 0 and 100"),
        (["--duration-s", "inf"], "--duration-s must be a finite number above 0"),
        (["--duration-s", "5", "--max-duration-s", "1"], "--max-duration-s must be at least --duration-s"),
        (["--min-queries", "0"], "--min-queries must be a whole number from 1"),
        (["--sample-count", "0"], "--sample-count must be a whole number from 1"),
        (["--concurrency", "100000"], "--concurrency must be a whole number from 1 to 1,024"),
        (["--api", "openai"], "--model is needed with --api openai"),
        (["--gpus", "8"], "--gpus prices the endpoint's GPUs from a cluster spec"),
        (["--cluster", str(CLUSTER), "--gpus", "100000"], "--gpus must be from 1 to 576"),  # 2 x 4 x 72
        (["--cluster", "/nonexistent/cluster.yaml"], "file not found"),
        (["--samples", "/nonexistent/samples.json"], "file not found (--samples)"),
        (["--target-qps", "fast"], "--target-qps must be a number"),
        # Past LoadGen's 64-bit ns/ms a run was a pybind TypeError traceback; past MAX_QUERIES, unbounded memory.
        (["--latency-bound-ms", "1e13"], "--latency-bound-ms is too large for LoadGen's 64-bit ns"),
        (["--duration-s", "1e17"], "--duration-s is too large for LoadGen's 64-bit ms"),
        (["--duration-s", "1", "--max-duration-s", "1e300"], "--max-duration-s is too large for LoadGen's 64-bit ms"),
        (["--target-qps", "1e12"], "--target-qps with --duration-s 10 asks LoadGen for 1e+13 queries"),
        (["--scenario", "Offline", "--target-qps", "1e300"], "--target-qps with --duration-s 10 asks LoadGen"),
        (["--scenario", "SingleStream", "--latency-bound-ms", "1e-9"], "--latency-bound-ms with --duration-s 10"),
    ],
    ids=[
        "multistream",
        "accuracy-mode",
        "api",
        "qps-zero",
        "qps-nan",
        "bound-negative",
        "percentile-100",
        "duration-inf",
        "max-below-min",
        "min-queries-0",
        "sample-count-0",
        "concurrency",
        "openai-no-model",
        "gpus-no-cluster",
        "gpus-too-many",
        "cluster-missing",
        "samples-missing",
        "qps-not-a-number",
        "bound-over-int64-ns",
        "duration-over-int64-ms",
        "max-duration-over-int64-ms",
        "server-queries-over-bound",
        "offline-samples-over-bound",
        "single-stream-queries-over-bound",
    ],
)
def test_bad_options_exit_2_with_one_line_naming_the_option(args: list[str], says: str) -> None:
    result = runner.invoke(app, ["loadgen", "--endpoint", "http://127.0.0.1:9/predict", *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("[1, 2", "not JSON"),
        ('{"prompt": "x"}', "must be a non-empty JSON list"),
        ("[]", "must be a non-empty JSON list"),
        ('["ok", 3]', "sample 1 must be a non-empty string"),
        (b"\xff\xfe[]", "not UTF-8 text"),
    ],
    ids=["truncated", "not-a-list", "empty", "not-a-prompt", "not-utf8"],
)
def test_a_bad_samples_file_is_one_line_naming_the_file(tmp_path: Path, content: str | bytes, says: str) -> None:
    f = tmp_path / "samples.json"
    f.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = runner.invoke(
        app,
        [
            "loadgen",
            "--endpoint",
            "http://127.0.0.1:9/v1/completions",
            "--api",
            "openai",
            "--model",
            "m",
            "--samples",
            str(f),
        ],
    )
    assert result.exit_code == 2 and str(f) in result.stderr and says in result.stderr, result.stderr


def test_without_the_library_the_verb_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlperf_loadgen", None)  # import now raises ImportError
    result = runner.invoke(app, ["loadgen", "--endpoint", "http://127.0.0.1:9/predict"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: the MLPerf LoadGen is not installed: pip install 'rackscale[loadgen]'"


def test_the_table_prints_both_verdicts_and_loadgen_s_reasons(server: Served) -> None:
    args = [a if a != "2000" else "0.01" for a in SERVER_OK]
    result = runner.invoke(app, ["loadgen", "--endpoint", server.base_url + "/predict", *args])
    assert result.exit_code == 1
    out = result.stdout
    assert "result (rackscale)" in out and "result (LoadGen)" in out
    assert "LoadGen: Reduce target QPS to improve latency." in out and "logs: " in out
