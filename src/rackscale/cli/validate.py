"""``rackscale validate``: check cluster and job spec files and say exactly what is wrong."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.text import Text

from rackscale.cli.output import console, fail, printable


def validate(
    files: list[Path] = typer.Argument(
        ..., metavar="FILE...", help="Cluster (kind: GpuCluster / Cluster) or job spec files.", show_default=False
    ),
) -> None:
    """Validate spec files. Each file is read as a cluster spec if its kind says so, else as jobs.

    Examples:

      rackscale validate examples/cluster-nvl72.yaml examples/train-72.yaml
      rackscale validate train.yaml && rackscale submit -f train.yaml

      rackscale validate examples/cluster-nvl72.yaml llm-jobs.yaml   # and can that cluster hold each LLM?

    Exit code 0 when every file is valid; 2 with one line per problem (file:line: field: what, and the
    fix) otherwise. An empty file, a cluster's GPU type that rackscale does not know (a typo such as
    A1000; a new model is declared in spec.gpuSpeed) and a cluster in a jobs file are problems too.
    With a cluster file among the files, every LLM job is also checked against each cluster given, as
    `rackscale schedule` and the API check it: a model its GPUs cannot hold (405B on one GPU) is a problem.
    """
    from rackscale.llm.jobs import LlmJobError, check_job, is_llm
    from rackscale.loaders import load_any
    from rackscale.model.specs import SpecError
    from rackscale.model.topology import GPUCluster
    from rackscale.model.workload import JobSpec

    bad = False
    clusters: list[tuple[Path, GPUCluster]] = []
    jobs: list[tuple[Path, JobSpec]] = []
    for f in files:
        try:
            what = load_any(f)
        except SpecError as err:
            bad = True
            console.print(Text.assemble(("✗", "red"), " ", printable(str(err), multiline=True)))  # text, no markup
            continue
        if isinstance(what, list):
            summary = f"{len(what)} job(s): " + ", ".join(f"{j.name} ({j.kind.value})" for j in what)
            jobs.extend((f, j) for j in what)
        else:
            summary = (
                f"cluster {what.name}: {what.total_gpus} GPUs in {len(what.racks)} rack(s), "
                f"{len(what.regions)} region(s), models {', '.join(what.gpu_models)}"
            )
            clusters.append((f, what))
        console.print(Text.assemble(("✓", "green"), " ", printable(f"{f}: {summary}", multiline=True)))
    for at, cluster in clusters:
        for f, job in jobs:
            try:
                check_job(cluster, job)
            except LlmJobError as err:
                bad = True
                line = f"{f}: {err} (on cluster {cluster.name}, {at})"
                console.print(Text.assemble(("✗", "red"), " ", printable(line, multiline=True)))
    llm = sum(1 for _, j in jobs if is_llm(j))
    if llm and not clusters:
        console.print(
            f"note: {llm} LLM job(s) not checked against a cluster's GPUs "
            "(give its file too: rackscale validate CLUSTER.yaml JOBS.yaml)",
            style="dim",
            markup=False,
        )
    if bad:
        fail("some files are invalid (see above)")
