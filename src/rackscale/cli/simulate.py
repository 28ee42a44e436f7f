"""``rackscale simulate``: replay a workload on a modelled cluster, rackscale beside its baselines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from rackscale.cli.common import resolve_cluster
from rackscale.cli.output import OutputFormat, emit, err_console, fail

KPI_ROWS = (
    "jobs",
    "completed",
    "allocation_ratio",
    "single_rack_share",
    "intra_rack_traffic_share",
    "mean_wait_s",
    "p99_wait_s",
    "mean_jct_s",
    "p99_jct_s",
    "preemptions",
    "makespan_s",
)
KPI_GOALS = {"intra_rack_traffic_share": ">= 0.90", "single_rack_share": "higher is better"}


def simulate(
    cluster_file: Path | None = typer.Option(None, "--cluster", help="Cluster spec (YAML). Default: NVL72 racks."),
    racks: int | None = typer.Option(None, "--racks", help="Racks of the default NVL72 cluster (default 4)."),
    jobs_file: Path | None = typer.Option(None, "--jobs", help="Job specs (YAML/JSON). Default: synthetic mix."),
    n_jobs: int = typer.Option(600, "--n-jobs", min=1, help="Jobs in the synthetic mix."),
    policy: str = typer.Option("rackscale", "--policy", help="Profile under test."),
    baselines: list[str] = typer.Option(["first-fit"], "--baseline", help="Baseline profiles (repeatable)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the synthetic workload and random placers."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output: {'runs': [...]}."),
    output: OutputFormat = typer.Option(OutputFormat.table, "-o", "--output", help="table, json or yaml."),
) -> None:
    """Replay a workload with each policy and print the KPIs side by side.

    With no options: 4 NVL72 racks (288 GPUs) and 24 h of the embedded synthetic mix (training gangs
    sized like Philly plus a multi-rack tail, inference services, batch jobs), rackscale vs first-fit.

    Examples:\n
      rackscale simulate\n
      rackscale simulate --racks 8 --baseline slurm-tree --baseline best-fit\n
      rackscale simulate --cluster examples/seed-gpucluster.yaml --json
    """
    from rackscale.scheduler import PROFILES
    from rackscale.sim import replay
    from rackscale.workloads import SyntheticConfig, synthetic_jobs

    for p in (policy, *baselines):
        if p not in PROFILES:
            fail(f"unknown policy {p!r}; choose one of: {', '.join(PROFILES)}")
    cluster = resolve_cluster(cluster_file, racks)
    if jobs_file is not None:
        from rackscale.loaders import load_jobs
        from rackscale.model.specs import SpecError

        try:
            jobs = load_jobs(jobs_file)
        except SpecError as err:
            fail(str(err))
    else:
        jobs = synthetic_jobs(SyntheticConfig(jobs=n_jobs, max_gpus=cluster.total_gpus, seed=seed))
    if not jobs:
        fail("the workload has no jobs")
    policies = list(dict.fromkeys((policy, *baselines)))
    runs: list[dict[str, Any]] = []
    with err_console.status("simulating...") as status:
        for p in policies:
            status.update(f"simulating {len(jobs)} jobs on {cluster.total_gpus} GPUs with {p}...")
            runs.append({"policy": p, "kpis": replay(cluster, jobs, policy=p, seed=seed).kpis()})
    if as_json or output is not OutputFormat.table:
        payload = {
            "cluster": {"name": cluster.name, "gpus": cluster.total_gpus, "racks": len(cluster.racks)},
            "jobs": len(jobs),
            "runs": runs,
        }
        emit(payload, OutputFormat.json if as_json else output)
        return
    # KPIs as rows, policies as columns: side by side reads well in any terminal width.
    table_rows = [
        {"kpi": k, **{str(r["policy"]): r["kpis"].get(k) for r in runs}, "goal": KPI_GOALS.get(k, "")} for k in KPI_ROWS
    ]
    emit(
        table_rows,
        OutputFormat.table,
        columns=("kpi", *policies, "goal"),
        title=f"{len(jobs)} jobs on {cluster.name} ({cluster.total_gpus} GPUs, {len(cluster.racks)} racks)",
    )
