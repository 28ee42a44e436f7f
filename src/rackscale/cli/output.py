"""Shared output for the CLI verbs: ``-o table|json|yaml`` and friendly errors (never a traceback)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

console = Console()
err_console = Console(stderr=True)


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


def emit(data: Any, fmt: OutputFormat, *, columns: Sequence[str] | None = None, title: str | None = None) -> None:
    """Print ``data`` (a list of row dicts, or any JSON-able value) in the chosen format."""
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
        return
    if fmt is OutputFormat.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))
        return
    rows = data if isinstance(data, list) else [data]
    cols = list(columns or (rows[0].keys() if rows else []))
    table = Table(title=title)
    for c in cols:
        table.add_column(c, overflow="fold")
    for r in rows:
        table.add_row(*(_cell(r.get(c)) for c in cols))
    console.print(table)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if v is None:
        return "-"
    return str(v)


def fail(message: str, *, code: int = 2) -> NoReturn:
    """Print an error a user can act on, and exit."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)  # a message's [..] is text
    raise typer.Exit(code)
