"""``rackscale bench``: benchmarks of the scheduling core (mounted by the main CLI as a sub-app)."""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from rackscale.bench import BenchRunError
from rackscale.bench.placement import (
    DEFAULT_GPUS,
    DEFAULT_POLICIES,
    QUICK_GPUS,
    TARGETS,
    check_targets,
    run_benchmark,
)
from rackscale.cli.output import (
    OutputFormat,
    ReportJsonOpt,
    ReportOutputOpt,
    chosen_format,
    emit_document,
    fail,
    given_options,
)
from rackscale.loadgen.settings import MAX_CONCURRENCY
from rackscale.model.specs import MAX_NVL72_RACKS, MAX_SYNTHETIC_JOBS
from rackscale.scheduler import PROFILES
from rackscale.sim.records import DEFAULT_HORIZON_S

app = typer.Typer(help="Benchmarks of the scheduling core: placement latency, throughput and memory at scale.")

QUICK_DECISIONS = 300
QUICK_PENDING = 200
MAX_WORKERS = 64  # processes a benchmark starts at once (simulate's runs, service's clients)
MIN_SPEED = 0.001  # `rackscale serve --speed`'s own bound: the served clock may run this slow, no slower


@app.callback()
def _bench() -> None:
    """Benchmarks of the scheduling core."""


class _ProgressView:
    """One progress bar per configuration, on stderr (stdout stays clean for ``-o json``)."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._tasks: dict[str, TaskID] = {}
        self._phase: dict[str, str] = {}

    def __call__(self, label: str, phase: str, done: int, total: int) -> None:
        task = self._tasks.get(label)
        if task is None:
            task = self._tasks[label] = self._progress.add_task(label, total=total)
        if self._phase.get(label) != phase:
            self._phase[label] = phase
            self._progress.reset(task, total=total, description=f"{label}: {phase}")
        self._progress.update(task, completed=done)


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


ROWS: tuple[tuple[str, str, int], ...] = (
    ("decisions/s", "decisions_per_s", 0),
    ("p50 µs", "p50_us", 0),
    ("p99 µs", "p99_us", 0),
    ("p99 µs, jobs ≤ 72 GPUs", "p99_us_le72", 0),
    ("p99 µs, jobs > 72 GPUs", "p99_us_gt72", 0),
    ("backlog cycle ms", "cycle_10k_pending_ms", 1),
    ("backlog cycle ms, from a list", "cycle_10k_from_list_ms", 1),
    ("peak RSS MB", "peak_rss_mb", 0),
    ("single-rack share (≤ 72)", "single_domain_share", 4),
    ("placed", "placed", 0),
    ("failed", "failed", 0),
    ("mean allocation", "mean_utilisation", 3),
)


def render(result: dict[str, Any], *, console: Console) -> None:
    """Metrics as rows, one column per (size, policy); the ``rackscale`` profile's targets marked."""
    params = result["params"]
    table = Table(
        title=f"Placement benchmark: {params['decisions']:,} decisions per config, "
        f"backlog cycle of {params['pending']:,} pending, seed {params['seed']}"
    )
    table.add_column("metric")
    configs = [(size, policy, res) for size, by in result["results"].items() for policy, res in by.items()]
    for size, policy, _ in configs:
        table.add_column(f"{int(size):,} GPUs\n{policy}", justify="right")
    table.add_column("target", justify="right")
    met = {(size, metric): ok for size, metric, _goal, _got, ok in check_targets(result)}
    for title, key, digits in ROWS:
        cells = []
        for size, policy, res in configs:
            cell = _fmt(res.get(key), digits)
            ok = met.get((size, key)) if policy == "rackscale" else None
            cells.append(cell if ok is None else f"[green]{cell}[/]" if ok else f"[red]{cell}[/]")
        target = f"{TARGETS[key][0]} {TARGETS[key][1]:g}" if key in TARGETS else ""
        table.add_row(title, *cells, target)
    console.print(table)
    missed = [f"{metric} at {int(size):,} GPUs" for (size, metric), ok in met.items() if not ok]
    console.print(
        f"rackscale targets: {len(met) - len(missed)} met, {len(missed)} missed"
        + (f" ({', '.join(missed)})" if missed else "")
    )
    m = result["machine"]
    console.print(f"machine: {m.get('cpu_model')} ({m.get('cpu_count')} CPUs), Python {m.get('python')}")


