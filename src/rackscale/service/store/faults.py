"""What goes wrong in the store, as exceptions: a name already active (:class:`DuplicateJob`), one row the
database refuses (:class:`RejectedJob`), a store that cannot write now (:class:`StoreUnavailable`, with
the cause and the fix: see :func:`unavailable`), and a store file that cannot be used (:class:`BrokenStore`).
"""

from __future__ import annotations

import sqlite3

from sqlalchemy import exc as sa_exc

from rackscale.model.errors import RackscaleError


class DuplicateJob(RackscaleError, ValueError):
    """A run of that name is active (pending or running)."""


class RejectedJob(RackscaleError, ValueError):
    """The database refused this one job's row (e.g. a value too long for its column); the other jobs of
    its group commit went through."""

    def __init__(self, name: str, reason: str) -> None:
        self.name, self.reason = name, reason
        super().__init__(f"the store refused job {name[:80]!r}: {reason}")


class StoreUnavailable(RackscaleError):
    """The store cannot write now (disk full, read-only, I/O error, lost connection, ...). Nothing of the
    write was committed. ``reason``: the database's words; ``fix``: what to do about it."""

    def __init__(self, reason: str, fix: str) -> None:
        self.reason, self.fix = reason, fix
        super().__init__(f"the store cannot write: {reason} (fix: {fix})")


class BrokenStore(RackscaleError, ValueError):
    """The store file cannot be used as it is (empty, truncated, corrupt, not a database, not ours)."""


_RESUMES = "; the service resumes by itself"
# (words in the database's message, the fix); the first that matches
_FIXES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("full", "no space", "quota"), "free space in the data directory" + _RESUMES),
    (
        ("readonly", "read-only", "read only"),
        "make the store writable again (the file's and directory's permissions, a read-only mount)" + _RESUMES,
    ),
    (("disk i/o", "input/output"), "check the disk that holds the store (the kernel log says more)" + _RESUMES),
    (
        ("unable to open", "cannot open"),
        "check that the data directory still exists and is writable" + _RESUMES,
    ),
    (("locked", "busy"), "another process holds the store's write lock: stop it" + _RESUMES),
    (
        ("malformed", "not a database", "corrupt"),
        "the store is damaged: stop the service and restore the store from a backup",
    ),
)
_SERVER_FIX = "check that the database server runs and is reachable" + _RESUMES


def unavailable(e: BaseException) -> StoreUnavailable | None:
    """``e`` as a StoreUnavailable if it is a fault of the store (the disk, the file, the server), None if it
    is about what was written (a constraint, a value too long, a bug)."""
    if isinstance(e, StoreUnavailable):
        return e
    if isinstance(
        e,
        sa_exc.IntegrityError | sa_exc.DataError | sa_exc.ProgrammingError | sa_exc.NotSupportedError,
    ):
        return None
    orig = getattr(e, "orig", None) or e
    if isinstance(orig, sqlite3.IntegrityError | sqlite3.DataError | sqlite3.ProgrammingError):
        return None
    server = isinstance(e, sa_exc.DBAPIError) and bool(e.connection_invalidated)
    faults = sa_exc.DBAPIError | sa_exc.DisconnectionError | sa_exc.TimeoutError | sqlite3.DatabaseError | OSError
    if not isinstance(e, faults):
        return None
    text = (str(orig).strip().splitlines() or [type(orig).__name__])[0][:300]
    words = text.lower()
    state = str(getattr(orig, "sqlstate", "") or "")
    if state.startswith(("08", "57")) or server:  # connection exceptions, the server shutting down
        fix = _SERVER_FIX
    elif state.startswith("53"):  # insufficient resources (PostgreSQL's disk full is 53100)
        fix = "free space (disk, memory, connections) on the database server" + _RESUMES
    elif state == "25006":
        fix = "the database is read-only (a replica?): point --db-url at the primary" + _RESUMES
    else:
        fix = next((f for keys, f in _FIXES if any(k in words for k in keys)), "")
        if not fix:
            fix = ("check the store" if isinstance(orig, sqlite3.Error) else "check the database server") + _RESUMES
    out = StoreUnavailable(text, fix)
    out.__cause__ = e
    return out
