"""``rackscale slurm ...``: topology.conf from a cluster spec, a running Slurm as a cluster spec, and the
rackscale-vs-``--switches`` comparison."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from rackscale.cli.common import RACKS_HELP, resolve_cluster
from rackscale.cli.output import (
    OutputFormat,
    ReportJsonOpt,
    ReportOutputOpt,
    chosen_format,
    emit_document,
    err_console,
    fail,
    printable,
)

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


def _write(text: str, out: Path | None) -> None:
    """``text`` on stdout, or into ``out`` whole or not at all: a regular file (a topology.conf Slurm reads) is
    replaced at once through a temporary file beside it, so a full disk never leaves it cut short; a device or
    a pipe is written as it is. A path that cannot be written is one error line naming --output."""
    if out is None:
        typer.echo(text, nl=False)
        return
    if out.is_dir():
        fail(f"--output {out} is a directory: give a file path, e.g. {out / 'topology.conf'}")
    try:
        if out.exists() and not out.is_file():
            out.write_text(text)
        else:
            target = Path(os.path.realpath(out))  # through a symlink: the file it names is replaced
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            try:
                tmp.write_text(text)
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
    except OSError as e:
        fail(f"--output {out}: cannot write it ({e.strerror or e}): give a path in a writable folder that exists")
    err_console.print(f"wrote {printable(str(out))}", highlight=False, markup=False)


@app.command()
def topology(
    cluster: Annotated[
        Path | None, typer.Option("--cluster", "-c", help="Cluster spec (YAML/JSON). Default: 4 NVL72 racks.")
    ] = None,
    racks: Annotated[int | None, typer.Option("--racks", help=RACKS_HELP)] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="tree (topology/tree, any Slurm) or block (topology/block, >= 23.11).")
    ] = "tree",
    nodes: Annotated[bool, typer.Option("--nodes", help="Also print NodeName lines for slurm.conf.")] = False,
    out: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
) -> None:
    """topology.conf for a cluster spec (or the default NVL72 cluster): one switch (or block) per NVLink rack.

    Examples:

      rackscale slurm topology --cluster examples/cluster-nvl72.yaml > /etc/slurm/topology.conf
      rackscale slurm topology --racks 8 --format block --nodes -o topology.conf

    Each rack (NVLink domain) is a leaf switch, so that Slurm's --switches=1 keeps a job in one rack
    (docs/slurm.md).
    """
    from rackscale.slurm.topology import FORMATS, node_lines, topology_conf

    if fmt not in FORMATS:
        fail(f"--format must be tree or block (got {fmt!r})")
    c = resolve_cluster(cluster, racks)
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
    """A running Slurm (scontrol show nodes / topology) as a rackscale cluster spec (YAML).

    Examples:

      rackscale slurm import -o cluster.yaml && rackscale validate cluster.yaml
      rackscale slurm import --slurm-conf /etc/slurm/slurm.conf --gpu-model H100 --name prod

    Racks are Slurm's leaf switches (scontrol show topology), else each node's first feature (docs/slurm.md).
    """
    from rackscale.model.specs import gpu_type_problem
    from rackscale.slurm.commands import Slurm, SlurmError
    from rackscale.slurm.importer import cluster_yaml, import_cluster

    try:
        c = import_cluster(Slurm(slurm_conf), name=name, gpu_model=gpu_model)
    except (SlurmError, ValueError) as e:
        fail(f"cannot import the Slurm cluster: {e}")
    _write(cluster_yaml(c), out)
    for model in c.gpu_models:  # the spec written would be refused when read back: say so now
        if gpu_type_problem(model) is not None:
            err_console.print(
                f"warning: GPU model '{printable(model)}' is not one rackscale knows, so the spec will be refused "
                "when read back: fix --gpu-model, or declare the model in the spec's gpuSpeed (docs/specs.md)",
                highlight=False,
                markup=False,
            )


DEFAULT_BLOCK_ROOT = Path("/var/tmp/rackscale-slurm-24.11-root")
ENGINE_HELP = (
    "tree: Slurm 22.05 on this host, topology/tree, Slurm places with --switches=1. block: Slurm 24.11 with "
    "topology/block in a Debian 13 root (--slurm-root), Slurm places by its block rule."
)


def _check_compare_bounds(jobs: int, spread: float, racks: int, rack_nodes: int, node_gpus: int) -> None:
    """The sizes of a comparison within the project's bounds, before any Slurm starts: a typo's extra digits
    would otherwise build a cluster past a spec's bound (an emulated node gets a slurmd and a fake device per
    GPU), queue millions of gangs or spread their arrivals over centuries."""
    from rackscale.model.spec_docs import MAX_GPUS_PER_NODE, MAX_NODES_PER_RACK
    from rackscale.model.specs import MAX_CLUSTER_NODES, MAX_SYNTHETIC_JOBS
    from rackscale.sim.records import DEFAULT_HORIZON_S

    if jobs > MAX_SYNTHETIC_JOBS:
        fail(f"--jobs must be at most {MAX_SYNTHETIC_JOBS:,} (got {jobs:,})")
    if not spread <= DEFAULT_HORIZON_S:  # inf too (NaN is refused by its min)
        fail(f"--spread must be at most {DEFAULT_HORIZON_S:,.0f} s, ten years (got {spread:g})")
    if node_gpus > MAX_GPUS_PER_NODE:
        fail(f"--node-gpus must be at most {MAX_GPUS_PER_NODE}, a cluster spec's gpusPerNode (got {node_gpus:,})")
    if rack_nodes > MAX_NODES_PER_RACK:
        fail(f"--rack-nodes must be at most {MAX_NODES_PER_RACK:,}, a spec's nodesPerRack (got {rack_nodes:,})")
    if racks * rack_nodes > MAX_CLUSTER_NODES:
        fail(
            f"--racks x --rack-nodes is {racks * rack_nodes:,} nodes, more than the {MAX_CLUSTER_NODES:,} a cluster "
            "spec may hold: check --racks for an extra digit"
        )


@app.command()
def compare(
    ctx: typer.Context,
    jobs: Annotated[int, typer.Option("--jobs", help="Gangs in the sequence.", min=1)] = 40,
    seed: Annotated[int, typer.Option(help="Seed of the job mix.")] = 0,
    spread: Annotated[float, typer.Option(help="Arrivals spread over this many seconds.", min=0)] = 8.0,
    engine: Annotated[str, typer.Option("--engine", help=ENGINE_HELP)] = "tree",
    slurm_conf: Annotated[
        Path | None,
        typer.Option(
            "--slurm-conf",
            help="A running Slurm to use (its path inside --slurm-root if given). Default: start an emulated one "
            "(root).",
        ),
    ] = None,
    slurm_root: Annotated[
        Path | None,
        typer.Option(
            "--slurm-root",
            help=f"Slurm runs in this root, through chroot (--engine block: built there once; default "
            f"{DEFAULT_BLOCK_ROOT}).",
        ),
    ] = None,
    racks: Annotated[int | None, typer.Option("--racks", min=1, help="Emulated: racks (blocks); default 4.")] = None,
    rack_nodes: Annotated[
        int | None, typer.Option("--rack-nodes", min=1, help="Emulated: nodes per rack (tree 4, block 18).")
    ] = None,
    node_gpus: Annotated[int | None, typer.Option("--node-gpus", min=1, help="Emulated: GPUs per node (4).")] = None,
    output: ReportOutputOpt = OutputFormat.table,
    as_json: ReportJsonOpt = False,
) -> None:
    """Slurm's own placement vs rackscale (slurm backend) on one gang sequence (1/4 to 1 rack each).

    Examples:

      sudo rackscale slurm compare                   # Slurm 22.05, tree, 4x4x4

      sudo rackscale slurm compare --engine block    # Slurm 24.11, block, 4x18x4

      sudo rackscale slurm compare --engine block --racks 2 --rack-nodes 4 -o json

      rackscale slurm compare --slurm-conf /etc/slurm/slurm.conf --jobs 100

    Prints, per placer, the share of gangs inside one rack (block), how many Slurm refused, the mean wait
    and the mean JCT (docs/slurm.md).
    """
    from rackscale.bench.slurm_compare import Engine
    from rackscale.bench.slurm_compare import compare as run_compare
    from rackscale.model.topology import GPUCluster
    from rackscale.slurm import block, emulated
    from rackscale.slurm.commands import Slurm, SlurmError
    from rackscale.slurm.importer import import_cluster

    fmt = chosen_format(output, as_json, ctx=ctx)  # before any Slurm starts: a conflict is said at once
    if engine not in tuple(Engine):
        fail(f"--engine must be tree or block (got {printable(engine)!r})")
    eng = Engine(engine)
    if slurm_conf is not None and any(v is not None for v in (racks, rack_nodes, node_gpus)):
        fail("--racks, --rack-nodes and --node-gpus shape the emulated Slurm: not with --slurm-conf")
    if slurm_root is not None and eng is Engine.tree and slurm_conf is None:
        fail("--slurm-root with --engine tree needs --slurm-conf (the Slurm running there)")
    npr = rack_nodes or (18 if eng is Engine.block else 4)
    _check_compare_bounds(jobs, spread, racks or 4, npr, node_gpus or 4)
    spec = GPUCluster.uniform(
        name="emulated", racks_per_region=racks or 4, nodes_per_rack=npr, gpus_per_node=node_gpus or 4
    )
    try:
        if slurm_conf is not None:
            slurm = Slurm.in_root(slurm_root, slurm_conf) if slurm_root is not None else Slurm(slurm_conf)
            results = run_compare(slurm, import_cluster(slurm), jobs, seed=seed, spread_s=spread, engine=eng)
        elif eng is Engine.block:
            with block.running(spec, slurm_root or DEFAULT_BLOCK_ROOT) as emu:
                results = run_compare(emu.slurm, spec, jobs, seed=seed, spread_s=spread, engine=eng)
        else:
            with emulated.running(spec) as emu:
                results = run_compare(emu.slurm, spec, jobs, seed=seed, spread_s=spread)
    except SlurmError as e:
        fail(str(e))
    if fmt is OutputFormat.table:
        for r in results:
            typer.echo(printable(r.line()))
        return
    emit_document([r.row() for r in results], fmt)
