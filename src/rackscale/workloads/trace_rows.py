"""Reading a trace file and checking its rows by hand (no pydantic per row: a trace of 100k rows loads in a
fraction of a second): the file's text (:func:`read_text`), a CSV table with its header checked
(:func:`open_csv`, :class:`CsvTable`), and one row's values (:class:`RowCheck`, :func:`gpu_models`). Every
bad value becomes a :class:`SpecProblem` carrying its line."""

from __future__ import annotations

import csv
import difflib
import io
import math
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from rackscale.model.spec_docs import MAX_UNITS
from rackscale.model.spec_errors import SpecError, SpecProblem
from rackscale.model.text import char_name, first_bad_char
from rackscale.pipes import open_text


class _Reader(Protocol):
    """What ``csv.reader`` returns."""

    line_num: int

    def __next__(self) -> list[str]: ...


# A trace file's bytes at most: ten times the largest public GPU trace's job table (Alibaba PAI 2020's
# ~100 MB), and 10 million rows of ~100 bytes, the synthetic mix's bound. A device (/dev/zero) was read until
# memory ran out.
MAX_TRACE_BYTES = 1 << 30
_PIPE_PART = 1 << 20  # characters read from a pipe at a time


def _too_big(what: str) -> SpecProblem:
    return SpecProblem(
        (), f"the {what} is larger than {MAX_TRACE_BYTES >> 20:,} MiB", "give a part of it (a range of days)"
    )


def read_text(path: str | os.PathLike[str], what: str) -> tuple[str, str]:
    """``(source, text)`` of the file at ``path``; a :class:`SpecError` with a fix if it cannot be read. A
    regular file or a pipe (``<(zcat trace.csv.gz)``), at most :data:`MAX_TRACE_BYTES`; a device is refused
    (``/dev/zero`` never ends), and so is a named pipe nothing writes to within
    :data:`~rackscale.pipes.FIFO_WAIT_S`."""
    source = os.fspath(path)
    try:
        # A named pipe is waited on for its writer FIFO_WAIT_S at most, then refused (open() hung for ever).
        with open_text(path, source, encoding="utf-8-sig", newline="") as f:
            st = os.fstat(f.fileno())
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                fix = f"give the path of the {what} file itself"
                raise SpecError([SpecProblem((), "is a device, not a file", fix)], source)
            if st.st_size > MAX_TRACE_BYTES:  # a regular file's size is known before reading it
                raise SpecError([_too_big(what)], source)
            if stat.S_ISREG(st.st_mode):
                return source, f.read()
            # A pipe's is not: read in parts up to the bound (characters <= bytes). Not read(bound + 1), which
            # allocates the whole bound (1 GiB) up front however little comes.
            parts: list[str] = []
            got = 0
            while part := f.read(_PIPE_PART):
                got += len(part)
                if got > MAX_TRACE_BYTES:
                    raise SpecError([_too_big(what)], source)
                parts.append(part)
            return source, "".join(parts)
    except FileNotFoundError:
        fix = f"check the path (relative paths start at {os.getcwd()}); the public traces are in ../shared/traces/"
        problem = SpecProblem((), "file not found", fix)
    except IsADirectoryError:
        problem = SpecProblem((), "is a directory", f"give the path of the {what} file itself")
    except UnicodeDecodeError as err:
        problem = SpecProblem((), f"not UTF-8 text (byte {err.start})", f"save the {what} as UTF-8 text")
    except OSError as err:
        problem = SpecProblem((), f"cannot read: {err.strerror or err}", "check that it is a readable file")
    raise SpecError([problem], source)


@dataclass(slots=True)
class CsvTable:
    """An opened CSV trace: its header's column indexes and the rows still to read."""

    source: str
    columns: dict[str, int]
    width: int
    reader: _Reader
    header_line: int

    def rows(self, problems: list[SpecProblem]) -> Iterator[tuple[int, list[str]]]:
        """``(line, fields)`` of each row; blank lines pass silently, rows of the wrong width are reported."""
        reader = self.reader
        prev, width = self.header_line, self.width
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as err:
                problems.append(SpecProblem((), f"unreadable CSV: {err}", "check the quoting of this row", prev + 1))
                if reader.line_num == prev:
                    return
                prev = reader.line_num
                continue
            line, prev = prev + 1, reader.line_num
            if len(row) != width:
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                fix = "give one value per header column (empty for an optional one); quote values with commas"
                problems.append(SpecProblem((), f"has {len(row)} fields, the header has {width}", fix, line))
                continue
            yield line, row


