"""Persistent state: every accepted job and every change to it, committed before the service replies.

SQLAlchemy Core over SQLite (WAL, the default, in the data directory) or any URL SQLAlchemy takes
(PostgreSQL: ``postgresql+psycopg://...``). Status changes are conditional updates (``WHERE status IN
...``), so a cancellation and a placement racing for the same job cannot both win: the one committed first
does, and the other learns it from the rows it could not change.

Faults (disk full, a read-only file, an I/O error, a lost PostgreSQL connection) make a write raise
:class:`StoreUnavailable`, which says the cause and the fix; nothing of that write was committed, and the
store remembers it (``failing``) until a write commits again. A row the database refuses for itself (a
value too long for its column) fails alone: the others of its group commit.

Every submission is a *run*, one row, its ``seq`` its id. A name is unique among the active runs (pending,
running: a partial unique index), so a name whose job has ended can be submitted again: a new run, the ended
ones kept as history. Reads by name (``get``, ``events``, ``cancel``) take the latest run; the event log
belongs to a run (``events.run``). An older store (names unique over all rows, events keyed by name) is
migrated when it is opened (``_migrate``).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    bindparam,
    create_engine,
    delete,
    event,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.schema import CreateTable

from rackscale.model.errors import RackscaleError
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.service.live import CANCELLED, COMPLETED, FAILED, PREEMPTED, SCHEDULED, WAITING, Change

log = logging.getLogger("rackscale.service")

PENDING, RUNNING = "pending", "running"
ACTIVE = (PENDING, RUNNING)
STATUSES = (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED)

metadata = MetaData()
jobs = Table(
    "jobs",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("name", String(253), nullable=False),  # unique among active runs: ux_jobs_active_name
    Column("queue", String(253), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("gpus", Float, nullable=False),  # GPU demand (a shared GPU counts its fraction)
    Column("priority", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("reason", String(64), nullable=False, default=""),
    Column("message", Text, nullable=False, default=""),
    Column("doc", Text, nullable=False),  # the submitted document, as JSON
    Column("submitted", Float, nullable=False),
    Column("started", Float),
    Column("ended", Float),
    Column("placement", Text),  # JSON: where it runs, or ran (cleared when preempted)
    Column("exit_code", Integer),
    Column("restarts", Integer, nullable=False, default=0),
    Index("ix_jobs_status", "status"),
    Index("ix_jobs_queue", "queue"),
    Index("ix_jobs_name", "name", "seq"),  # a name's runs, the latest first
)
# Literal text, not bound values: a partial index is used for ON CONFLICT only where the statement's WHERE
# is the index's own (SQLite and PostgreSQL prove it from the text).
_ACTIVE_SQL = f"status IN ({', '.join(repr(s) for s in ACTIVE)})"
Index(
    "ux_jobs_active_name",
    jobs.c.name,
    unique=True,
    sqlite_where=text(_ACTIVE_SQL),
    postgresql_where=text(_ACTIVE_SQL),
)
events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job", String(253), nullable=False),
    Column("run", Integer),  # the run's seq (None only for an event of a store migrated without its job row)
    Column("time", Float, nullable=False),
    Column("type", String(16), nullable=False),
    Column("reason", String(64), nullable=False),
    Column("message", Text, nullable=False),
    Index("ix_events_run", "run", "id"),
)
meta = Table("meta", metadata, Column("key", String(64), primary_key=True), Column("value", Text, nullable=False))

# A change applies only to a job in one of these statuses, and moves it to the second.
_TRANSITIONS: dict[str, tuple[tuple[str, ...], str | None]] = {
    SCHEDULED: ((PENDING,), RUNNING),
    PREEMPTED: ((RUNNING,), PENDING),
    COMPLETED: ((RUNNING,), COMPLETED),
    FAILED: (ACTIVE, FAILED),
    WAITING: ((PENDING,), None),
}


# Built once: SQLAlchemy caches the compiled form of a statement object, not of one rebuilt per call.
_INSERT_RETURNING = insert(jobs).returning(jobs.c.name, jobs.c.seq)


def _insert_new_statement(dialect: str) -> Any:
    """INSERT .. ON CONFLICT (name) WHERE <active> DO NOTHING RETURNING name, seq, where the dialect has it:
    a name taken by an active run is skipped; an ended run's name is free."""
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert  # type: ignore[assignment]
    else:
        return None
    return (
        dialect_insert(jobs)
        .on_conflict_do_nothing(index_elements=["name"], index_where=text(_ACTIVE_SQL))
        .returning(jobs.c.name, jobs.c.seq)
    )


