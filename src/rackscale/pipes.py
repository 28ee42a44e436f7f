"""Opening a file a user names for reading without hanging on a named pipe: what the spec reader
(:mod:`rackscale.loaders`) and the trace reader (:mod:`rackscale.workloads.trace_rows`) share.

``open()`` of a named pipe (FIFO) blocks until a writer opens the other end: one nobody writes to hangs the
verb for ever (``validate``, ``apply -f``, ``simulate --trace``). A pipe is opened without blocking, then
waited on for its writer :data:`FIFO_WAIT_S` at most, and refused with one line after. A pipe whose writer
comes (``--trace philly:<(zcat philly.csv.gz)``, a FIFO fed a moment later) is read as before.

A module of its own, in a layer under both readers (pyproject.toml's layers contract): the two are
independent siblings and may not import each other.
"""

from __future__ import annotations

import os
import select
import stat
from typing import TextIO

from rackscale.model.spec_errors import SpecError, SpecProblem

FIFO_WAIT_S = 10.0  # how long a named pipe (FIFO) is waited on for its writer before it is refused


def open_fd(path: str | os.PathLike[str], source: str) -> int:
    """``path`` opened for reading, as a blocking descriptor. Opened without blocking first: a named pipe
    (FIFO) that nobody writes to would otherwise hang the open for ever. A pipe is waited on for
    :data:`FIFO_WAIT_S` at most; with nothing by then it is refused (a :class:`SpecError` naming ``source``).
    Raises ``OSError`` as ``open()`` does (a missing file, no permission)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode) and not select.select([fd], [], [], FIFO_WAIT_S)[0]:
            raise SpecError(
                [
                    SpecProblem(
                        (),
                        f"a named pipe (FIFO) that nothing wrote to in {FIFO_WAIT_S:g} s",
                        "give a regular file, or start the pipe's writer first",
                    )
                ],
                source,
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_text(
    path: str | os.PathLike[str], source: str, *, encoding: str = "utf-8", newline: str | None = None
) -> TextIO:
    """``open(path, encoding=..., newline=...)`` for reading through :func:`open_fd`; the descriptor is closed
    when ``open()`` refuses it (a folder: ``IsADirectoryError``)."""
    fd = open_fd(path, source)
    try:
        return open(fd, encoding=encoding, newline=newline)  # the caller's `with` closes it
    except BaseException:
        os.close(fd)
        raise


__all__ = ["FIFO_WAIT_S", "open_fd", "open_text"]