def open_csv(
    path: str | os.PathLike[str],
    *,
    what: str,
    required: Sequence[str],
    known: Sequence[str] | None = None,
) -> CsvTable:
    """Read the header of a CSV trace; a missing required column (or, with ``known``, an unknown one) is a
    :class:`SpecError` at the header's line."""
    source, text = read_text(path, what)
    reader = csv.reader(io.StringIO(text, newline=""))
    example = ",".join(known or required)
    try:
        header = next(reader, None)
        while header is not None and not any(h.strip() for h in header):
            header = next(reader, None)
    except csv.Error as err:
        raise SpecError(
            [SpecProblem((), f"unreadable CSV header: {err}", f"start with: {example}", 1)], source
        ) from None
    if header is None:
        raise SpecError([SpecProblem((), "empty file: no header line", f"start with the header: {example}")], source)
    line = reader.line_num
    names = [h.strip() for h in header]
    problems: list[SpecProblem] = []
    missing = [c for c in required if c not in names]
    if missing:
        plural = "s" if len(missing) > 1 else ""
        fix = f"the {what} header is {example} (this one is {','.join(names)})"
        problems.append(SpecProblem((), f"the header lacks the column{plural} {', '.join(missing)}", fix, line))
    for name in names:
        if known is not None and name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            fix = f"{hint}the {what} columns are {', '.join(known)}"
            problems.append(SpecProblem((name,), "unknown column", fix, line))
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(SpecProblem((name,), "the header names this column twice", "keep one of them", line))
    if problems:
        raise SpecError(problems, source)
    return CsvTable(source, {n: i for i, n in enumerate(names)}, len(names), reader, line)


# --------------------------------------------------------------------------------------------- values
class RowCheck:
    """Reads the values of one row, recording one problem per bad value (``ok`` turns False).

    Each reader returns ``None`` for an absent value (empty, or a missing JSON key) and for a bad one; an
    absent ``required`` value is a problem too, so ``ok`` tells the two apart.
    """

    __slots__ = ("line", "ok", "problems")

    def __init__(self, line: int, problems: list[SpecProblem]) -> None:
        self.line = line
        self.problems = problems
        self.ok = True

    def fail(self, column: str, message: str, fix: str = "") -> None:
        self.ok = False
        self.problems.append(SpecProblem((column,) if column else (), message, fix, self.line))

    def _absent(self, column: str, value: object, required: bool) -> bool:
        if value is None or (isinstance(value, str) and not value.strip()):
            if required:
                self.fail(column, "missing value", f"give a value for {column}")
            return True
        return False

    def text(self, column: str, value: object, *, required: bool = True) -> str | None:
        if self._absent(column, value, required):
            return None
        if not isinstance(value, str):
            self.fail(column, f"must be text, got {value!r}", f"write {column} as a string")
            return None
        if (bad := first_bad_char(value)) is not None:  # the one string rule of model/text.py
            self.fail(column, f"contains {char_name(bad)}", "use printable text only")
            return None
        return value.strip()

    def number(self, column: str, value: object, *, required: bool = True, negative: str = "") -> float | None:
        """A finite number >= 0 (``negative``: the message for one < 0)."""
        if self._absent(column, value, required):
            return None
        try:
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise ValueError
            x = float(value)
        except (ValueError, OverflowError):
            self.fail(column, f"not a number: {value!r}", f"write {column} as a plain number, e.g. 3600")
            return None
        if not math.isfinite(x):
            self.fail(column, f"not a finite number: {value!r}", f"write {column} as a plain number")
            return None
        if x < 0:
            self.fail(column, negative or f"must be >= 0, got {value!r}", f"{column} cannot be negative")
            return None
        return x

    def whole(
        self, column: str, value: object, *, required: bool = True, low: int = 0, high: int = MAX_UNITS
    ) -> int | None:
        """A whole number in ``low..high`` (``8`` or ``8.0``)."""
        x = self.number(column, value, required=required)
        if x is None:
            return None
        if not x.is_integer():
            self.fail(column, f"must be a whole number, got {value!r}", "drop the fraction")
            return None
        if not low <= x <= high:
            self.fail(column, f"must be in {low}..{high}, got {value!r}", f"use a value from {low} to {high}")
            return None
        return int(x)


def gpu_models(value: object, check: RowCheck, column: str) -> frozenset[str] | None:
    """``'A|B'`` (or a JSON list) -> ``frozenset({'A', 'B'})``; empty -> ``None`` (any model)."""
    if value is None:
        return None
    if isinstance(value, str):
        names = [s.strip() for s in value.split("|")]
    elif isinstance(value, list) and all(isinstance(s, str) for s in value):
        names = [s.strip() for s in value]
    else:
        check.fail(column, f"must be model names separated by '|', got {value!r}", "e.g. V100M16|V100M32")
        return None
    models = frozenset(n for n in names if n)
    return models or None
