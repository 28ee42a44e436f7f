"""``rackscale slurm ...``: topology.conf from a cluster spec, a running Slurm as a cluster spec, and the
rackscale-vs-``--switches`` comparison."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rackscale.cli.output import err_console, fail, printable

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


def _write(text: str, out: Path | None) -> None:
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        err_console.print(f"wrote {out}", highlight=False)


@app.command()
def topology(
    cluster: Annotated[Path, typer.Option("--cluster", "-c", help="Cluster spec (YAML/JSON).")],
    fmt: Annotated[
        str, typer.Option("--format", help="tree (topology/tree, any Slurm) or block (topology/block, >= 23.11).")
    ] = "tree",
    nodes: Annotated[bool, typer.Option("--nodes", help="Also print NodeName lines for slurm.conf.")] = False,
    out: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
) -> None:
    """topology.conf for a cluster spec: one switch (or block) per NVLink rack."""
    from rackscale.loaders import SpecError, load_cluster
    from rackscale.slurm.topology import FORMATS, node_lines, topology_conf

    if fmt not in FORMATS:
        fail(f"--format must be tree or block (got {fmt!r})")
    try:
        c = load_cluster(cluster)
    except SpecError as e:
        fail(str(e))
    text = topology_conf(c, fmt)
    if nodes:
        text += "# slurm.conf node lines\n" + node_lines(c, resources=True)
    _write(text, out)


@app.command(name="import")
def import_(
    slurm_conf: Annotated[Path | None, typer.Option("--slurm-conf", help="slurm.conf (default: $SLURM_CONF).")] = None,
    gpu_model: Annotated[
        str | None, typer.Option("--gpu-model", help="GPU model when gres has no type (default GB200).")
    ] = None,
    name: Annotated[str, typer.Option(help="metadata.name of the spec.")] = "slurm",
    out: Annotated[Path | None, typer.Option("--output", "-o", help="Write the YAML here instead of stdout.")] = None,
) -> None:
    """A running Slurm (scontrol show nodes / topology) as a rackscale cluster spec (YAML)."""
    from rackscale.slurm.commands import Slurm, SlurmError
    from rackscale.slurm.importer import cluster_yaml, import_cluster

    try:
        c = import_cluster(Slurm(slurm_conf), name=name, gpu_model=gpu_model)
    except (SlurmError, ValueError) as e:
        fail(f"cannot import the Slurm cluster: {e}")
    _write(cluster_yaml(c), out)


@app.command()
def compare(
    jobs: Annotated[int, typer.Option("--jobs", help="Gangs in the sequence.", min=1)] = 40,
    seed: Annotated[int, typer.Option(help="Seed of the job mix.")] = 0,
    spread: Annotated[float, typer.Option(help="Arrivals spread over this many seconds.", min=0)] = 8.0,
    slurm_conf: Annotated[
        Path | None,
        typer.Option("--slurm-conf", help="A running Slurm to use (default: start an emulated 4x4x4 one; root)."),
    ] = None,
) -> None:
    """Slurm's --switches=1 vs rackscale (slurm backend) on one gang sequence of 4/8/12/16 GPUs."""
    from rackscale.bench.slurm_compare import compare as run_compare
    from rackscale.model.topology import GPUCluster
    from rackscale.slurm import emulated
    from rackscale.slurm.commands import Slurm, SlurmError
    from rackscale.slurm.importer import import_cluster

    try:
        if slurm_conf is not None:
            slurm = Slurm(slurm_conf)
            results = run_compare(slurm, import_cluster(slurm), jobs, seed=seed, spread_s=spread)
        else:
            spec = GPUCluster.uniform(name="emulated", racks_per_region=4, nodes_per_rack=4, gpus_per_node=4)
            with emulated.running(spec) as emu:
                results = run_compare(emu.slurm, spec, jobs, seed=seed, spread_s=spread)
    except SlurmError as e:
        fail(str(e))
    for r in results:
        typer.echo(printable(r.line()))
