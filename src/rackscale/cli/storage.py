"""``rackscale storage lifecycle``: move checkpoints between the hot, warm and cold tiers by age and delete
them past the last tier, as the plan's ``storage-lifecycle`` ConfigMap says (docs/storage.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rackscale.cli.output import OutputFormat, console, emit, err_console, fail, printable

if TYPE_CHECKING:
    from rackscale.storage.lifecycle import Report

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
PROGRESS_FROM = 4  # files to move or delete from which a progress bar is drawn (on a terminal)


@app.command()
def lifecycle(
    config: Annotated[
        Path, typer.Option("--config", "-c", help="The storage-lifecycle ConfigMap (YAML/JSON) or a bare mapping.")
    ],
    tier: Annotated[
        list[str],
        typer.Option("--tier", metavar="TIER=PATH", help="A tier's folder: hot=PATH, warm=PATH and cold=PATH."),
    ],
    include: Annotated[
        list[str] | None,
        typer.Option(
            "--include",
            metavar="FOLDER",
            help="Also manage this folder of each tier (repeatable); checkpoints/ always is.",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only plan: say what would move; change nothing.")] = False,
    now: Annotated[
        str | None,
        typer.Option("--now", metavar="ISO8601", help="Take this as now (tests, what-ifs), e.g. 2025-07-01T00:00Z."),
    ] = None,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help="table, json or yaml.")] = OutputFormat.table,
) -> None:
    """Move files between storage tiers by age (now - mtime) and delete them past the last tier.

    Examples:

      rackscale storage lifecycle --config storage-lifecycle.yaml \\
          --tier hot=/nvme/hot --tier warm=/ssd/warm --tier cold=/hdd/cold --dry-run
      rackscale storage lifecycle -c storage-lifecycle.yaml --tier hot=/nvme/hot --tier warm=/ssd/warm \\
          --tier cold=/hdd/cold --include datasets -o json

    Older than hot-tier: hot -> warm; older than warm-tier: -> cold; older than cold-tier: deleted. Each move
    copies, fsyncs and verifies before the source goes: a crash loses nothing and a rerun finishes it. Exit
    code 0; 1 when a file was refused (named in the report); 2 for bad options or config.
    """
    import time

    from rackscale.model.spec_errors import SpecError
    from rackscale.storage.config import load_lifecycle, parse_tier_options
    from rackscale.storage.lifecycle import DEFAULT_INCLUDE, LifecycleError, run_lifecycle

    try:
        roots = parse_tier_options(tier)
    except ValueError as e:
        fail(str(e))
    try:
        policy = load_lifecycle(config)
    except SpecError as e:
        fail(str(e))
    when = _parse_now(now) if now is not None else time.time()
    folders = tuple(dict.fromkeys([*DEFAULT_INCLUDE, *(include or ())]))
    try:
        with _progress(enabled=not dry_run and err_console.is_terminal) as progress:
            report = run_lifecycle(
                roots=roots, policy=policy, now=when, include=folders, dry_run=dry_run, progress=progress
            )
    except LifecycleError as e:
        fail(str(e))
    if output is OutputFormat.table:
        _table(report)
    else:
        emit(report.to_dict(), output)
    if report.refused:
        raise typer.Exit(1)


def _parse_now(text: str) -> float:
    from datetime import datetime

    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        fail(f"--now must be an ISO 8601 time, e.g. 2025-07-01T00:00:00Z (got {text!r})")
    if t.tzinfo is None:
        fail(f"--now needs a time zone, e.g. {text}Z or {text}+00:00 (got {text!r})")
    return t.timestamp()


class _progress:
    """A rich progress bar on stderr once there are more than a few files (off when not a terminal)."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> Callable[[int, int], None]:
        return self.update

    def update(self, done: int, total: int) -> None:
        if not self.enabled or total < PROGRESS_FROM:
            return
        if self.bar is None:
            from rich.progress import Progress

            self.bar = Progress(console=err_console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task("moving", total=total)
        self.bar.update(self.task, completed=done)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def _table(report: Report) -> None:
    from rackscale.storage.config import TIERS

    rows = [
        {
            "TIER": str(t),
            "FILES": f"{report.before[t].files} -> {report.after[t].files}",
            "BYTES": f"{report.before[t].bytes} -> {report.after[t].bytes}",
        }
        for t in TIERS
    ]
    verb = "would move" if report.dry_run else "moved"
    emit(rows, OutputFormat.table, title=f"storage lifecycle{' (dry run)' if report.dry_run else ''}")
    for m in report.moved:
        console.print(f"{verb} {m.src} -> {m.dst}: {printable(m.rel)} ({m.bytes} bytes)", highlight=False, markup=False)
    for d in report.deleted:
        console.print(
            f"{'would delete' if report.dry_run else 'deleted'} {d.tier}: {printable(d.rel)} ({d.bytes} bytes)",
            highlight=False,
            markup=False,
        )
    for r in report.refused:
        console.print(f"refused {r.tier}: {printable(r.rel)}: {printable(r.reason)}", highlight=False, markup=False)
    for c in report.cleaned:
        console.print(f"removed a leftover partial copy {printable(c)}", highlight=False, markup=False)