_INSERT_EVENT = insert(events)


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


@dataclass(frozen=True, slots=True)
class JobRow:
    seq: int
    name: str
    queue: str
    kind: str
    gpus: float
    priority: int
    status: str
    reason: str
    message: str
    doc: dict[str, Any]
    submitted: float
    started: float | None
    ended: float | None
    placement: Placement | None
    exit_code: int | None
    restarts: int
    # Why the stored record cannot be read as it is (its JSON or text does not decode); then doc is {},
    # placement None, and message says so. None for a sound row.
    corrupt: str | None = None


@dataclass(frozen=True, slots=True)
class EventRow:
    id: int
    job: str
    run: int | None
    time: float
    type: str
    reason: str
    message: str


class Store:
    """Reads run on the caller's thread (WAL: they never wait for a writer). Every write goes through one
    writer thread, so writers never contend for SQLite's lock, and submissions that arrive together are
    committed together (group commit): one transaction, one sync, for a batch of jobs.

    ``failing`` says why the last write failed for a fault of the store (None once a write commits again);
    ``created`` whether this Store made the tables (a new store); ``migrated`` what opening it changed in an
    older store's schema."""

    def __init__(self, url: str, *, synchronous: str = "NORMAL") -> None:
        self.url = url
        self.location = store_location(url)
        sqlite = url.startswith("sqlite")
        # Two engines: writes take the write lock up front (BEGIN IMMEDIATE on SQLite); reads never do.
        # A server's pooled connection may have died while idle (a restart of PostgreSQL): test it first.
        self.engine: Engine = create_engine(url, pool_pre_ping=not sqlite)
        self.reader: Engine = create_engine(url, pool_pre_ping=not sqlite)
        if self.engine.dialect.name == "sqlite":
            _sqlite_setup(self.engine, synchronous, immediate=True)
            _sqlite_setup(self.reader, synchronous, immediate=False)
        self.created = not sa_inspect(self.engine).has_table("jobs")
        metadata.create_all(self.engine)
        self.migrated = [] if self.created else _migrate(self.engine)  # what was changed in an older store
        for step in self.migrated:
            log.warning("store %s migrated: %s", self.location, step)
        if self.created:  # marks the store as rackscale's (and when it began)
            stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            with self.engine.begin() as c:
                if c.execute(select(meta.c.key).where(meta.c.key == "created")).first() is None:
                    c.execute(insert(meta).values(key="created", value=stamp))
        self.write_error: StoreUnavailable | None = None  # the last write's fault, until one commits
        self._insert_new = _insert_new_statement(self.engine.dialect.name)
        self._writes: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write_loop, name="rackscale-store-writer", daemon=True)
        self._writer.start()

    def close(self) -> None:
        self._writes.put(None)
        self._writer.join(timeout=30)
        self.engine.dispose()
        self.reader.dispose()

    @property
    def failing(self) -> str | None:
        """Why the store's last write failed (disk full, read-only, ...), with the fix; None when it took
        its last write."""
        e = self.write_error
        return str(e) if e is not None else None

    def is_new(self) -> bool:
        """Created at this start, or holding no job at all."""
        if self.created:
            return True
        with self.reader.connect() as c:
            return c.execute(select(jobs.c.seq).limit(1)).first() is None

    # ------------------------------------------------------------------ writes (each waits for its commit)
    def insert_job(
        self, *, name: str, queue: str, kind: str, gpus: float, priority: int, doc: dict[str, Any], submitted: float
    ) -> JobRow:
        return self.insert_job_later(
            name=name, queue=queue, kind=kind, gpus=gpus, priority=priority, doc=doc, submitted=submitted
        ).result()

    def insert_job_later(
        self, *, name: str, queue: str, kind: str, gpus: float, priority: int, doc: dict[str, Any], submitted: float
    ) -> Future[JobRow]:
        """Queue a new job for the next group commit; the future holds its row once committed, or raises
        DuplicateJob, RejectedJob (the database refused this row) or StoreUnavailable (nothing committed).
        (The API awaits it, so the event loop never waits on the database.)"""
        row = {
            "name": name,
            "queue": queue,
            "kind": kind,
            "gpus": gpus,
            "priority": priority,
            "status": PENDING,
            "reason": "Queued",
            "message": "waiting for the next scheduling cycle",
            "doc": json.dumps(doc, separators=(",", ":")),
            "submitted": submitted,
            "restarts": 0,
        }
        w = _Write(insert=row)
        self._writes.put(w)
        return w.future

    def cancel(self, name: str, now: float) -> JobRow | None:
        """Cancel the active run of ``name``. Returns its row after, or the latest run unchanged if none is
        active (None: no such name). Raises StoreUnavailable when the store cannot write (then nothing
        changed)."""
        got: JobRow | None = self._call(lambda c: self._cancel(c, name, now))
        return got

    def apply(self, changes: Sequence[Change]) -> set[str]:
        """Commit a cycle's changes in one transaction; return the jobs whose change did not apply (their
        status moved meanwhile, e.g. cancelled between the decision and this commit). Raises StoreUnavailable
        when the store cannot write (then nothing of it was committed)."""
        if not changes:
            return set()
        rejected: set[str] = self._call(lambda c: _apply(c, changes))
        return rejected

    def set_meta(self, key: str, value: str) -> None:
        def run(c: Connection) -> None:
            if c.execute(select(meta.c.key).where(meta.c.key == key)).first() is None:
                c.execute(insert(meta).values(key=key, value=value))
            else:
                c.execute(update(meta).where(meta.c.key == key).values(value=value))

        self._call(run)

    def probe(self) -> bool:
        """A small real write (a row big enough to need new pages, deleted in the same transaction): does
        the store take writes again? Clears ``failing`` when it commits."""

        def run(c: Connection) -> None:
            c.execute(delete(meta).where(meta.c.key == _PROBE_KEY))
            c.execute(insert(meta).values(key=_PROBE_KEY, value=_PROBE_VALUE))
            c.execute(delete(meta).where(meta.c.key == _PROBE_KEY))

        try:
            self._call(run)
        except StoreUnavailable:
            return False
        return True

    def _call(self, fn: Callable[[Connection], Any]) -> Any:
        w = _Write(fn=fn)
        self._writes.put(w)
        return w.future.result()

    @staticmethod
    def _cancel(c: Connection, name: str, now: float) -> JobRow | None:
        active = c.execute(
            select(jobs.c.seq).where(and_(jobs.c.name == name, jobs.c.status.in_(ACTIVE))).with_for_update()
        ).scalar_one_or_none()
        if active is None:
            got = c.execute(_latest_run(name)).mappings().first()
            return _row(got) if got is not None else None
        message = "cancelled by a user"
        c.execute(
            update(jobs)
            .where(jobs.c.seq == active)
            .values(status=CANCELLED, ended=now, reason="Cancelled", message=message)
        )
        c.execute(
            _INSERT_EVENT,
            {"job": name, "run": active, "time": now, "type": CANCELLED, "reason": "Cancelled", "message": message},
        )
        return _row(c.execute(select(jobs).where(jobs.c.seq == active)).mappings().one())

    # ------------------------------------------------------------------ the writer thread
    def _write_loop(self) -> None:
        while True:
            first = self._writes.get()
            if first is None:
                return
            batch = [first]
            stop = False
            # A new job waits up to GATHER_S for others to share its commit: a transaction costs far more
            # than a row (about 400 us alone, 35 us a row in a batch of 64).
            deadline = time.monotonic() + (GATHER_S if first.insert is not None else 0.0)
            while len(batch) < MAX_GROUP:
                try:
                    left = deadline - time.monotonic()
                    w = self._writes.get(timeout=left) if left > 0 else self._writes.get_nowait()
                except queue.Empty:
                    break
                if w is None:
                    stop = True
                    break
                batch.append(w)
            # In arrival order; a run of inserts is one transaction.
            i = 0
            while i < len(batch):
                j = i
                while j < len(batch) and batch[j].insert is not None:
                    j += 1
                if j > i:
                    self._insert_many(batch[i:j])
                    i = j
                    continue
                self._run_one(batch[i])
                i += 1
            if stop:
                return

    def _run_one(self, w: _Write) -> None:
        assert w.fn is not None
        try:
            with self.engine.begin() as c:
                result = w.fn(c)
        except BaseException as e:  # handed to the waiting caller, who decides
            down = unavailable(e) if isinstance(e, Exception) else None
            if down is not None:
                self._failed(down)
            w.future.set_exception(down or e)
        else:
            self._took()
            w.future.set_result(result)

    def _failed(self, e: StoreUnavailable) -> None:
        if self.write_error is None:
            log.error("%s", e)
        self.write_error = e

    def _took(self) -> None:
        if self.write_error is not None:
            log.warning("the store takes writes again (it failed with: %s)", self.write_error.reason)
            self.write_error = None

    def _insert_many(self, writes: list[_Write]) -> None:
        """One transaction for a batch of new jobs. A name an active run holds (or twice in the batch) makes that
        job's future raise DuplicateJob; the others commit. If the batch fails for one bad row (a value the
        database refuses), each job is tried again alone: only the bad one fails, with RejectedJob. If it
        fails for a fault of the store, every job of it gets StoreUnavailable."""
        rows = [w.insert for w in writes if w.insert is not None]
        try:
            with self.engine.begin() as c:
                if self._insert_new is not None:  # INSERT .. ON CONFLICT DO NOTHING RETURNING: one statement
                    got = dict(c.execute(self._insert_new, rows).all())
                else:
                    names = [r["name"] for r in rows]
                    taken = set(
                        c.execute(
                            select(jobs.c.name).where(and_(jobs.c.name.in_(names), jobs.c.status.in_(ACTIVE)))
                        ).scalars()
                    )
                    fresh = [r for r in dict((r["name"], r) for r in reversed(rows)).values() if r["name"] not in taken]
                    got = dict(c.execute(_INSERT_RETURNING, fresh).all()) if fresh else {}
        except Exception as e:
            down = unavailable(e)
            if down is not None:
                self._failed(down)
                for w in writes:
                    w.future.set_exception(down)
            elif len(writes) > 1:
                for w in writes:  # one transaction each: find the bad row, commit the others
                    self._insert_many([w])
            else:
                reason = (str(getattr(e, "orig", e)).strip().splitlines() or [type(e).__name__])[0][:300]
                log.warning("the store refused job %r: %s", rows[0]["name"][:80], reason)
                writes[0].future.set_exception(RejectedJob(rows[0]["name"], reason))
            return
        except BaseException as e:
            for w in writes:
                w.future.set_exception(e)
            return
        self._took()
        for w, r in zip(writes, rows, strict=True):
            seq = got.pop(r["name"], None)  # the first job of a name gets it; a second one is a duplicate
            if seq is not None:
                extra = {"seq": seq, "started": None, "ended": None, "placement": None, "exit_code": None}
                w.future.set_result(_row({**r, **extra}))
            else:
                w.future.set_exception(DuplicateJob(r["name"]))

    # ------------------------------------------------------------------ reads
    def get_meta(self, key: str) -> str | None:
        with self.reader.connect() as c:
            return c.execute(select(meta.c.value).where(meta.c.key == key)).scalar_one_or_none()

    def latest_time(self) -> float | None:
        """The latest service-clock time the store saw (the clock resumes from it after a restart)."""
        with self.reader.connect() as c:
            times = [c.execute(select(func.max(t))).scalar_one_or_none() for t in (events.c.time, jobs.c.submitted)]
        known = [t for t in times if t is not None]
        return max(known) if known else None

    def get(self, name: str, *, run: int | None = None) -> JobRow | None:
        """The latest run of ``name`` (the active one, if any: it is always the latest), or its run ``run``."""
        q = _latest_run(name) if run is None else select(jobs).where(and_(jobs.c.name == name, jobs.c.seq == run))
        got = self._fetch(q)
        return _row(got[0]) if got else None

    def earlier_runs(self, name: str, before: int, *, limit: int = 5) -> tuple[int, list[JobRow]]:
        """How many runs of ``name`` came before run ``before``, and the last ``limit`` of them, latest first."""
        where = and_(jobs.c.name == name, jobs.c.seq < before)
        counted = self._fetch(select(func.count().label("n")).select_from(jobs).where(where))
        n = int(counted[0]["n"]) if counted else 0
        if n == 0:
            return 0, []
        return n, [_row(m) for m in self._fetch(select(jobs).where(where).order_by(jobs.c.seq.desc()).limit(limit))]

    def _fetch(self, q: Any) -> list[Any]:
        """The rows of ``q`` (as mappings). SQLite keeps whatever bytes it is given as text; one value that is
        not UTF-8 would fail the whole query: then the query runs again, decoding leniently (the rows'
        readers mark such a row corrupt)."""
        with self.reader.connect() as c:
            try:
                return list(c.execute(q).mappings())
            except sa_exc.OperationalError as e:
                if "decode" not in str(e.orig).lower() or self.reader.dialect.name != "sqlite":
                    raise
                c.rollback()
                raw: Any = c.connection.dbapi_connection
                raw.text_factory = _lenient_text
                try:
                    return list(c.execute(q).mappings())
                finally:
                    c.rollback()
                    raw.text_factory = str

    def jobs(
        self,
        *,
        queues: Iterable[str] | None = None,
        status: Iterable[str] | None = None,
        kind: str | None = None,
        after: int = 0,
        limit: int = 500,
    ) -> list[JobRow]:
        q = select(jobs).where(jobs.c.seq > after).order_by(jobs.c.seq).limit(limit)
        if queues is not None:
            q = q.where(jobs.c.queue.in_(list(queues)))
        if status is not None:
            q = q.where(jobs.c.status.in_(list(status)))
        if kind is not None:
            q = q.where(jobs.c.kind == kind)
        return [_row(m) for m in self._fetch(q)]

    def events(self, name: str, *, limit: int = 200, run: int | None = None) -> list[EventRow]:
        """The events of the latest run of ``name`` (or of its run ``run``), oldest first (the last
        ``limit``); those of its earlier runs are theirs. The first, ``submitted``, is the run's own
        submission time: not stored twice, so a submission costs one INSERT."""
        if run is None:
            latest = self._fetch(select(jobs.c.seq).where(jobs.c.name == name).order_by(jobs.c.seq.desc()).limit(1))
            if not latest:
                return []
            run = int(latest[0]["seq"])
        q = select(events).where(events.c.run == run).order_by(events.c.id.desc()).limit(limit)
        rows = [EventRow(**_repaired(m, _EVENT_TEXT)[0]) for m in self._fetch(q)]
        got = self._fetch(select(jobs.c.submitted, jobs.c.queue).where(and_(jobs.c.seq == run, jobs.c.name == name)))
        if got and len(rows) < limit:
            job, _ = _repaired(got[0], ("queue",))
            rows.append(EventRow(0, name, run, job["submitted"], "submitted", "Submitted", f"queued in {job['queue']}"))
        return rows[::-1]

    def count_by_queue(self, statuses: Iterable[str]) -> dict[str, dict[str, int]]:
        """Jobs per queue and status (one aggregate query: no row is loaded)."""
        q = (
            select(jobs.c.queue, jobs.c.status, func.count())
            .where(jobs.c.status.in_(list(statuses)))
            .group_by(jobs.c.queue, jobs.c.status)
        )
        out: dict[str, dict[str, int]] = {}
        for m in self._fetch(q):
            queue_name, status, n = m.values()
            out.setdefault(_fixed_text(queue_name), {})[_fixed_text(status)] = int(n)
        return out

    def count_by_status(self, *, queues: Iterable[str] | None = None) -> dict[str, int]:
        q = select(jobs.c.status, func.count().label("count")).group_by(jobs.c.status)
        if queues is not None:
            q = q.where(jobs.c.queue.in_(list(queues)))
        return {_fixed_text(m["status"]): int(m["count"]) for m in self._fetch(q)}

    def check(self) -> list[str]:
        """Integrity problems in the store (empty when consistent): records that do not decode, a name with
        more than one active run, running jobs without a placement, and GPUs held by two running jobs."""
        problems: list[str] = []
        held: dict[tuple[int, int], str] = {}
        active: dict[str, int] = {}
        for r in self.jobs(limit=10**9):
            if r.corrupt is not None:
                problems.append(f"{r.name}: the stored record is corrupt: {r.corrupt}")
                continue
            if r.status in ACTIVE:
                if r.name in active:
                    problems.append(f"{r.name}: two active runs (seq {active[r.name]} and {r.seq})")
                active.setdefault(r.name, r.seq)
            if r.status != RUNNING:
                continue
            if r.placement is None:
                problems.append(f"{r.name}: running without a placement")
                continue
            for a in r.placement.allocs:
                if a.milli < 1000:
                    continue
                for g in a.gpus:
                    other = held.setdefault((a.node, g), r.name)
                    if other != r.name:
                        problems.append(f"GPU {g} of node {a.node} held by both {other} and {r.name}")
        return problems