MAX_BENCH_GPUS = MAX_NVL72_RACKS * 72  # a cluster spec's bound: past it the benchmark's cluster is never built


@app.command()
def placement(
    ctx: typer.Context,
    gpus: Annotated[
        list[int] | None,
        typer.Option(
            "--gpus",
            help="Cluster size in GPUs, rounded to whole NVL72 racks (repeatable; default 10000 and 100000).",
            min=72,
            max=MAX_BENCH_GPUS,
        ),
    ] = None,
    policy: Annotated[
        list[str] | None,
        typer.Option("--policy", help="Scheduler profile (repeatable; default rackscale and first-fit)."),
    ] = None,
    decisions: Annotated[
        int | None,
        typer.Option(
            "--decisions", help="Timed decisions per config (default 20000; 300 with --quick).", min=1, max=10_000_000
        ),
    ] = None,
    pending: Annotated[
        int | None,
        typer.Option(
            "--pending",
            help="Pending jobs in the timed backlog cycle (default 10000; 200 with --quick).",
            min=1,
            max=1_000_000,
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the job stream.")] = 0,
    as_json: ReportJsonOpt = False,
    quick: Annotated[bool, typer.Option("--quick", help="Small clusters and few decisions (for tests).")] = False,
    output: ReportOutputOpt = OutputFormat.table,
) -> None:
    """Time placement decisions on a ~90 % full cluster of NVL72 racks, per cluster size and policy.

    Examples:

      rackscale bench placement --quick
      rackscale bench placement --gpus 10000 --policy rackscale --policy slurm-tree -o json > bench.json

    Without --quick a run takes minutes (20,000 decisions per config on 10,000 and 100,000 GPUs).
    """
    fmt = chosen_format(output, as_json, ctx=ctx)  # before the run: a conflict is said at once
    policies = policy or list(DEFAULT_POLICIES)
    for name in policies:
        if name not in PROFILES:
            raise typer.BadParameter(f"unknown policy {name!r}; choose from {', '.join(sorted(PROFILES))}")
    sizes = gpus or list(QUICK_GPUS if quick else DEFAULT_GPUS)
    n_decisions = decisions if decisions is not None else (QUICK_DECISIONS if quick else 20_000)
    n_pending = pending if pending is not None else (QUICK_PENDING if quick else 10_000)
    err = Console(stderr=True)
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as progress:
        try:
            result = run_benchmark(
                gpus=sizes,
                policies=policies,
                decisions=n_decisions,
                pending=n_pending,
                seed=seed,
                progress=_ProgressView(progress),
            )
        except BenchRunError as exc:
            progress.stop()
            fail(str(exc))
    if fmt is OutputFormat.table:
        render(result, console=Console())
    else:
        emit_document(result, fmt)


@app.command()
def simulate(
    ctx: typer.Context,
    scenario: Annotated[
        list[str] | None,
        typer.Option(
            "--scenario",
            help="philly-speed, philly-backlog, synthetic, million, goals-synthetic (10 seeds), goals-elastic "
            "(the same, half the gangs elastic), elastic-ab (rackscale with and without elastic on those), "
            "goals-philly-x4, goals-philly-x8, schedule-ab (the default with and without night schedules: "
            "docs/scheduled-scaling.md) (repeatable).",
        ),
    ] = None,
    philly: Annotated[
        str | None, typer.Option("--philly", help="Path of philly.csv (default ../shared/traces/philly/philly.csv).")
    ] = None,
    seeds: Annotated[
        int | None,
        typer.Option(
            "--seeds",
            min=1,
            max=1000,
            help="Run the multi-seed scenarios (goals-synthetic, goals-elastic, elastic-ab) on seeds "
            "0..N-1 instead of their 10.",
        ),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            min=1,
            max=MAX_WORKERS,
            help="Runs at once, each in its own process (default 1). The KPIs are the same; the timings are then "
            "measured beside the other runs.",
        ),
    ] = 1,
    as_json: ReportJsonOpt = False,
    output: ReportOutputOpt = OutputFormat.table,
) -> None:
    """Simulator speed (events/s, wall time, peak memory) and quality (idle rate, intra-rack share, mean
    JCT) of rackscale vs first-fit on the Philly trace and the synthetic default.

    Examples:

      rackscale bench simulate --scenario philly-speed
      rackscale bench simulate --scenario synthetic --scenario million -o json > sim-bench.json

      rackscale bench simulate --scenario goals-synthetic --scenario goals-philly-x4

      rackscale bench simulate --scenario goals-synthetic --seeds 40 --workers 2

    The goals-* scenarios run rackscale and every baseline (10 seeds of the default for goals-synthetic) and
    judge issue 13's goals: idle <= 5 %, intra-rack >= 90 %, single-rack training >= 90 %, mean JCT below
    every baseline on every seed, throughput, makespan and SLOs no worse. Each comparison is also paired seed by
    seed against the deciding baseline (mean difference and its 95 % interval); a verdict whose interval holds
    zero reads "(within noise)".

    The Philly scenarios read ../shared/traces/philly/philly.csv unless --philly says where it is.
    """
    from pathlib import Path

    from rackscale.bench.simulate import DEFAULT_SCENARIOS, SCENARIOS, check_philly_trace, run_simulation_benchmark

    err = Console(stderr=True)
    fmt = chosen_format(output, as_json, ctx=ctx)  # before the runs: a conflict is said at once
    names = scenario or list(DEFAULT_SCENARIOS)
    bad = [n for n in names if n not in SCENARIOS]
    if bad:
        fail(f"unknown scenario {', '.join(bad)}; choose from {', '.join(SCENARIOS)}")
    try:
        check_philly_trace(names, Path(philly) if philly else None)  # before the progress bars: one line
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        tasks: dict[str, TaskID] = {}
        finished = bar.add_task("runs finished", total=None)
        gone: set[str] = set()  # runs that finished: a late report of one is ignored

        def show(label: str, done: int, total: int) -> None:
            # (Called from the workers' threads with --workers: each label is one run's, so one thread's.)
            if label in gone:
                return
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=total)
            bar.update(tasks[label], completed=done, total=total)
            if total and done >= total:  # a finished run leaves the display (40 seeds x 7 policies are 280)
                bar.remove_task(tasks.pop(label))
                gone.add(label)
                bar.advance(finished)

        try:
            result = run_simulation_benchmark(
                scenarios=names,
                philly=Path(philly) if philly else None,
                progress=show,
                seeds=seeds,
                workers=workers,
            )
        except (FileNotFoundError, ValueError, BenchRunError) as exc:
            bar.stop()
            fail(str(exc))
    if fmt is not OutputFormat.table:
        emit_document(result, fmt)
        return
    table = Table(title="rackscale bench simulate")
    keys = ("jobs", "sim_s", "events_per_s", "peak_rss_mb", "idle_rate", "intra_rack_traffic_share", "mean_jct_s")
    table.add_column("scenario / policy")
    for k in keys:
        table.add_column(k, justify="right")
    for name, per_policy in result["results"].items():
        for policy, r in per_policy.items():
            if "runs" in r:  # one run per seed: the seed means
                runs = r["runs"]
                mean = {k: _seed_mean([x.get(k) for x in runs]) for k in keys}
                table.add_row(f"{name} / {policy} (mean of {len(runs)} seeds)", *(_fmt_sim(mean[k]) for k in keys))
            else:
                table.add_row(f"{name} / {policy}", *(_fmt_sim(r.get(k)) for k in keys))
    console = Console()
    console.print(table)
    for name, verdicts in result.get("goals", {}).items():
        goals = Table(title=f"{name}: issue 13's goals for rackscale")
        for col in ("goal", "target", "value", "verdict", "detail"):
            goals.add_column(col)
        for v in verdicts:
            verdict = "n/a" if v["met"] is None else "met" if v["met"] else "missed"
            if v["met"] is not None and v.get("within_noise"):
                verdict += " (within noise)"
            value = v["value"]
            shown = ", ".join(f"{k} {x}" for k, x in value.items()) if isinstance(value, dict) else _fmt_sim(value)
            goals.add_row(v["goal"], v["target"], shown, verdict, str(v["detail"]))
        console.print(goals)


