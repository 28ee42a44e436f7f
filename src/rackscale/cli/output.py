"""Shared output for the CLI verbs: ``-o table|json|yaml``, friendly errors (never a traceback), and
:func:`printable`, which every verb applies to text it did not write itself before it reaches a terminal."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console, ConsoleDimensions
from rich.table import Table
from rich.text import Text

PIPE_WIDTH = 1000  # columns when the output is no terminal: a pipe or a file gets whole lines


class _Console(Console):
    """A console that does not wrap at 80 columns when its output is no terminal.

    Rich takes a pipe or a file for an 80-column terminal (or the width of whatever terminal stdin or
    stderr is), so ``rackscale simulate | cat`` or ``> out.txt`` would fold or cut tables. Here a pipe or
    a file gets :data:`PIPE_WIDTH` columns: a table is as wide as its content (tables do not expand) and
    prose lines stay whole. ``COLUMNS`` still wins, as it does for a terminal."""

    @property
    def size(self) -> ConsoleDimensions:
        dims = super().size
        if self._width is None and not self.is_terminal and not self._environ.get("COLUMNS", "").isdigit():
            return ConsoleDimensions(PIPE_WIDTH, dims.height)
        return dims

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


console: Console = _Console()
err_console: Console = _Console(stderr=True)

# What a terminal would act on, or what would make a line read differently from what it holds: the C0
# controls (ESC starts ANSI/OSC sequences; CR and BS overwrite what came before), DEL, the C1 controls (a
# terminal may take \x9b for ESC [), the Unicode line and paragraph separators, the bidi and direction
# marks (U+202E shows the rest of a line reversed), and surrogates (never text on their own; not encodable).
_FORMAT = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_ONE_LINE = re.compile(f"[\x00-\x1f{_FORMAT}]")
_LINES = re.compile(f"[\x00-\x08\x0b-\x1f{_FORMAT}]")  # keeps \n and \t


def _visible(m: re.Match[str]) -> str:
    cp = ord(m.group())
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}"


def printable(text: str, *, multiline: bool = False) -> str:
    """``text`` with every character that could control the terminal shown as an escape (``\\x1b``,
    ``\\r``-> ``\\x0d``, ``\\u202e``, ``\\ud800``); other text, accented or CJK, is left as it is.

    Used on whatever came from the server or a file: job names, reasons, messages, events, spec values,
    server errors. ``multiline`` keeps newlines and tabs (error messages of several lines); otherwise they
    are escaped too, so one value stays one line (table cells, ``describe`` fields)."""
    return (_LINES if multiline else _ONE_LINE).sub(_visible, text)


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


# A report's ``-o`` and its ``--json`` (the ``bench`` verbs, ``slurm compare``): one spelling and one help line
# for all of them. --json stays for the scripts and docs that use it; chosen_format says how the two combine.
ReportOutputOpt = Annotated[
    OutputFormat,
    typer.Option("--output", "-o", help="table (default), json or yaml (the JSON document, as YAML)."),
]
ReportJsonOpt = Annotated[bool, typer.Option("--json", help="Same as -o json: only the JSON report on stdout.")]


def emit(data: Any, fmt: OutputFormat, *, columns: Sequence[str] | None = None, title: str | None = None) -> None:
    """Print ``data`` (a list of row dicts, or any JSON-able value) in the chosen format.

    JSON and YAML escape every control and non-ASCII character (``\\u001b``; ``"\\e"``, ``"\\u202E"``),
    so what they print is safe on a terminal and reads back as the same value."""
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str, ensure_ascii=True) + "\n")
        return
    if fmt is OutputFormat.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, allow_unicode=False))
        return
    rows = data if isinstance(data, list) else [data]
    cols = list(columns or (rows[0].keys() if rows else []))
    table = Table(title=Text(printable(title)) if title else None)
    for c in cols:
        table.add_column(Text(printable(str(c))), overflow="fold")
    for r in rows:
        table.add_row(*(Text(printable(_cell(r.get(c)))) for c in cols))  # Text: a cell's [..] is no markup
    console.print(table)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if v is None:
        return "-"
    return str(v)


def fail(message: str, *, code: int = 2) -> NoReturn:
    """Print an error a user can act on, and exit. ``message`` is shown as text: no markup, no emoji codes,
    no terminal controls (see :func:`printable`)."""
    # soft_wrap: one error is one line, however long (a list of choices); the terminal wraps it for display.
    err_console.print(Text.assemble(("error:", "bold red"), " ", printable(message, multiline=True)), soft_wrap=True)
    raise typer.Exit(code)


def given_options(ctx: typer.Context, names: tuple[str, ...]) -> list[str]:
    """The options among ``names`` (parameter names) that the command line gave, not their defaults, as
    typed (``--isl``; ``--mtp/--no-mtp``). By the source's name: typer ships its own copy of click, whose
    ``ParameterSource`` is not click's."""
    given = []
    for p in ctx.command.params:
        source = ctx.get_parameter_source(p.name) if p.name in names else None
        if source is not None and source.name == "COMMANDLINE":
            given.append("/".join([p.opts[0], *p.secondary_opts]))
    return given


def chosen_format(output: OutputFormat, as_json: bool, *, ctx: typer.Context | None = None) -> OutputFormat:
    """``--json`` is ``-o json``: with ``-o yaml`` (or any other) too, the two disagree, and one line says so
    rather than one of them being dropped without a word.

    ``-o table`` is the default, so only the command's ``ctx`` tells it from no ``-o`` at all: with it, an
    ``-o table`` typed beside ``--json`` is refused as well (every verb passes it; None only where the format
    was chosen already). (The option must be the parameter named ``output``.)"""
    typed = ctx is not None and bool(given_options(ctx, ("output",)))
    if as_json and output is not OutputFormat.json and (typed or output is not OutputFormat.table):
        fail(f"--json means -o json, and -o {output.value} was given too: give one of them")
    return OutputFormat.json if as_json else output


def emit_document(data: Any, fmt: OutputFormat) -> None:
    """Print a report (a benchmark's) as JSON or YAML, the same document either way.

    JSON is :func:`emit`'s, byte for byte. YAML is ``yaml.safe_dump`` of what that JSON reads back as, not of
    ``data`` itself: a tuple is a list and a non-string key a string in both (safe_dump would refuse a tuple
    and keep an ``int`` key an ``int``), and only plain YAML comes out, never a Python tag. Non-finite floats
    stay numbers: JSON writes ``NaN``/``Infinity`` (Python's reading of JSON, as the reports always have),
    YAML its own ``.nan``/``.inf``, and both read back as the same float."""
    if fmt is OutputFormat.yaml:
        data = json.loads(json.dumps(data, default=str))
    emit(data, fmt)