MAX_GROUP = 512  # writes taken into one group commit at most
GATHER_S = 0.003  # how long a new job waits for others to commit with
_PROBE_KEY = "probe"
_PROBE_VALUE = "p" * 8192  # more than a page: the probe needs pages that a full disk cannot give


@dataclass(slots=True)
class _Write:
    """One queued write: a new job's row (group-committed), or a function run in its own transaction."""

    insert: dict[str, Any] | None = None
    fn: Callable[[Connection], Any] | None = None
    future: Future[Any] = field(default_factory=Future)


def _apply(c: Connection, changes: Sequence[Change]) -> set[str]:
    names = sorted({ch.job for ch in changes})
    # The active run of each name (at most one): a change applies to it, and only to the run it was decided
    # for (``Change.run``; 0: whichever is active), never to a newer run of the same name.
    active = c.execute(
        select(jobs.c.name, jobs.c.seq, jobs.c.status)
        .where(and_(jobs.c.name.in_(names), jobs.c.status.in_(ACTIVE)))
        .with_for_update()
    ).all()
    run_of: dict[str, int] = {name: seq for name, seq, _ in active}
    status: dict[int, str] = {seq: st for _, seq, st in active}
    rejected: set[str] = set()
    groups: dict[str, list[dict[str, Any]]] = {}
    touched: set[str] = set()
    logged: list[dict[str, Any]] = []

    def flush() -> None:
        for kind, params in groups.items():
            c.execute(_UPDATES[kind], params)  # one executemany per kind of change
        groups.clear()
        touched.clear()

    for ch in changes:
        allowed, to = _TRANSITIONS[ch.type]
        seq = run_of.get(ch.job)
        if ch.run and seq != ch.run:
            seq = None  # its run has ended meanwhile (a newer run of the name may be active)
        now_status = status.get(seq) if seq is not None else None
        if seq is None or now_status not in allowed:
            rejected.add(ch.job)
            continue
        if to is not None:
            status[seq] = to
        if ch.job in touched:
            flush()  # a second change to one job in this batch: keep their order
        touched.add(ch.job)
        groups.setdefault(ch.type, []).append(_params(ch, seq, to or now_status or PENDING))
        logged.append(
            {"job": ch.job, "run": seq, "time": ch.time, "type": ch.type, "reason": ch.reason, "message": ch.message}
        )
    flush()
    if logged:
        c.execute(_INSERT_EVENT, logged)
    return rejected


