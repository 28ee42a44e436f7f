"""``rackscale pack``: the FGD paper's static-packing experiment on the Alibaba ``openb`` trace, run on the
scheduler's profiles: ``rackscale`` beside the paper's policies (as profiles) and its published table."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rackscale.cli.bench import MAX_WORKERS
from rackscale.cli.output import OutputFormat, ReportJsonOpt, ReportOutputOpt, chosen_format, emit_document, fail

if TYPE_CHECKING:
    from rackscale.pack.experiment import Job, RunResult

MAX_SEEDS = 1000  # as `bench simulate --seeds`: each seed is one run of every policy
TRACE_DIR = Path("../shared/traces/alibaba-openb")
DEFAULT_NODES = TRACE_DIR / "openb_node_list_gpu_node.csv"
DEFAULT_PODS = TRACE_DIR / "openb_pod_list_default.csv"
POLICY_HELP = (
    "Policy to run (repeatable): rackscale, Random, DotProd, GpuClustering, GpuPacking, BestFit, FGD "
    "(profiles rackscale, share-random, dot-prod, gpu-clustering, gpu-packing, share-best-fit, fgd). Default: all."
)
COLUMNS = (
    ("80", "80 %"),
    ("90", "90 %"),
    ("100", "100 %"),
    ("130", "130 %"),
    ("unallocated_gpus_130", "unalloc. GPUs @130 %"),
)


def _existing(path: Path, option: str) -> Path:
    if path.exists() and not path.is_file():
        fail(f"{option} {path}: not a regular file (a folder, a device or a pipe): give the trace's CSV file")
    if not path.is_file():
        fail(
            f"{option} {path}: trace file not found (resolved from {Path.cwd()}) (fix: run from the repository "
            f"root, which has the traces at {TRACE_DIR}/, or pass {option} PATH)"
        )
    return path


def _policies(names: list[str] | None) -> list[str]:
    from rackscale.pack.experiment import ALL_POLICIES, DEFAULT_POLICIES

    if not names:
        return list(DEFAULT_POLICIES)
    by_lower = {p.lower(): p for p in ALL_POLICIES}
    out: list[str] = []
    for name in names:
        if name.lower() not in by_lower:
            fail(f"unknown policy {name!r}; choose from {', '.join(ALL_POLICIES)}")
        if by_lower[name.lower()] not in out:
            out.append(by_lower[name.lower()])
    return out


def _pool_mapper(
    pool: ProcessPoolExecutor,
) -> Callable[[Callable[[Job], RunResult], Iterable[Job]], Iterator[RunResult]]:
    def mapper(fn: Callable[[Job], RunResult], jobs: Iterable[Job]) -> Iterator[RunResult]:
        futures = [pool.submit(fn, job) for job in jobs]
        try:
            for done in as_completed(futures):  # as they finish, so the progress bar moves
                yield done.result()
        finally:  # a run that failed stops the rest: the queued runs never start
            for future in futures:
                future.cancel()

    return mapper


def _cells(row: dict[str, float]) -> list[str]:
    return [f"{row[key]:.1f}" if key.startswith("unallocated") else f"{row[key]:.2f}" for key, _ in COLUMNS]


def render(report: dict[str, Any], *, console: Console) -> None:
    """Measured rows, each followed by the paper's row for the same policy (FGD's for rackscale)."""
    from rackscale.pack.experiment import PROFILE_OF

    seeds = report["seeds"]
    table = Table(
        title=f"GPU allocation ratio (%) when arrived GPU demand reaches x % of {report['capacity_gpus']:,} GPUs "
        + (f"(seed {seeds[0]})" if len(seeds) == 1 else f"(mean of {len(seeds)} seeds: {seeds[0]}..{seeds[-1]})")
    )
    table.add_column("policy (profile)", no_wrap=True)
    for _, title in COLUMNS:
        table.add_column(title, justify="right")
    table.add_column("failed pods", justify="right")
    for name, row in report["policies"].items():
        label_row = name if PROFILE_OF[name] == name else f"{name} ({PROFILE_OF[name]})"
        table.add_row(label_row, *_cells(row), f"{row['failed_pods']:.0f}")
        paper_name = "FGD" if name == "rackscale" else name
        paper = report["published"].get(paper_name)
        if paper is not None:
            label = "  paper" if paper_name == name else f"  paper {paper_name}"
            table.add_row(f"[dim]{label}[/]", *(f"[dim]{c}[/]" for c in _cells(paper)), "")
    console.print(table)
    console.print(
        "paper: Weng et al., USENIX ATC 2023 (FGD), openb_pod_list_default, seeds 42..51. "
        f"Run time {report['runtime_s']:.0f} s.",
        highlight=False,
    )


def pack(
    ctx: typer.Context,
    nodes: Path = typer.Option(DEFAULT_NODES, "--nodes", help="Node list CSV (sn, cpu_milli, memory_mib, gpu, model)."),
    pods: Path = typer.Option(
        DEFAULT_PODS,
        "--pods",
        help="Pod list CSV (name, cpu_milli, memory_mib, num_gpu, gpu_milli; gpu_spec optional: empty = any model).",
    ),
    seeds: int = typer.Option(
        10, "--seeds", min=1, max=MAX_SEEDS, help="Use the first N seeds of 42, 43, ... (the paper uses 10)."
    ),
    policies: list[str] | None = typer.Option(None, "--policy", help=POLICY_HELP),
    workers: int = typer.Option(
        0, "--workers", min=0, max=MAX_WORKERS, help="Processes to run seeds in (0 = one per CPU)."
    ),
    as_json: ReportJsonOpt = False,
    output: ReportOutputOpt = OutputFormat.table,
) -> None:
    """Static packing (the FGD paper's experiment): pods of the trace arrive in a seeded random order, inflated
    with random copies to 130 % of the cluster's GPUs, and never leave; a pod that fits nowhere fails.
    Prints the GPU allocation ratio when the arrived demand reaches 80, 90, 100 and 130 % of capacity.

    Examples:\n
      rackscale pack\n
      rackscale pack --seeds 1 --policy rackscale --policy BestFit\n
      rackscale pack -o json > pack.json   (--json is the same)\n
      rackscale pack -o yaml
    """
    from rackscale.model.spec_errors import SpecError
    from rackscale.pack.experiment import DEFAULT_SEEDS, INFLATION, PROFILE_OF, PUBLISHED, run_experiment, summarize
    from rackscale.pack.trace import InflationTooLarge, Trace, check_arrivals

    fmt = chosen_format(output, as_json, ctx=ctx)  # before the trace is read: a conflict is said at once
    chosen = _policies(policies)
    seed_list = [DEFAULT_SEEDS[0] + i for i in range(seeds)]
    try:
        trace = Trace.read(nodes=_existing(nodes, "--nodes"), pods=_existing(pods, "--pods"))
        # Sized from the trace's sums before any run is started (or a process, or a ClusterState): a legal
        # trace of huge nodes and 1-milli pods would inflate to billions of arrivals.
        check_arrivals(demand=trace.demand_milli, capacity_gpus=trace.capacity_gpus, ratio=INFLATION)
    except SpecError as err:
        fail(str(err))
    except InflationTooLarge as err:
        fail(f"--nodes {nodes} and --pods {pods}: {err}")
    jobs = len(chosen) * len(seed_list)
    procs = min(workers or os.cpu_count() or 1, jobs)
    started = time.perf_counter()
    # Progress goes to stderr only, so stdout stays clean for -o json|yaml.
    progress = Progress(
        TextColumn("[bold]pack[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    )
    with progress:
        task = progress.add_task(f"{len(chosen)} policies x {len(seed_list)} seed(s)", total=jobs)

        def tick(_: RunResult) -> None:
            progress.advance(task)

        try:
            if procs > 1:
                with ProcessPoolExecutor(max_workers=procs) as pool:
                    results = run_experiment(
                        trace=trace,
                        policies=chosen,
                        seeds=seed_list,
                        mapper=_pool_mapper(pool),
                        on_result=tick,
                    )
            else:
                results = run_experiment(trace=trace, policies=chosen, seeds=seed_list, on_result=tick)
        except InflationTooLarge as err:  # one seed's draws ran past the bound its mean kept under
            progress.stop()
            fail(f"--nodes {nodes} and --pods {pods}: {err}")
    summary = summarize(results)
    report: dict[str, Any] = {
        "policies": {name: summary[name] for name in chosen},
        "published": PUBLISHED,
        "seeds": seed_list,
        "profiles": {name: PROFILE_OF[name] for name in chosen},
        "capacity_gpus": trace.capacity_gpus,
        "runtime_s": round(time.perf_counter() - started, 1),
    }
    if fmt is OutputFormat.table:
        render(report, console=Console())
    else:
        emit_document(report, fmt)  # -o json is --json's document, byte for byte; -o yaml the same document
