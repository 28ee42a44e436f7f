"""The ``rackscale`` command. Verbs live in their own modules and import heavy parts lazily."""

from __future__ import annotations

import typer

from rackscale.cli.cancel import cancel
from rackscale.cli.compare_arch import compare_arch
from rackscale.cli.describe import describe
from rackscale.cli.get import get
from rackscale.cli.kube import kube_scheduler  # light: imports the kubernetes client when it runs
from rackscale.cli.pack import pack
from rackscale.cli.schedule import schedule
from rackscale.cli.serve import serve
from rackscale.cli.simulate import simulate
from rackscale.cli.slurm import app as slurm_app  # light: each command imports its parts when it runs
from rackscale.cli.submit import submit
from rackscale.cli.top import top
from rackscale.cli.validate import validate

app = typer.Typer(
    name="rackscale",
    help=(
        "rackscale: a topology-aware resource manager for rack-scale (NVLink-domain) GPU clusters.\n\n"
        "Start with `rackscale simulate` (rackscale vs a baseline on the embedded default)."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command()(simulate)
app.command()(schedule)
app.command()(validate)
app.command()(pack)
app.command(name="compare-arch")(compare_arch)
app.command()(serve)
app.command()(submit)
app.command()(get)
app.command()(describe)
app.command()(cancel)
app.command()(top)
app.command(name="kube-scheduler")(kube_scheduler)


def _mount_bench() -> None:
    from rackscale.cli.bench import app as bench_app

    app.add_typer(bench_app, name="bench", help="Benchmarks (placement speed and quality).")


_mount_bench()
app.add_typer(slurm_app, name="slurm", help="Slurm: topology.conf, import a cluster, compare placement.")


def main() -> None:
    app()


if __name__ == "__main__":  # python -m rackscale.cli.app
    main()