def _params(ch: Change, seq: int, status: str) -> dict[str, Any]:
    p: dict[str, Any] = {"b_seq": seq, "b_status": status, "b_reason": ch.reason[:64], "b_message": ch.message}
    if ch.type == SCHEDULED:
        p["b_time"] = ch.time
        p["b_placement"] = encode_placement(ch.placement) if ch.placement is not None else None
    elif ch.type in (COMPLETED, FAILED):
        p["b_time"] = ch.time
        p["b_exit_code"] = ch.exit_code
    return p


def _update(**values: Any) -> Any:
    return (
        update(jobs)
        .where(jobs.c.seq == bindparam("b_seq"))
        .values(status=bindparam("b_status"), reason=bindparam("b_reason"), message=bindparam("b_message"), **values)
    )


# One UPDATE per kind of change, run with executemany; the placement stays after the end (where it ran).
_ENDED: dict[str, Any] = {"ended": bindparam("b_time"), "exit_code": bindparam("b_exit_code")}
_UPDATES: dict[str, Any] = {
    SCHEDULED: _update(started=bindparam("b_time"), placement=bindparam("b_placement")),
    PREEMPTED: _update(placement=None, restarts=jobs.c.restarts + 1),
    COMPLETED: _update(**_ENDED),
    FAILED: _update(**_ENDED),
    WAITING: _update(),
}


