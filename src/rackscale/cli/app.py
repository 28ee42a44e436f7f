"""The ``rackscale`` command. Verbs live in their own modules and import heavy parts lazily."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Any

import typer
from rich.text import Text
from typer.core import TyperGroup

from rackscale.cli.apply import apply
from rackscale.cli.cancel import cancel
from rackscale.cli.compare_arch import compare_arch
from rackscale.cli.cordon import cordon
from rackscale.cli.delete import delete
from rackscale.cli.describe import describe
from rackscale.cli.drain import drain
from rackscale.cli.get import get
from rackscale.cli.kube import kube_scheduler  # light: imports the kubernetes client when it runs
from rackscale.cli.loadgen import loadgen  # light: imports mlperf_loadgen and httpx when it runs
from rackscale.cli.pack import pack
from rackscale.cli.perf import app as perf_app  # light: rackscale.llm is imported when a command runs
from rackscale.cli.preflight import preflight  # light: the checks are imported when it runs
from rackscale.cli.schedule import schedule
from rackscale.cli.serve import serve
from rackscale.cli.simulate import simulate
from rackscale.cli.slurm import app as slurm_app  # light: each command imports its parts when it runs
from rackscale.cli.storage import app as storage_app  # light: rackscale.storage is imported when it runs
from rackscale.cli.submit import submit
from rackscale.cli.sweep import sweep  # light: rackscale.sweep is imported when it runs
from rackscale.cli.token import token
from rackscale.cli.top import top
from rackscale.cli.uncordon import uncordon
from rackscale.cli.validate import validate

# click's exception base, found through a class typer exports (recent typers vendor click as typer._click).
_ClickException: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
_WORDING = (  # typer's (pydantic's) words for a bad value -> the CLI's own ("--racks must be at least 1")
    (re.compile(r"^Input should be "), "must be "),
    (re.compile(r", unable to parse .*$"), ""),
    (re.compile(r"\ba valid integer\b"), "a whole number"),
    (re.compile(r"\ba valid number\b"), "a number"),
    (re.compile(r"\bgreater than or equal to\b"), "at least"),
    (re.compile(r"\bless than or equal to\b"), "at most"),
    (re.compile(r"\bgreater than\b"), "more than"),
)

_NUMBER = re.compile(r"^[-+]?[0-9][0-9_.eE+-]*$")


def _given(argv: Sequence[str], opts: Sequence[str]) -> str | None:
    """The value the command line gave option ``opts`` (its last occurrence), or None."""
    value = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        name, eq, rest = arg.partition("=")
        if eq and name in opts:
            value = rest
        elif arg in opts and i + 1 < len(argv):
            value = argv[i + 1]
    return value


def usage_line(err: Exception, argv: Sequence[str]) -> str:
    """A usage error (bad option value, missing argument, unknown option) as one line that names the option,
    what it must be and what was given, and where the help is: ``--racks must be a whole number (got 'x');
    see rackscale schedule --help``."""
    ctx, param = getattr(err, "ctx", None), getattr(err, "param", None)
    see = f"; see {ctx.command_path} --help" if ctx is not None else ""
    message = " ".join(str(getattr(err, "message", "") or err).split())
    if type(err).__name__ == "BadParameter" and param is not None:
        opts = [o for o in getattr(param, "opts", ()) if o.startswith("-")]
        name = max(opts, key=len) if opts else getattr(param, "human_readable_name", str(param.name))
        if message.startswith("Input should be "):
            for pattern, words in _WORDING:
                message = pattern.sub(words, message)
            got = _given(argv, opts) if opts else None
            shown = "" if got is None else f" (got {got})" if _NUMBER.match(got) else f" (got {got!r})"
            return f"{name} {message.rstrip('.')}{shown}{see}"
        return f"{name}: {message.removeprefix('Value error, ').rstrip('.')}{see}"
    if type(err).__name__ == "BadParameter":  # raised by a verb's own code, without a parameter
        return f"{message.rstrip('.')}{see}"
    text = " ".join(str(getattr(err, "format_message", lambda: message)()).split())
    return f"{text[:1].lower()}{text[1:].rstrip('.')}{see}"


class _Group(TyperGroup):
    """The root command: a usage error is one ``error: ...`` line on stderr (exit 2), as the verbs' own
    errors are, instead of typer's boxed panel of several lines."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        try:
            rv = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except _ClickException as err:
            code = int(getattr(err, "exit_code", 2))
            if type(err).__name__ != "NoArgsIsHelpError":  # that one has printed the help already
                _error_line(usage_line(err, argv))
            sys.exit(code)
        except typer.Abort:
            sys.stderr.write("Aborted!\n")
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)  # typer.Exit(code) comes back as its code


