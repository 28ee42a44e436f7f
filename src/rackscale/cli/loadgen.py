"""``rackscale loadgen``: the real MLPerf LoadGen against an HTTP inference endpoint, LoadGen's own verdict
and latencies, the requests that failed, and the plan's cost efficiency priced from the cluster spec
(docs/loadgen.md). Needs the ``loadgen`` extra."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rackscale.cli.client import EXIT_USAGE, die
from rackscale.cli.output import OutputFormat, console, emit, printable

if TYPE_CHECKING:
    from rackscale.loadgen.cost import CostEfficiency
    from rackscale.loadgen.endpoints import Failures
    from rackscale.loadgen.summary import LoadGenResult

EXIT_INVALID, EXIT_NO_RUN = 1, 3
SEED_COMMAND = "mlperf_loadgen --test_mode=PerformanceOnly --scenario=Server --model=resnet50"
PERCENTILES = (50.0, 90.0, 95.0, 97.0, 99.0, 99.9)


def loadgen(
    endpoint: Annotated[str, typer.Option("--endpoint", help="URL the samples are POSTed to.", show_default=False)],
    api: Annotated[str, typer.Option("--api", help="openai (/v1/completions) or predict ({'inputs': ...}).")] = (
        "predict"
    ),
    scenario: Annotated[str, typer.Option("--scenario", help="Server, Offline or SingleStream.")] = "Server",
    mode: Annotated[str, typer.Option("--mode", help="LoadGen test mode: PerformanceOnly.")] = "PerformanceOnly",
    target_qps: Annotated[
        float, typer.Option("--target-qps", help="Server: arrival rate (Poisson). Offline: the expected throughput.")
    ] = 10.0,
    latency_bound_ms: Annotated[
        float, typer.Option("--latency-bound-ms", help="Server: the latency bound. SingleStream: expected latency.")
    ] = 100.0,
    latency_percentile: Annotated[
        float | None,
        typer.Option(
            "--latency-percentile", help="Percentile the bound applies to (LoadGen: Server 99, SingleStream 90)."
        ),
    ] = None,
    duration_s: Annotated[float, typer.Option("--duration-s", help="LoadGen's min duration (MLPerf: 600).")] = 10.0,
    max_duration_s: Annotated[
        float | None, typer.Option("--max-duration-s", help="Stop after this many seconds (default: no cap).")
    ] = None,
    min_queries: Annotated[int, typer.Option("--min-queries", help="LoadGen's min query count.")] = 100,
    sample_count: Annotated[int, typer.Option("--sample-count", help="Samples in LoadGen's sample library.")] = 1024,
    samples_file: Annotated[
        Path | None,
        typer.Option(
            "--samples", help="JSON list of samples: prompts (openai) or inputs (predict). Default: synthetic."
        ),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model name sent to an openai endpoint.")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="max_tokens of each completion.", min=1)] = 16,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Requests in flight at most (threads).")] = 32,
    timeout_s: Annotated[float, typer.Option("--timeout-s", help="Seconds one request may take.", min=0.001)] = 30.0,
    cluster_file: Annotated[
        Path | None, typer.Option("--cluster", help="Cluster spec (YAML/JSON): the price per GPU-hour.")
    ] = None,
    gpus: Annotated[
        int | None, typer.Option("--gpus", help="GPUs the endpoint uses (default: every GPU of --cluster).")
    ] = None,
    log_dir: Annotated[
        Path | None, typer.Option("--log-dir", help="Where LoadGen writes its logs (default: a new temp dir).")
    ] = None,
    output: Annotated[OutputFormat, typer.Option("-o", "--output", help="table, json or yaml.")] = OutputFormat.table,
) -> None:
    """Run the real MLPerf LoadGen against an inference endpoint and report LoadGen's own result.

    Each LoadGen sample is one HTTP request (openai: POST {model, prompt, max_tokens}; predict: POST
    {"inputs": [...]}); a failed request is counted and still completed to LoadGen. The run is VALID by
    our account only when LoadGen says VALID and no request failed: both are printed. With --cluster the
    plan's cost efficiency throughput / (cost_per_hour x 3600) is added, cost_per_hour = GPUs x the spec's
    pricing.perGpuHour.

    The plan's command, mapped:\n
      SEED_COMMAND\n
      rackscale loadgen --endpoint URL --mode PerformanceOnly --scenario Server --model resnet50

    Examples:\n
      rackscale loadgen --endpoint http://10.0.0.5:8000/predict --target-qps 200 --latency-bound-ms 15\n
      rackscale loadgen --endpoint http://10.0.0.5:8000/v1/completions --api openai --model llama3 --scenario Offline\n
      rackscale loadgen --endpoint http://10.0.0.5:8000/predict --cluster examples/cluster-nvl72.yaml --gpus 8 -o json

    Exit codes: 0 VALID; 1 INVALID (LoadGen's verdict, or requests failed); 2 bad usage or input (the
    extra not installed); 3 no run (the endpoint cannot be reached, or refuses the request).
    """
    from rackscale.loadgen.endpoints import Api, HttpEndpoint, SampleError, Tally, load_samples, synthetic_samples
    from rackscale.loadgen.settings import LoadGenMissing, Mode, RunOptions, Scenario, SettingsError, import_loadgen

    api_ = _choice("--api", api, Api)
    opts = _options(
        RunOptions,
        SettingsError,
        scenario=_choice("--scenario", scenario, Scenario),
        mode=_choice("--mode", mode, Mode),
        target_qps=target_qps,
        latency_bound_ms=latency_bound_ms,
        latency_percentile=latency_percentile,
        min_duration_s=duration_s,
        max_duration_s=max_duration_s,
        min_query_count=min_queries,
        sample_count=sample_count,
        concurrency=concurrency,
    )
    url = endpoint.strip()
    if not url.startswith(("http://", "https://")):
        die(f"--endpoint must be an http:// or https:// URL (got {endpoint!r})", EXIT_USAGE)
    if api_ is Api.OPENAI and not model:
        die("--model is needed with --api openai (the model name the endpoint serves)", EXIT_USAGE)
    cluster = _cluster(cluster_file, gpus)
    try:
        samples = load_samples(samples_file, api_) if samples_file else synthetic_samples(api_, min(sample_count, 4096))
    except SampleError as e:
        die(str(e), EXIT_USAGE)
    try:
        lg = import_loadgen()
    except LoadGenMissing as e:
        die(str(e), EXIT_USAGE)
    import httpx

    from rackscale.loadgen.summary import SummaryError, load_result
    from rackscale.loadgen.sut import log_dir_for, run_loadgen

    tally = Tally()
    try:
        target = HttpEndpoint(
            url=url, api=api_, samples=samples, tally=tally, model=model, max_tokens=max_tokens,
            timeout_s=timeout_s, connections=concurrency,
        )  # fmt: skip
    except (ValueError, httpx.InvalidURL) as e:
        die(f"--endpoint: {e}", EXIT_USAGE)
    try:
        problem = target.probe()
        if problem is not None:
            die(problem, EXIT_NO_RUN)
        try:
            where = log_dir_for(log_dir)
        except OSError as e:
            die(f"--log-dir {log_dir}: cannot create it ({e.strerror or e})", EXIT_USAGE)
        files = run_loadgen(opts=opts, endpoint=target, log_dir=where, lg=lg)
    finally:
        target.close()
    try:
        result = load_result(files.summary, files.detail)
    except SummaryError as e:
        die(str(e), EXIT_NO_RUN)
    report = _report(url, api_.value, result, tally.snapshot(), cluster, gpus, files.log_dir, files.callback_errors)
    _emit(report, output)
    if not report["valid"]:
        raise typer.Exit(EXIT_INVALID)


loadgen.__doc__ = (loadgen.__doc__ or "").replace("SEED_COMMAND", SEED_COMMAND)


def _choice(option: str, value: str, enum: Any) -> Any:
    by_name = {m.value.lower(): m for m in enum}
    if value.lower() not in by_name:
        die(f"{option} must be one of {', '.join(m.value for m in enum)} (got {value!r})", EXIT_USAGE)
    return by_name[value.lower()]


def _options(cls: Any, error: type[Exception], **kwargs: Any) -> Any:
    try:
        return cls(**kwargs)
    except error as e:
        die(str(e), EXIT_USAGE)


def _cluster(path: Path | None, gpus: int | None) -> Any:
    if path is None:
        if gpus is not None:
            die("--gpus prices the endpoint's GPUs from a cluster spec: give --cluster FILE too", EXIT_USAGE)
        return None
    from rackscale.loaders import load_cluster
    from rackscale.model.specs import SpecError

    try:
        cluster = load_cluster(path)
    except SpecError as e:
        die(str(e), EXIT_USAGE)
    if gpus is not None and not 1 <= gpus <= cluster.total_gpus:
        die(f"--gpus must be from 1 to {cluster.total_gpus} (the GPUs of {cluster.name}; got {gpus})", EXIT_USAGE)
    return cluster


def _report(
    url: str,
    api: str,
    r: LoadGenResult,
    failures: Failures,
    cluster: Any,
    gpus: int | None,
    log_dir: Path,
    callback_errors: int,
) -> dict[str, Any]:
    from rackscale.loadgen.cost import cost_efficiency

    ours = r.valid and failures.failed == 0 and callback_errors == 0
    why: list[str] = [] if r.valid else ["LoadGen: INVALID"]
    if failures.failed:
        why.append(f"{failures.failed} of {failures.sent} requests failed")
    if callback_errors:
        why.append(f"{callback_errors} errors in the SUT's callbacks")
    cost = None
    if cluster is not None and r.throughput is not None:
        cost = _cost_dict(cost_efficiency(cluster=cluster, throughput=r.throughput, gpus=gpus))
    return {
        "endpoint": url,
        "api": api,
        "scenario": r.scenario,
        "mode": r.mode,
        "valid": ours,
        "invalid_because": why,
        "loadgen": {
            "result": "VALID" if r.valid else "INVALID",
            "reasons": list(r.reasons),
            "constraints": {c.name: c.satisfied for c in r.constraints},
            "scheduled_qps": r.scheduled_qps,
            "completed_qps": r.completed_qps,
            "samples_per_second": r.samples_per_second,
            "qps_with_overhead": r.qps_with_overhead,
            "query_count": r.query_count,
            "latency_ms": _latencies(r),
            "errors": list(r.errors),
            "warnings": list(r.warnings),
        },
        "requests": {"sent": failures.sent, "failed": failures.failed, "reasons": dict(failures.reasons)},
        "throughput": r.throughput,
        "cost": cost,
        "log_dir": str(log_dir),
    }


def _latencies(r: LoadGenResult) -> dict[str, float | None]:
    def ms(ns: int | None) -> float | None:
        return None if ns is None else round(ns / 1e6, 3)

    out = {"min": ms(r.min_latency_ns), "mean": ms(r.mean_latency_ns), "max": ms(r.max_latency_ns)}
    for p in PERCENTILES:
        out[f"p{p:g}"] = ms(r.percentile_ns(p))
    return out


def _cost_dict(c: CostEfficiency) -> dict[str, Any]:
    return {
        "cluster": c.cluster,
        "gpus": c.gpus,
        "per_gpu_hour": c.per_gpu_hour,
        "currency": c.currency,
        "cost_per_hour": c.cost_per_hour,
        "cost_efficiency": c.seed_efficiency,
        "samples_per_currency": c.samples_per_currency,
        "cost_per_million_samples": c.cost_per_million_samples,
    }


def _emit(report: dict[str, Any], fmt: OutputFormat) -> None:
    if fmt is not OutputFormat.table:
        emit(report, fmt)
        return
    lg = report["loadgen"]
    ours = "VALID" if report["valid"] else "INVALID: " + "; ".join(report["invalid_because"])
    rows: list[dict[str, Any]] = [
        {"": "result (rackscale)", "value": ours},
        {"": "result (LoadGen)", "value": lg["result"]},
        {"": "scenario", "value": f"{report['scenario']}, {report['mode']}"},
    ]
    for key, label in (
        ("scheduled_qps", "scheduled samples/s"),
        ("completed_qps", "completed samples/s"),
        ("samples_per_second", "samples/s"),
        ("qps_with_overhead", "queries/s (with LoadGen's overhead)"),
        ("query_count", "queries"),
    ):
        if lg[key] is not None:
            rows.append({"": label, "value": lg[key]})
    lat = lg["latency_ms"]
    rows.append({"": "latency ms (p50 / p90 / p99)", "value": " / ".join(_ms(lat[k]) for k in ("p50", "p90", "p99"))})
    req = report["requests"]
    rows.append({"": "requests failed", "value": f"{req['failed']} of {req['sent']}"})
    for reason, n in req["reasons"].items():
        rows.append({"": "  failure", "value": f"{n} x {reason}"})
    if (c := report["cost"]) is not None:
        rows.append({"": "cost per hour", "value": f"{c['gpus']} GPUs x {c['per_gpu_hour']:g} {c['currency']}"})
        rows.append({"": "cost efficiency (plan)", "value": c["cost_efficiency"]})
        rows.append({"": f"samples per {c['currency']}", "value": c["samples_per_currency"]})
    emit(rows, fmt, columns=["", "value"], title=f"LoadGen against {report['endpoint']}")
    for reason in lg["reasons"]:
        console.print(printable(f"LoadGen: {reason}"), markup=False, highlight=False)
    console.print(printable(f"logs: {report['log_dir']}"), markup=False, highlight=False)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"