def _latest_run(name: str) -> Any:
    return select(jobs).where(jobs.c.name == name).order_by(jobs.c.seq.desc()).limit(1)


def _migrate(engine: Engine) -> list[str]:
    """Bring an older store to this schema, in one transaction; what it did (nothing for a current store,
    which it only reads). Older stores kept a name unique over every row, and keyed events by name:

    - the unique constraint on ``jobs.name`` goes (PostgreSQL drops it; SQLite cannot drop a constraint,
      so the table is rebuilt: created anew, rows copied with their seq, the old one dropped), and the
      partial unique index over the active runs takes its place;
    - ``events.run`` is added and filled from the job of the same name (unique then: exactly its run)."""
    insp = sa_inspect(engine)
    event_cols = {col["name"] for col in insp.get_columns("events")}
    unique = [u for u in insp.get_unique_constraints("jobs") if list(u["column_names"]) == ["name"]]
    have = {i["name"] for i in insp.get_indexes("jobs")} | {i["name"] for i in insp.get_indexes("events")}
    missing = [ix for t in (jobs, events) for ix in t.indexes if ix.name not in have]
    if "run" in event_cols and not unique and not missing:
        return []
    done: list[str] = []
    with engine.begin() as c:
        if "run" not in event_cols:
            c.exec_driver_sql("ALTER TABLE events ADD COLUMN run INTEGER")
            filled = c.execute(
                update(events)
                .where(events.c.run.is_(None))
                .values(run=select(jobs.c.seq).where(jobs.c.name == events.c.job).scalar_subquery())
            ).rowcount
            done.append(f"events now belong to a job's run (events.run added, {filled} event(s) filled by job name)")
        if unique:
            if engine.dialect.name == "sqlite":
                _rebuild_jobs_sqlite(c)
            else:
                quote = c.dialect.identifier_preparer.quote
                for u in unique:
                    c.exec_driver_sql(f"ALTER TABLE jobs DROP CONSTRAINT {quote(u['name'] or 'jobs_name_key')}")
            done.append("a job's name is now unique among its active runs only (an ended job's name can be reused)")
        for t in (jobs, events):
            for ix in t.indexes:
                ix.create(c, checkfirst=True)
    return done


