"""The store's file before it is opened: where a URL's SQLite file is, and whether it can be used (empty,
truncated, corrupt, another program's database), moving a broken one aside on ``--init``."""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

from rackscale.service.store.faults import BrokenStore


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None: another database, or in memory)."""
    try:
        u = make_url(url)
    except sa_exc.ArgumentError:
        return None
    if not u.drivername.startswith("sqlite") or not u.database or u.database == ":memory:":
        return None
    if u.database.startswith("file:"):
        return None
    return Path(u.database)


def store_location(url: str) -> str:
    """Where the store is, for messages: the SQLite file, or the URL without its password."""
    path = sqlite_path(url)
    if path is not None:
        return str(path)
    return url.split("@")[-1] if "@" in url else url


_SQLITE_HEADER = b"SQLite format 3\x00"
_OURS = {"jobs", "events", "meta"}


def sqlite_file_problem(path: Path) -> str | None:
    """What makes this SQLite file unusable as a store, or None (fine, or absent, or a fault that opening it
    will report: permissions, a lock). Raises BrokenStore for a database that is not rackscale's."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            header = f.read(100)
    except FileNotFoundError:
        return None
    except OSError:
        return None  # opening it says why, with the fix
    if size == 0:
        return "is empty (a crash or a full disk may have truncated it)"
    if not header.startswith(_SQLITE_HEADER[: min(len(header), 16)]):
        return "is not a rackscale store (not even a SQLite database: it does not start with SQLite's header)"
    if len(header) < 100:
        return f"is truncated ({size} bytes: shorter than SQLite's header)"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    wal = Path(f"{path}-wal")
    no_wal = not wal.exists() or wal.stat().st_size == 0
    # The header's page count is valid when its change counter matches; with a WAL the file may lag it.
    if no_wal and header[24:28] == header[92:96] and page_size >= 512 and size < pages * page_size:
        return f"is truncated ({size} bytes; its header says {pages} pages of {page_size} bytes)"
    try:
        con = sqlite3.connect(str(path), timeout=10)
    except sqlite3.Error:
        return None
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        tables = {t for t in tables if not t.startswith("sqlite_")}
        if tables and "jobs" not in tables:
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            raise BrokenStore(
                f"the file {path} is a SQLite database but not a rackscale store (its tables: {shown}): point "
                "--data-dir elsewhere, or move the file away (--init does not replace another program's database)"
            )
        result = [r[0] for r in con.execute("PRAGMA quick_check(5)")]
    except sqlite3.DatabaseError as e:
        name = getattr(e, "sqlite_errorname", "") or ""
        text = str(e)
        if name.startswith(("SQLITE_NOTADB", "SQLITE_CORRUPT")) or "not a database" in text or "malformed" in text:
            return f"is corrupt ({' '.join(text.split())})"
        return None  # locked, unreadable, ...: opening it says why
    finally:
        con.close()
    if result != ["ok"]:
        said = "; ".join(" ".join(str(r).replace("*** in database main ***", "").split()) for r in result)
        return f"is corrupt (quick_check: {said.strip('; ')[:300]})"
    return None


def check_store_file(url: str, *, replace: bool) -> str | None:
    """Before opening a SQLite store: refuse one that is empty, truncated, corrupt or not a database
    (BrokenStore, one line that says what to do), or with ``replace`` move it (and its -wal and -shm) aside
    as ``FILE.broken-<UTC time>`` so that a new store starts; returns what was moved then, else None. A
    database that is not rackscale's is refused either way."""
    path = sqlite_path(url)
    if path is None:
        return None
    problem = sqlite_file_problem(path)
    if problem is None:
        return None
    what = "empty file" if problem.startswith("is empty") else "broken file"
    if not replace:
        raise BrokenStore(
            f"the store file {path} {problem}: restore it from a backup, or pass --init to start a new store "
            f"(the {what} is kept as {path}.broken-<UTC time>)"
        )
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    kept = Path(f"{path}.broken-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        src = Path(f"{path}{suffix}")
        if src.exists():
            os.replace(src, Path(f"{kept}{suffix}"))
    return f"the store file {path} {problem}: kept as {kept}; starting a new store"
