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

    Exit code 0 when every file is valid; 2 with one line per problem (file:line: field: what, and the
    fix) otherwise. An empty file, a cluster's GPU type that rackscale does not know (a typo such as
    A1000; a new model is declared in spec.gpuSpeed) and a cluster in a jobs file are problems too.
    """
    from rackscale.loaders import load_any
    from rackscale.model.specs import SpecError

    bad = False
    for f in files:
        try:
            what = load_any(f)
        except SpecError as err:
            bad = True
            console.print(Text.assemble(("✗", "red"), " ", printable(str(err), multiline=True)))  # text, no markup
            continue
        if isinstance(what, list):
            summary = f"{len(what)} job(s): " + ", ".join(f"{j.name} ({j.kind.value})" for j in what)
        else:
            summary = (
                f"cluster {what.name}: {what.total_gpus} GPUs in {len(what.racks)} rack(s), "
                f"{len(what.regions)} region(s), models {', '.join(what.gpu_models)}"
            )
        console.print(Text.assemble(("✓", "green"), " ", printable(f"{f}: {summary}", multiline=True)))
    if bad:
        fail("some files are invalid (see above)")