def _rebuild_jobs_sqlite(c: Connection) -> None:
    """SQLite's way to drop a constraint: a new table of this schema, the rows copied (seq kept), the old
    table dropped (its indexes with it) and the new one renamed; the caller creates the indexes."""
    old_cols = [r[1] for r in c.exec_driver_sql("PRAGMA table_info(jobs)").all()]
    cols = ", ".join(f'"{col.name}"' for col in jobs.columns if col.name in old_cols)
    new = jobs.to_metadata(MetaData(), name="jobs_migrating")
    c.execute(CreateTable(new))
    c.exec_driver_sql(f"INSERT INTO jobs_migrating ({cols}) SELECT {cols} FROM jobs")
    c.exec_driver_sql("DROP TABLE jobs")
    c.exec_driver_sql("ALTER TABLE jobs_migrating RENAME TO jobs")


def encode_placement(p: Placement) -> str:
    return json.dumps(
        {"units": p.units, "allocs": [[a.node, list(a.gpus), a.milli, a.cpu_milli, a.memory_mib] for a in p.allocs]},
        separators=(",", ":"),
    )


def decode_placement(job: str, text: str) -> Placement:
    d = json.loads(text)
    allocs = tuple(
        NodeAlloc(int(n), tuple(int(g) for g in gs), int(m), int(c), int(mem)) for n, gs, m, c, mem in d["allocs"]
    )
    return Placement(job, allocs, int(d["units"]))