def _seed_mean(xs: list[Any]) -> Any:
    vals = [x for x in xs if isinstance(x, int | float)]
    return sum(vals) / len(vals) if vals else None


def _fmt_sim(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return "-" if v is None else f"{v:,}" if isinstance(v, int) else str(v)


@app.command()
def predict(
    ctx: typer.Context,
    philly: Annotated[
        str | None, typer.Option("--philly", help="Path of philly.csv (default ../shared/traces/philly/philly.csv).")
    ] = None,
    quantile: Annotated[
        float, typer.Option("--quantile", help="The quantile the point estimate is.", min=0.01, max=0.99)
    ] = 0.5,
    min_history: Annotated[int, typer.Option("--min-history", help="Jobs a group needs to answer.", min=1)] = 4,
    recent: Annotated[int, typer.Option("--recent", help="Age history every ~N jobs per group; 0: never.", min=0)] = 32,
    as_json: ReportJsonOpt = False,
    output: ReportOutputOpt = OutputFormat.table,
) -> None:
    """Prediction error of the runtime predictor replayed online on Philly (each job predicted from the
    jobs that ended before it was submitted), vs the running median and the queue's last job.

    Examples:

      rackscale bench predict
      rackscale bench predict --quantile 0.8 -o json > predict.json
    """
    from pathlib import Path

    from rackscale.bench.predict import PREDICTORS, rows, run_predict_benchmark

    fmt = chosen_format(output, as_json, ctx=ctx)  # before the replay: a conflict is said at once
    try:
        result = run_predict_benchmark(
            philly=Path(philly) if philly else None, quantile=quantile, min_history=min_history, recent=recent or None
        )
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    if fmt is not OutputFormat.table:
        emit_document(result, fmt)
        return
    table = Table(title=f"rackscale bench predict: {result['jobs']:,} Philly jobs, |ln(pred/actual)| and more")
    table.add_column("metric")
    for name in PREDICTORS:
        table.add_column(name, justify="right")
    for key, values in rows(result):
        table.add_row(key, *(_fmt_sim(v) for v in values))
    Console().print(table)


def _cycle_rows(c: dict[str, float] | None) -> list[tuple[str, str, str]]:
    if not c:
        return []
    return [
        (
            "scheduling cycles: n / mean ms / over 50 ms",
            f"{c['count']:,.0f} / {c['mean_ms']:.1f} / {c['over_50ms']:,.0f}",
            "",
        )
    ]


LOAD_ONLY = ("jobs", "crash_after", "durability")  # the load (and crash) mode's: the scale mode has its own
SCALE_ONLY = ("page_loads", "list_every", "cycle_max_busy")  # the scale mode's (--backlog): the load has none


@app.command()
def service(
    ctx: typer.Context,
    jobs: Annotated[
        int, typer.Option("--jobs", help="Job submissions to send (at most).", min=1, max=MAX_SYNTHETIC_JOBS)
    ] = 20_000,
    concurrency: Annotated[
        int, typer.Option("--concurrency", help="Keep-alive connections in all.", min=1, max=MAX_CONCURRENCY)
    ] = 32,
    duration_limit: Annotated[
        float,
        typer.Option("--duration-limit", help="Stop sending after this many seconds.", min=1, max=DEFAULT_HORIZON_S),
    ] = 60.0,
    crash_after: Annotated[
        int | None,
        typer.Option("--crash-after", help="kill -9 the server after this many acknowledged submissions.", min=1),
    ] = None,
    durability: Annotated[str, typer.Option("--durability", help="normal or full (SQLite synchronous).")] = "normal",
    racks: Annotated[
        int, typer.Option("--racks", help="NVL72 racks of the served cluster.", min=1, max=MAX_BENCH_GPUS // 72)
    ] = 16,
    speed: Annotated[
        float, typer.Option("--speed", help="Service clock speed (jobs' durations / speed).", min=MIN_SPEED)
    ] = 100.0,
    workers: Annotated[
        int, typer.Option("--workers", help="Client processes sharing the connections.", min=1, max=MAX_WORKERS)
    ] = 2,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the job mix.")] = 0,
    rate: Annotated[
        float,
        typer.Option(
            "--rate",
            help="Offer this many submissions/s in all (paced; latency counts from each send time). "
            "0: as fast as replies come back.",
            min=0,
        ),
    ] = 0.0,
    backlog: Annotated[
        int,
        typer.Option(
            "--backlog",
            help="Scale mode: first fill the cluster and leave this many jobs pending, then measure under the "
            "paced load (--rate, default 1,000/s; --duration-limit s) cycles, GET /v1/jobs, /metrics, the page, RSS.",
            min=0,
            max=MAX_SYNTHETIC_JOBS,
        ),
    ] = 0,
    page_loads: Annotated[
        int, typer.Option("--page-loads", help="Scale mode: web page loads in headless Chromium.", min=0)
    ] = 3,
    list_every: Annotated[
        float,
        typer.Option(
            "--list-every",
            help="Scale mode: seconds between pages of GET /v1/jobs (500 pending rows); 0: no listing.",
            min=0.0,
        ),
    ] = 0.1,
    cycle_max_busy: Annotated[
        float | None,
        typer.Option(
            "--cycle-max-busy",
            help="Scale mode: the served process's `serve --cycle-max-busy` (default: serve's own, 0.5).",
            min=0.05,
            max=1.0,
        ),
    ] = None,
    output: ReportOutputOpt = OutputFormat.table,
    as_json: ReportJsonOpt = False,
) -> None:
    """Load (and crash) `rackscale serve` over loopback: submissions/s, submit latency, placements; with
    --crash-after, kill -9 mid-load, restart and verify that no acknowledged job was lost.

    Examples:

      rackscale bench service --jobs 2000
      rackscale bench service --jobs 20000 --concurrency 32 --crash-after 5000 --durability full
      rackscale bench service --racks 1389 --backlog 50000 --speed 1 --rate 1000 --duration-limit 20

    Exit code 1: the store or the allocations came out inconsistent (with --crash-after, or an acknowledged
    job was lost or doubled across the restart).
    """
    from rackscale.bench.service import run_service_benchmark

    err = Console(stderr=True)
    if durability not in ("normal", "full"):
        fail(f"--durability must be normal or full (got {durability!r})")
    fmt = chosen_format(output, as_json, ctx=ctx)
    if backlog and (ignored := given_options(ctx, LOAD_ONLY)):
        fail(f"{ignored[0]} is for the load mode; --backlog measures the scale mode, which ignores it: drop one")
    if not backlog and (ignored := given_options(ctx, SCALE_ONLY)):
        fail(f"{ignored[0]} is for the scale mode: give --backlog N too, or drop it")
    for name, value in (("--speed", speed), ("--rate", rate), ("--list-every", list_every)):
        if not math.isfinite(value):  # their mins refuse NaN; infinity would pace, clock or list nothing
            fail(f"{name} must be a finite number (got {value:g})")
    if backlog:
        _service_scale(
            racks,
            backlog,
            rate or 1000.0,
            duration_limit,
            concurrency,
            workers,
            speed,
            seed,
            page_loads,
            list_every,
            cycle_max_busy,
            fmt,
            err,
        )
        return
    result = run_service_benchmark(
        jobs=jobs,
        concurrency=concurrency,
        duration_limit=duration_limit,
        crash_after=crash_after,
        durability=durability,
        racks=racks,
        speed=speed,
        workers=workers,
        seed=seed,
        rate=rate,
        log=lambda msg: err.print(msg, highlight=False),
    )
    if fmt is OutputFormat.table:
        _render_service(result, Console())
    else:
        emit_document(result, fmt)
    if not result["ok"]:
        raise typer.Exit(1)


def _service_scale(
    racks: int,
    backlog: int,
    rate: float,
    duration: float,
    concurrency: int,
    workers: int,
    speed: float,
    seed: int,
    page_loads: int,
    list_every: float,
    cycle_max_busy: float | None,
    fmt: OutputFormat,
    err: Console,
) -> None:
    import os
    import shutil

    from rackscale.bench.service_scale import run_scale_benchmark, scale_rows

    chromium = os.environ.get("RACKSCALE_CHROMIUM") or shutil.which("chromium")
    if page_loads and chromium is None:
        err.print("[red]error:[/] --page-loads needs Chromium: apt-get install chromium (or RACKSCALE_CHROMIUM=PATH)")
        raise typer.Exit(2)
    result = run_scale_benchmark(
        racks=racks,
        backlog=backlog,
        rate=rate,
        duration=duration,
        concurrency=concurrency,
        workers=workers,
        speed=speed,
        seed=seed,
        page_load_count=page_loads,
        list_every=list_every,
        cycle_max_busy=cycle_max_busy,
        chromium=chromium,
        log=lambda msg: err.print(msg, highlight=False),
    )
    if fmt is not OutputFormat.table:
        emit_document(result, fmt)
    else:
        table = Table(
            title=f"Service at scale: {racks:,} racks, backlog {backlog:,}, paced at {rate:,.0f}/s, "
            f"{duration:g} s, speed {speed:g}"
        )
        for col, just in (("metric", "left"), ("value", "right"), ("goal", "right")):
            table.add_column(col, justify=just)  # type: ignore[arg-type]
        for row in scale_rows(result):
            table.add_row(*row)
        Console().print(table)
        v = result["verdict"]
        problems = v["store_problems"] + v["allocation_problems"]
        said = "[green]OK[/]" if result["ok"] else "[red]FAILED[/]: " + "; ".join(problems[:5])
        Console().print(f"verdict: {said}")
    if not result["ok"]:
        raise typer.Exit(1)


def _render_service(r: dict[str, Any], console: Console) -> None:
    p, lat, v = r["params"], r["latency_ms"], r["verdict"]
    table = Table(
        title=f"Service load: {p['jobs']:,} jobs, {p['concurrency']} connections ({p['workers']} client processes), "
        f"durability {p['durability']}, {p['racks']} racks, speed {p['speed']:g}, "
        + (f"paced at {p['rate']:,.0f}/s" if p.get("rate") else "unpaced (as fast as replies come)")
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")
    rows: list[tuple[str, str, str]] = [
        ("accepted (2xx)", _fmt(r["accepted"]), ""),
        ("submissions/s", _fmt(r["submissions_per_s"], 0), ">= 1,000"),
        ("p50 ms", _fmt(lat["p50"], 2), ""),
        ("p99 ms", _fmt(lat["p99"], 2), "<= 50"),
        ("max ms", _fmt(lat["max"], 1), ""),
        ("non-2xx", ", ".join(f"{k}: {n}" for k, n in r["non_2xx"].items()) or "0", "0"),
        ("no reply", _fmt(r["no_reply"]), ""),
        ("wall s", _fmt(r["wall_s"], 1), ""),
        ("CPU s: server / clients", f"{_fmt(r['cpu_s']['server'], 1)} / {_fmt(r['cpu_s']['clients'], 1)}", ""),
        ("placed during load", _fmt(r["scheduled_during_load"], 0), "> 0"),
        ("finished during load", _fmt(r["finished_during_load"], 0), ""),
        *_cycle_rows(r.get("cycles_during_load")),
        ("jobs pending / running / completed", " / ".join(_fmt(n) for n in r["jobs_by_status"].values()), ""),
    ]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    if r.get("crash"):
        c = r["crash"]
        console.print(
            f"crash: kill -9 after {c['acked_at_kill']:,} acks ({c['running_at_kill']} running), "
            f"restart {c['restart_s']} s; "
            f"acked {v['acked']:,}, lost {v['lost']}, duplicates {v['duplicates']}, no-reply {v['in_doubt']} "
            f"({v['in_doubt_committed']} committed), running-before not running/completed: "
            f"{len(v['running_before_not_running_or_completed'])}"
        )
    problems = v.get("store_problems", []) + v.get("allocation_problems", [])
    verdict = "[green]OK[/]" if r["ok"] else "[red]FAILED[/]"
    console.print(f"verdict: {verdict}" + ("" if not problems else ": " + "; ".join(problems[:5])))


def _register_perf() -> None:
    from rackscale.cli.bench_perf import bench_perf, bench_perf_peer

    app.command(name="perf")(bench_perf)
    app.command(name="perf-peer")(bench_perf_peer)


_register_perf()
