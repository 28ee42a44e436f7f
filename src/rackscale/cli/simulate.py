"""``rackscale simulate``: replay a workload on a modelled cluster, rackscale beside its baselines."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from rackscale.cli.output import OutputFormat, chosen_format, console, emit, err_console, fail, given_options, printable
from rackscale.host.runs import Estimates
from rackscale.sim.summary import (
    GOALS,
    NA,
    SAME_REST,
    fmt_kpi,
    goal_text,
    judge_all,
    label,
    mark,
    plural,
    policy_note,
    timeline,
    verdict,
)

if TYPE_CHECKING:
    from rackscale.workloads.trace_load import TraceLoad

KPI_ROWS = (
    "completed",
    "failed",
    "allocation_ratio",
    "idle_rate",
    "idle_fitting_rate",
    "intra_rack_traffic_share",
    "rdma_bytes",
    "single_rack_share",
    "fewest_racks_share",
    "mean_jct_s",
    "p99_jct_s",
    "mean_queueing_s",
    "p99_queueing_s",
    "training_samples_per_s",
    "inference_tokens_per_s",
    "slo_attainment",
    "interactivity_slo_attainment",
    "ttft_slo_attainment",
    "mean_user_tokens_per_s",
    "mean_ttft_s",
    "cost_per_million_tokens",
    "cost_per_million_samples",
    "cost_efficiency_samples",
    "fragmentation",
    "preemptions",
    "lost_gpu_hours",
    "makespan_s",
)
KPI_GOALS = GOALS  # the goals of DESIGN.md: a threshold is met or missed; "higher"/"lower" ranks the policies
LABEL_MIN = 14  # the narrowest the KPI column gets before the table gives way to a list
MARK_STYLES = {"met": "green", "best": "green", "missed": "red", "worse": "red", "same": "dim"}


SYNTHETIC_ONLY = ("n_jobs", "elastic_share")  # the embedded mix's knobs: a trace or job file has its own jobs
TRACE_ONLY = ("gpu_scale", "strict", "tenant_map")  # a trace's: the synthetic mix has no rows to scale or skip


def _check_workload_options(ctx: typer.Context, *, trace: bool, jobs_file: bool) -> None:
    """An option the chosen workload ignores is one line, not dropped without a word (``--n-jobs`` with a
    trace ran the trace and said nothing of the jobs asked for)."""
    if (trace or jobs_file) and (ignored := given_options(ctx, SYNTHETIC_ONLY)):
        fail(f"{ignored[0]} is for the embedded synthetic mix; --trace and --jobs bring their own jobs: drop it")
    if not trace and (ignored := given_options(ctx, TRACE_ONLY)):
        fail(f"{ignored[0]} is for a --trace, which is not given: drop it, or give --trace")


def simulate(
    ctx: typer.Context,
    cluster_file: Path | None = typer.Option(None, "--cluster", help="Cluster spec (YAML). Default: NVL72 racks."),
    racks: int | None = typer.Option(None, "--racks", help="Racks of the default NVL72 cluster (default 4)."),
    trace: str | None = typer.Option(
        None, "--trace", help="A real trace as FORMAT:PATH: philly:, alibaba: (pods), csv:, jsonl:."
    ),
    jobs_file: Path | None = typer.Option(None, "--jobs", help="Job specs (YAML/JSON) instead of a trace."),
    n_jobs: int = typer.Option(600, "--n-jobs", min=1, help="Jobs in the synthetic mix."),
    duration_h: float | None = typer.Option(
        None,
        "--duration",
        min=0.001,
        max=1e6,
        help="Hours of workload: the synthetic window (24 h) or a trace's first hours.",
    ),
    arrival_scale: float = typer.Option(1.0, "--arrival-scale", min=0.001, help="Arrival-rate factor (2 = twice)."),
    gpu_scale: float = typer.Option(1.0, "--gpu-scale", min=0.001, help="GPU-count factor for trace jobs."),
    elastic_share: float = typer.Option(
        0.0,
        "--elastic-share",
        min=0.0,
        max=1.0,
        help="Share of the synthetic mix's training gangs that are elastic (minGpus half, maxGpus twice; LLM gangs in "
        "whole data-parallel ranks).",
    ),
    strict: bool = typer.Option(False, "--strict", help="Reject a trace with malformed rows (default: skip them)."),
    tenant_map: str | None = typer.Option(
        None, "--tenant-map", help="Rename trace queues (tenants): OLD=NEW[,OLD=NEW...], e.g. 6214e9=research."
    ),
    policy: str = typer.Option("rackscale", "--policy", help="Profile under test."),
    baselines: list[str] = typer.Option(["first-fit"], "--baseline", help="Baseline profiles (repeatable)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the synthetic workload, failures and random placers."),
    estimates: Estimates = typer.Option(
        Estimates.GIVEN,
        "--estimates",
        help="Durations the scheduler plans with: given (the jobs' own; a prediction from history where none), "
        "predicted (always history's: users who give none), none.",
    ),
    gpu_mtbf_h: float | None = typer.Option(None, "--gpu-mtbf-h", help="Mean hours between failures of one GPU."),
    node_mtbf_h: float | None = typer.Option(None, "--node-mtbf-h", help="Mean hours between failures of a node."),
    uplink_mtbf_h: float | None = typer.Option(None, "--uplink-mtbf-h", help="Mean hours between uplink failures."),
    maintenance: list[str] = typer.Option(
        [],
        "--maintenance",
        metavar="RACK@START+DURATION[~GRACE]",
        help="A planned rack drain, e.g. r000@2h+4h~10m (repeat for more): its jobs stop after the grace.",
    ),
    schedule_files: list[Path] = typer.Option(
        [], "--schedule", metavar="FILE", help="A ScalingSchedule (YAML) applied on virtual time (repeatable)."
    ),
    start_time: str | None = typer.Option(
        None, "--start-time", help="ISO 8601 instant of virtual time 0, for cron times (default 2026-01-05T00:00Z)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output: {'runs': [...]}."),
    output: OutputFormat = typer.Option(OutputFormat.table, "-o", "--output", help="table, json or yaml."),
    report: Path | None = typer.Option(None, "--report", help="Also write a self-contained HTML report here."),
) -> None:
    """Replay a workload with each policy and print the KPIs side by side.

    With no options: 4 NVL72 racks (288 GPUs) and 24 h of the embedded synthetic mix (training gangs
    sized like Philly plus a multi-rack tail, inference services with a daily load curve, batch jobs),
    rackscale vs first-fit (the default Kubernetes scheduler's spread). Placement changes speed: a gang
    split over racks runs at RDMA speed. The table judges each goal (met / missed, best / worse), names
    what each policy stands for, says why the last job ends days after the last arrival (the multi-rack
    tail), and ends with what the policy under test gained and lost against each baseline. n/a: nothing
    to measure (e.g. no job completed). --json keeps raw numbers (null for n/a) and adds goals, verdict
    and timeline.

    Examples:\n
      rackscale simulate\n
      rackscale simulate --racks 8 --baseline slurm-tree --baseline best-fit\n
      rackscale simulate --elastic-share 0.5 --baseline tiresias\n
      rackscale simulate --trace philly:../shared/traces/philly/philly.csv --racks 32 --arrival-scale 4\n
      rackscale simulate --cluster examples/seed-gpucluster.yaml --json\n
      rackscale simulate --maintenance r000@6h+4h~10m     # what a rack drain costs\n
      rackscale simulate --schedule examples/schedule-training-quota.yaml   # a night quota's what-if
    """
    from dataclasses import replace

    from rackscale.scheduler import PROFILES
    from rackscale.sim.gc_policy import batch_gc
    from rackscale.sim.simulator import Simulator
    from rackscale.sweep.cells import Names, build_run
    from rackscale.sweep.spec import CellOptions, SweepError

    for p in (policy, *baselines):
        if p not in PROFILES:
            fail(f"unknown policy {p!r}; choose one of: {', '.join(PROFILES)}")
    output = chosen_format(output, as_json, ctx=ctx)  # (before the runs: a conflict is said at once)
    _check_workload_options(ctx, trace=trace is not None, jobs_file=jobs_file is not None)
    # The flags as one cell's options, built by the sweep's builder: a sweep cell is this command's run by
    # construction. Not validated as a sweep document is: its bounds are a document's, simulate has its own
    # (typer's min/max; the builder checks the rest), e.g. a negative --seed runs here as it always has.
    options = CellOptions.model_construct(
        cluster=None if cluster_file is None else str(cluster_file),
        racks=racks,
        trace=trace,
        jobs_file=None if jobs_file is None else str(jobs_file),
        jobs=n_jobs,
        duration_h=duration_h,
        arrival_scale=arrival_scale,
        gpu_scale=gpu_scale,
        elastic_share=elastic_share,
        strict=strict,
        tenant_map=_tenants(tenant_map),
        policy=policy,
        seed=seed,
        estimates=estimates,
        gpu_mtbf_h=gpu_mtbf_h,
        node_mtbf_h=node_mtbf_h,
        uplink_mtbf_h=uplink_mtbf_h,
        maintenance=tuple(maintenance),
        schedules=tuple(str(f) for f in schedule_files),
        start_time=start_time,
    )
    flags = Names(  # what the builder's errors call the inputs here
        cluster="--cluster",
        racks="--racks",
        trace="--trace",
        jobs_file="--jobs",
        duration="--duration",
        jobs="--n-jobs",
        arrival_scale="--arrival-scale",
        maintenance="--maintenance",
        schedules="--schedule",
        start_time="--start-time",
    )
    try:
        built = build_run(options, names=flags, on_trace=_print_skipped)
    except SweepError as e:
        fail(str(e))
    cluster, jobs, schedules = built.cluster, built.jobs, built.config.schedules
    policies = list(dict.fromkeys((policy, *baselines)))
    runs: list[dict[str, Any]] = []
    results = []
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} jobs"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        for p in policies:
            task = bar.add_task(f"{p}: {len(jobs)} jobs on {cluster.total_gpus} GPUs", total=len(jobs))
            last = [0.0]

            def tick(done: int, total: int, now: float, task: Any = task, last: list[float] = last) -> None:
                t = time.monotonic()
                if t - last[0] > 0.2 or done == total:  # refresh a few times a second, not per event
                    last[0] = t
                    bar.update(task, completed=done)

            with batch_gc():  # the collector's settings for a batch run: what exists is frozen (gc_policy.py)
                result = Simulator(cluster, jobs, replace(built.config, policy=p)).run(on_progress=tick)
            results.append(result)
            runs.append({"policy": p, "kpis": result.kpis.as_dict(), "failed_reasons": result.failed_reasons()})
            if schedules:
                runs[-1]["schedules"] = _schedule_effect(result, cluster.pricing.per_gpu_hour)
    if report is not None:
        from rackscale.sim.report import write_report

        write_report(report, cluster=cluster, results=results, workload=f"{len(jobs)} jobs")
        err_console.print(f"report written to {report}")
    currency = cluster.pricing.currency
    kpis = {str(r["policy"]): r["kpis"] for r in runs}
    goals = judge_all(kpis, currency)
    verdicts = [verdict(policies[0], b, kpis[policies[0]], kpis[b]) for b in policies[1:]]
    tl = timeline(results, cluster)
    if output is not OutputFormat.table:
        payload = {
            "cluster": {"name": cluster.name, "gpus": cluster.total_gpus, "racks": len(cluster.racks)},
            "jobs": len(jobs),
            "runs": runs,
            "policies": {p: policy_note(p) for p in policies},
            "goals": goals,
            "verdict": verdicts,
            "timeline": tl.as_dict(),
        }
        emit(payload, output)
        return
    size = f"{cluster.total_gpus:,} GPUs, {plural(len(cluster.racks), 'rack')}"
    title = f"{plural(len(jobs), 'job')} on {cluster.name} ({size})"
    _print_kpis(title, policies, kpis, goals, currency)
    notes = [f"{p} = {policy_note(p)}" for p in policies]
    if len(policies) > 1:
        notes.append(f"({SAME_REST})")
    notes.append(f"goal: met / missed its threshold, or best / worse of the policies; {NA}: nothing to measure")
    notes.append(tl.text())
    for r in runs:
        reasons = sorted(r["failed_reasons"].items(), key=lambda kv: -kv[1])
        if reasons:
            shown = "; ".join(f"{n:,} x {why}" for why, n in reasons[:3])
            more = f"; and {len(reasons) - 3} more reasons (--json lists them)" if len(reasons) > 3 else ""
            notes.append(f"{r['policy']}: {plural(int(r['kpis']['failed']), 'job')} failed: {shown}{more}")
    for r in runs:
        if "schedules" in r:
            eff = r["schedules"]
            notes.append(
                f"{r['policy']}: {plural(eff['fired'], 'schedule step')} fired; "
                f"{eff['allocated_gpu_hours']:,.0f} GPU-hours allocated "
                f"({eff['allocated_cost']:,.0f} {currency} at the cluster's price)"
            )
    for line in notes:
        console.print(Text(printable(line)), highlight=False)
    for v in verdicts:
        for line in v["lines"]:
            console.print(Text(printable(line)), highlight=False)


def _print_kpis(
    title: str, policies: list[str], kpis: dict[str, Any], goals: dict[str, dict[str, str]], currency: str
) -> None:
    """The KPIs side by side, each judged against its goal; a list, one KPI after another, where the
    terminal is too narrow for the table (a table never folds a value or cuts it)."""

    def cell(key: str, p: str) -> Text:
        v = kpis[p].get(key)
        out = Text(fmt_kpi(key, v, currency), style="dim" if v is None else "")
        m = mark(goals.get(key, {}).get(p, ""))
        if m:
            out.append(f" {m}", style=MARK_STYLES.get(m, ""))
        return out

    rows = [[Text(label(key)), *(cell(key, p) for p in policies), Text(goal_text(key))] for key in KPI_ROWS]
    heads = ["KPI", *(printable(p) for p in policies), "goal"]
    widths = [max(len(h), *(r[i].cell_len for r in rows)) for i, h in enumerate(heads)]
    # labels wrap at spaces when the terminal is narrow (down to LABEL_MIN columns); values never do
    if LABEL_MIN + sum(widths[1:]) + 3 * len(heads) + 1 <= console.width:
        table = Table(title=Text(printable(title)))
        table.add_column(heads[0], min_width=min(LABEL_MIN, widths[0]))
        for h in heads[1:]:
            table.add_column(Text(h), no_wrap=True)
        for row in rows:
            table.add_row(*row)
        console.print(table)
        return
    console.print(Text(printable(title), style="bold"), highlight=False)
    width = max(len(p) for p in policies)
    for key in KPI_ROWS:
        goal = goal_text(key)
        console.print(Text(label(key) + (f" (goal: {goal})" if goal else "")), highlight=False)
        for p in policies:
            console.print(Text(f"  {printable(p):<{width}}  ").append_text(cell(key, p)), highlight=False)


def _print_skipped(loaded: TraceLoad) -> None:
    """A trace's malformed rows that were skipped: how many, and the first ten."""
    if loaded.skipped:
        err_console.print(Text(f"skipped {len(loaded.skipped)} malformed rows of {printable(str(loaded.source))}:"))
        for line in loaded.skipped_lines()[:10]:  # a trace's text: no markup, no terminal controls
            err_console.print(Text(f"  {printable(line)}"), highlight=False)


def _schedule_effect(result: Any, price: float) -> dict[str, Any]:
    """What the schedules did in one run: the steps fired, and the GPU-hours the jobs held (a bill per use)."""
    hours = result.allocated_gpu_s / 3600.0
    return {
        "fired": len(result.fired),
        "steps": [{"schedule": f.schedule, "step": f.step, "at": f.at, "summary": f.summary} for f in result.fired],
        "allocated_gpu_hours": hours,
        "allocated_cost": hours * price,
    }


def _tenants(text: str | None) -> dict[str, str] | None:
    """``OLD=NEW,OLD=NEW`` as a mapping; a malformed pair is a clear error."""
    if not text:
        return None
    out: dict[str, str] = {}
    for pair in text.split(","):
        old, sep, new = pair.partition("=")
        if not sep or not old.strip() or not new.strip():
            fail(f"--tenant-map: {pair!r} is not OLD=NEW (e.g. --tenant-map 6214e9=research,11cb48=prod)")
        out[old.strip()] = new.strip()
    return out