_JOB_TEXT = ("name", "queue", "kind", "status", "reason", "message", "doc", "placement")
_EVENT_TEXT = ("job", "type", "reason", "message")


def _lenient_text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _fixed_text(s: str) -> str:
    """A text read leniently, with the bytes that are not UTF-8 shown as U+FFFD."""
    return s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _bad_text(v: object) -> bool:
    if not isinstance(v, str) or v.isascii():
        return False
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _repaired(m: Any, keys: tuple[str, ...]) -> tuple[dict[str, Any], list[str]]:
    """The row as a dict with its texts that are not UTF-8 repaired, and the names of those columns."""
    bad = [k for k in keys if _bad_text(m[k])]
    d = dict(m)
    for k in bad:
        d[k] = _fixed_text(d[k])
    return d, bad


def _row(m: Any) -> JobRow:
    problems: list[str] = []
    if any(_bad_text(m[k]) for k in _JOB_TEXT):
        m, bad = _repaired(m, _JOB_TEXT)
        problems.append(f"{', '.join(bad)} not valid UTF-8")
    doc: dict[str, Any] = {}
    try:
        loaded = json.loads(m["doc"])
        if not isinstance(loaded, dict):
            raise ValueError(f"a JSON {type(loaded).__name__}, not an object")
        doc = loaded
    except (ValueError, TypeError, RecursionError) as e:
        problems.append(f"its spec does not decode ({e})")
    placement: Placement | None = None
    if m["placement"]:
        try:
            placement = decode_placement(m["name"], m["placement"])
        except (ValueError, TypeError, KeyError, IndexError, RecursionError) as e:
            problems.append(f"its placement does not decode ({type(e).__name__}: {e})")
    corrupt = "; ".join(problems) if problems else None
    return JobRow(
        seq=m["seq"],
        name=m["name"],
        queue=m["queue"],
        kind=m["kind"],
        gpus=m["gpus"],
        priority=m["priority"],
        status=m["status"],
        reason=m["reason"],
        message=m["message"] if corrupt is None else f"the stored record is corrupt: {corrupt}",
        doc=doc if corrupt is None else {},
        submitted=m["submitted"],
        started=m["started"],
        ended=m["ended"],
        placement=placement if corrupt is None else None,
        exit_code=m["exit_code"],
        restarts=m["restarts"],
        corrupt=corrupt,
    )


def _sqlite_setup(engine: Engine, synchronous: str, *, immediate: bool) -> None:
    """WAL (readers never block the writer), a busy timeout, and BEGIN IMMEDIATE so a transaction that reads
    then writes takes the write lock up front instead of failing when another writer got there first."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={synchronous}")
        cur.execute("PRAGMA busy_timeout=10000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


# ---------------------------------------------------------------------- the store file, before opening it
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
