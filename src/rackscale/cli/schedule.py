"""``rackscale schedule``: one scheduling cycle of job specs on a cluster; where each goes, or why not."""

from __future__ import annotations

from pathlib import Path

import typer

from rackscale.cli.common import POLICY_HELP, RACKS_HELP, check_policy, resolve_cluster, with_profiles
from rackscale.cli.output import OutputFormat, emit, fail

EXIT_NOT_PLACED = 1  # some job waits or cannot ever run; 2 (bad input) comes from fail()


@with_profiles
def schedule(
    jobs_file: Path = typer.Option(..., "-f", "--filename", help="Job specs (YAML/JSON, one or many)."),
    cluster_file: Path | None = typer.Option(None, "--cluster", help="Cluster spec. Default: 4 NVL72 racks."),
    racks: int | None = typer.Option(None, "--racks", help=RACKS_HELP),
    policy: str = typer.Option("rackscale", "--policy", help=POLICY_HELP),
    output: OutputFormat = typer.Option(OutputFormat.table, "-o", "--output", help="table, json or yaml."),
) -> None:
    """Run one cycle on an empty cluster and print each job's placement (racks, nodes) or pending reason.

    Examples:

      rackscale schedule -f examples/train-72.yaml --cluster examples/cluster-nvl72.yaml
      rackscale schedule -f examples/batch-shared.yaml --racks 2 --policy first-fit -o json

    Profiles (--policy):

      {profiles}

    Exit codes: 0 every job placed; 1 some job waits or cannot run (its reason is in the table);
    2 bad input (options, spec files, an LLM job whose model the cluster cannot hold).
    """
    from rackscale.llm.jobs import LlmJobError, check_job
    from rackscale.loaders import load_jobs
    from rackscale.model.specs import SpecError
    from rackscale.model.state import ClusterState
    from rackscale.scheduler import ResourceScheduler

    check_policy(policy)
    cluster = resolve_cluster(cluster_file, racks)
    try:
        jobs = load_jobs(jobs_file)
    except SpecError as err:
        fail(str(err))
    if not jobs:
        fail(f"{jobs_file}: no job found in the file (fix: write a job, e.g. name: train-1, kind: training, gpus: 8)")
    # As `POST /v1/jobs` and the simulator do: an LLM job whose model this cluster cannot hold (405B on one
    # GPU) is refused, not shown as placed.
    unrunnable: list[str] = []
    for job in jobs:
        try:
            check_job(cluster, job)
        except LlmJobError as err:
            unrunnable.append(f"{jobs_file}: {err}")
    if unrunnable:
        fail("\n".join(unrunnable))
    state = ClusterState(cluster)
    d = ResourceScheduler(profile=policy).schedule(state, jobs, 0.0)
    rows: list[dict[str, object]] = []
    for p in d.placed:
        racks_used = sorted({cluster.racks[cluster.nodes[a.node].rack].name for a in p.placement.allocs})
        rows.append(
            {
                "job": p.spec.name,
                "kind": p.spec.kind.value,
                "status": "Placed",
                "gpus": p.placement.gpu_milli / 1000,
                "racks": ",".join(racks_used),
                "nodes": ",".join(cluster.nodes[a.node].name for a in p.placement.allocs),
                "reason": "",
            }
        )
    for w in d.pending:
        rows.append(
            {
                "job": w.spec.name,
                "kind": w.spec.kind.value,
                "status": w.status.code.value,
                "gpus": w.spec.gpu_demand_milli / 1000,
                "racks": "",
                "nodes": "",
                "reason": f"{w.status.reason.value}: {w.status.message}",
            }
        )
    emit(rows, output, columns=("job", "kind", "status", "gpus", "racks", "reason"))
    if d.pending:
        raise typer.Exit(EXIT_NOT_PLACED)