def _error_line(message: str) -> None:
    from rackscale.cli.output import err_console, printable

    text = printable(message)
    if err_console.is_terminal:
        err_console.print(Text.assemble(("error:", "bold red"), " ", text), soft_wrap=True)
    else:
        sys.stderr.write(f"error: {text}\n")


app = typer.Typer(
    cls=_Group,
    name="rackscale",
    help=(
        "rackscale: a topology-aware resource manager for rack-scale (NVLink-domain) GPU clusters.\n\n"
        "Start with `rackscale simulate` (rackscale vs a baseline on the embedded default).\n\n"
        "Examples:\n\n"
        "  rackscale simulate --racks 8 --baseline slurm-tree\n"
        "  rackscale validate examples/cluster-nvl72.yaml examples/train-72.yaml\n"
        "  rackscale serve    # then, in another shell: rackscale submit -f examples/train-72.yaml\n\n"
        "Every verb's --help has examples; usage errors are one line, exit code 2."
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
app.command()(apply)
app.command()(delete)
app.command()(get)
app.command()(describe)
app.command()(cancel)
app.command()(cordon)
app.command()(drain)
app.command()(uncordon)
app.command()(top)
app.command(name="kube-scheduler")(kube_scheduler)
app.command()(token)
app.command()(preflight)
app.command()(loadgen)
app.command()(sweep)


def _mount_bench() -> None:
    from rackscale.cli.bench import app as bench_app

    app.add_typer(
        bench_app,
        name="bench",
        help=(
            "Benchmarks (placement speed and quality).\n\n"
            "Examples:\n\n"
            "  rackscale bench placement --quick\n"
            "  rackscale bench simulate --scenario philly-speed\n\n"
            "rackscale bench COMMAND --help says what each one measures, and its targets."
        ),
    )


_mount_bench()
app.add_typer(
    slurm_app,
    name="slurm",
    help=(
        "Slurm: topology.conf, import a cluster, compare placement.\n\n"
        "Examples:\n\n"
        "  rackscale slurm topology --cluster examples/cluster-nvl72.yaml\n"
        "  rackscale slurm import -o cluster.yaml\n\n"
        "The slurm backend of `rackscale serve` is in docs/slurm.md."
    ),
)

app.add_typer(
    perf_app,
    name="perf",
    help=(
        "LLM serving and training on a system, predicted by the performance model (rackscale.llm).\n\n"
        "Examples:\n\n"
        "  rackscale perf serve --model deepseek-r1 --gpu gb200 --precision fp4 --mtp --vs b200\n"
        "  rackscale perf train --model llama-3.1-70b --gpu h100 --gpus 512\n\n"
        "docs/cli-perf.md says what each figure means and what it assumes."
    ),
)

app.add_typer(
    storage_app,
    name="storage",
    help=(
        "Storage lifecycle tiers: move checkpoints hot -> warm -> cold by age, delete past the last tier.\n\n"
        "Examples:\n\n"
        "  rackscale storage lifecycle -c storage-lifecycle.yaml --tier hot=/nvme/hot --tier warm=/ssd/warm "
        "--tier cold=/hdd/cold --dry-run\n\n"
        "docs/storage.md says what each tier means and why a crash loses nothing."
    ),
)


def main() -> None:
    app()


if __name__ == "__main__":  # python -m rackscale.cli.app
    main()
