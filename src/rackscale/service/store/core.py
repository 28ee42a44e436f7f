"""The :class:`Store` itself: opening a store (engines, schema, migration), and the writes a caller makes
(a new job, a cancellation, a cycle's changes, meta values, the probe), each waiting for its commit on the
writer thread (:mod:`~rackscale.service.store.writer`); the reads are :mod:`~rackscale.service.store.reads`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, create_engine, delete, event, insert, make_url, select, update
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.engine import Connection, Engine

from rackscale.service.live import Change
from rackscale.service.phase import ACTIVE, JobPhase
from rackscale.service.store.changes import apply_changes
from rackscale.service.store.faults import StoreUnavailable
from rackscale.service.store.files import store_location
from rackscale.service.store.lease import check_fence
from rackscale.service.store.migrate import migrate_store
from rackscale.service.store.reads import StoreReads
from rackscale.service.store.rows import JobRow, job_row
from rackscale.service.store.schema import INSERT_EVENT, jobs, meta, metadata
from rackscale.service.store.writer import StoreWriter

log = logging.getLogger("rackscale.service")

CONNECT_TIMEOUT_S = 10  # how long a connect to a database server may take (PostgreSQL's connect_timeout)
DEAD_PATH_S = 11  # about how long a statement waits on a server that no longer answers at the TCP level
# libpq's connection parameters (https://www.postgresql.org/docs/current/libpq-connect.html)
_POSTGRES_DEFAULTS: dict[str, int] = {
    "connect_timeout": CONNECT_TIMEOUT_S,
    "keepalives": 1,
    "keepalives_idle": 5,  # seconds of silence before the first probe ...
    "keepalives_interval": 2,  # ... then one every 2 s; after 3 unanswered the connection is dead: 5 + 3 x 2
    "keepalives_count": 3,
    "tcp_user_timeout": DEAD_PATH_S * 1000,  # ms: sent data unacknowledged this long ends the connection
}
_PROBE_KEY = "probe"
_PROBE_VALUE = "p" * 8192  # more than a page: the probe needs pages that a full disk cannot give


class Store(StoreWriter, StoreReads):
    """Reads run on the caller's thread (WAL: they never wait for a writer). Every write goes through one
    writer thread, so writers never contend for SQLite's lock, and submissions that arrive together are
    committed together (group commit): one transaction, one sync, for a batch of jobs.

    ``failing`` says why the last write failed for a fault of the store (None once a write commits again);
    ``created`` whether this Store made the tables (a new store); ``migrated`` what opening it changed in an
    older store's schema."""

    def __init__(self, url: str, *, synchronous: str = "NORMAL", idle_in_transaction_s: float | None = None) -> None:
        self.url = url
        self.location = store_location(url)
        sqlite = url.startswith("sqlite")
        # Two engines: writes take the write lock up front (BEGIN IMMEDIATE on SQLite); reads never do.
        # A server's pooled connection may have died while idle (a restart of PostgreSQL): test it first.
        # With replicas: PostgreSQL ends a writing session that sits in a transaction this long, and its locks
        # with it. A leader frozen mid-commit (SIGSTOP, a paused VM) holds the share lock its fence took on
        # the lease row (store/lease.py); every standby's take of the lease would wait on it for as long as
        # the leader stays frozen. Our transactions run statement after statement: none idles for seconds.
        # A server that accepts the connection but never answers (stopped, or a half-open path) made a connect
        # wait for ever: at start-up `serve` hung without a word. libpq's connect_timeout bounds it.
        # A statement on an open connection to a server that is gone (its host down, a network partition)
        # waited for TCP to give up: hours when the request had been acknowledged (nothing to retransmit).
        # Keepalives probe an idle wait, TCP_USER_TIMEOUT bounds data left unacknowledged: a dead path
        # fails the statement in about DEAD_PATH_S. A busy or slow server's kernel still acknowledges, so
        # long statements are never cut. (The URL's own settings win.)
        server: dict[str, Any] = {}
        if url.startswith("postgresql"):
            given = make_url(url).query
            server = {key: value for key, value in _POSTGRES_DEFAULTS.items() if key not in given}
        bound = dict(server)
        if idle_in_transaction_s is not None and url.startswith("postgresql"):
            bound["options"] = f"-c idle_in_transaction_session_timeout={max(1, round(idle_in_transaction_s * 1000))}"
        self.engine = create_engine(url, pool_pre_ping=not sqlite, connect_args=bound)
        self.reader = create_engine(url, pool_pre_ping=not sqlite, connect_args=server)
        if self.engine.dialect.name == "sqlite":
            _sqlite_setup(self.engine, synchronous, immediate=True)
            _sqlite_setup(self.reader, synchronous, immediate=False)
        self.created = not sa_inspect(self.engine).has_table("jobs")
        metadata.create_all(self.engine)
        self.migrated = [] if self.created else migrate_store(self.engine)  # what was changed in an older store
        for step in self.migrated:
            log.warning("store %s migrated: %s", self.location, step)
        if self.created:  # marks the store as rackscale's (and when it began)
            stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            with self.engine.begin() as c:
                if c.execute(select(meta.c.key).where(meta.c.key == "created")).first() is None:
                    c.execute(insert(meta).values(key="created", value=stamp))
        self._start_writer()

    def close(self) -> None:
        self._stop_writer()
        self.engine.dispose()
        self.reader.dispose()

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
            "status": JobPhase.PENDING.value,  # the stored text (and what the returned row says)
            "reason": "Queued",
            "message": "waiting for the next scheduling cycle",
            "doc": json.dumps(doc, separators=(",", ":")),
            "submitted": submitted,
            "restarts": 0,
        }
        future: Future[JobRow] = self._queue_insert(row)
        return future

    def cancel(self, name: str, now: float, *, queues: Iterable[str] | None = None) -> JobRow | None:
        """Cancel the active run of ``name``. Returns its row after, or the latest run unchanged if none is
        active (None: no such name). ``queues``: only runs of these queues are cancelled or returned (a
        tenant's: the name may have been submitted again by another tenant since the caller looked).
        Raises StoreUnavailable when the store cannot write (then nothing changed)."""
        mine = None if queues is None else list(queues)
        got: JobRow | None = self._call(lambda c: self._cancel(c, name, now, mine))
        return got

    def apply(self, changes: Sequence[Change], *, generation: int | None = None) -> set[str]:
        """Commit a cycle's changes in one transaction; return the jobs whose change did not apply (their
        status moved meanwhile, e.g. cancelled between the decision and this commit). Raises StoreUnavailable
        when the store cannot write (then nothing of it was committed). ``generation``: the leader lease's
        generation the writer leads at (a highly available service); the transaction is refused with
        ``Fenced`` unless the lease is still there (store/lease.py)."""
        if not changes:
            return set()

        def run(c: Connection) -> set[str]:
            if generation is not None:
                check_fence(c, generation)
            return apply_changes(c, changes)

        rejected: set[str] = self._call(run)
        return rejected

    def set_meta(self, key: str, value: str) -> None:
        def run(c: Connection) -> None:
            if c.execute(select(meta.c.key).where(meta.c.key == key)).first() is None:
                c.execute(insert(meta).values(key=key, value=value))
            else:
                c.execute(update(meta).where(meta.c.key == key).values(value=value))

        self._call(run)

    def delete_meta(self, key: str) -> None:
        """Remove a meta value (none there: nothing to do). Raises StoreUnavailable as the other writes do."""

        def run(c: Connection) -> None:
            c.execute(delete(meta).where(meta.c.key == key))

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

    @staticmethod
    def _cancel(c: Connection, name: str, now: float, queues: list[str] | None) -> JobRow | None:
        mine = jobs.c.name == name if queues is None else and_(jobs.c.name == name, jobs.c.queue.in_(queues))
        active = c.execute(
            select(jobs.c.seq).where(and_(mine, jobs.c.status.in_(ACTIVE))).with_for_update()
        ).scalar_one_or_none()
        if active is None:
            got = c.execute(select(jobs).where(mine).order_by(jobs.c.seq.desc()).limit(1)).mappings().first()
            return job_row(got) if got is not None else None
        message = "cancelled by a user"
        cancelled = JobPhase.CANCELLED.value  # the phase, and the type of the event that records it
        c.execute(
            update(jobs)
            .where(jobs.c.seq == active)
            .values(status=cancelled, ended=now, reason="Cancelled", message=message)
        )
        c.execute(
            INSERT_EVENT,
            {"job": name, "run": active, "time": now, "type": cancelled, "reason": "Cancelled", "message": message},
        )
        return job_row(c.execute(select(jobs).where(jobs.c.seq == active)).mappings().one())


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
