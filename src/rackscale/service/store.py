"""Persistent state: every accepted job and every change to it, committed before the service replies.

SQLAlchemy Core over SQLite (WAL, the default, in the data directory) or any URL SQLAlchemy takes
(PostgreSQL: ``postgresql+psycopg://...``). Status changes are conditional updates (``WHERE status IN
...``), so a cancellation and a placement racing for the same job cannot both win: the one committed first
does, and the other learns it from the rows it could not change.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
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
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Connection, Engine

from rackscale.model.placement import NodeAlloc, Placement
from rackscale.service.live import CANCELLED, COMPLETED, FAILED, PREEMPTED, SCHEDULED, WAITING, Change

PENDING, RUNNING = "pending", "running"
ACTIVE = (PENDING, RUNNING)
STATUSES = (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED)

metadata = MetaData()
jobs = Table(
    "jobs",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("name", String(253), nullable=False, unique=True),
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
)
events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job", String(253), nullable=False),
    Column("time", Float, nullable=False),
    Column("type", String(16), nullable=False),
    Column("reason", String(64), nullable=False),
    Column("message", Text, nullable=False),
    Index("ix_events_job", "job", "id"),
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
    """INSERT .. ON CONFLICT (name) DO NOTHING RETURNING name, seq, where the dialect has it."""
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert  # type: ignore[assignment]
    else:
        return None
    return dialect_insert(jobs).on_conflict_do_nothing(index_elements=["name"]).returning(jobs.c.name, jobs.c.seq)


_INSERT_EVENT = insert(events)


class DuplicateJob(ValueError):
    pass


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


@dataclass(frozen=True, slots=True)
class EventRow:
    id: int
    job: str
    time: float
    type: str
    reason: str
    message: str


class Store:
    """Reads run on the caller's thread (WAL: they never wait for a writer). Every write goes through one
    writer thread, so writers never contend for SQLite's lock, and submissions that arrive together are
    committed together (group commit): one transaction, one sync, for a batch of jobs."""

    def __init__(self, url: str, *, synchronous: str = "NORMAL") -> None:
        self.url = url
        # Two engines: writes take the write lock up front (BEGIN IMMEDIATE on SQLite); reads never do.
        self.engine: Engine = create_engine(url)
        self.reader: Engine = create_engine(url)
        if self.engine.dialect.name == "sqlite":
            _sqlite_setup(self.engine, synchronous, immediate=True)
            _sqlite_setup(self.reader, synchronous, immediate=False)
        metadata.create_all(self.engine)
        self._insert_new = _insert_new_statement(self.engine.dialect.name)
        self._writes: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write_loop, name="rackscale-store-writer", daemon=True)
        self._writer.start()

    def close(self) -> None:
        self._writes.put(None)
        self._writer.join(timeout=30)
        self.engine.dispose()
        self.reader.dispose()

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
        DuplicateJob. (The API awaits it, so the event loop never waits on the database.)"""
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
        """Cancel a queued or running job. Returns the row after (unchanged if the job had already ended)."""
        got: JobRow | None = self._call(lambda c: self._cancel(c, name, now))
        return got

    def apply(self, changes: Sequence[Change]) -> set[str]:
        """Commit a cycle's changes in one transaction; return the jobs whose change did not apply (their
        status moved meanwhile, e.g. cancelled between the decision and this commit)."""
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

    def _call(self, fn: Callable[[Connection], Any]) -> Any:
        w = _Write(fn=fn)
        self._writes.put(w)
        return w.future.result()

    @staticmethod
    def _cancel(c: Connection, name: str, now: float) -> JobRow | None:
        c.execute(
            update(jobs)
            .where(and_(jobs.c.name == name, jobs.c.status.in_(ACTIVE)))
            .values(status=CANCELLED, ended=now, reason="Cancelled", message="cancelled by a user")
        )
        got = c.execute(select(jobs).where(jobs.c.name == name)).mappings().first()
        if got is not None and got["status"] == CANCELLED and got["ended"] == now:
            c.execute(
                _INSERT_EVENT,
                {"job": name, "time": now, "type": CANCELLED, "reason": "Cancelled", "message": "cancelled by a user"},
            )
        return _row(got) if got is not None else None

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
            w.future.set_exception(e)
        else:
            w.future.set_result(result)

    def _insert_many(self, writes: list[_Write]) -> None:
        """One transaction for a batch of new jobs. A name already taken (or twice in the batch) makes that
        job's future raise DuplicateJob; the others commit."""
        rows = [w.insert for w in writes if w.insert is not None]
        try:
            with self.engine.begin() as c:
                if self._insert_new is not None:  # INSERT .. ON CONFLICT DO NOTHING RETURNING: one statement
                    got = dict(c.execute(self._insert_new, rows).all())
                else:
                    taken = set(
                        c.execute(select(jobs.c.name).where(jobs.c.name.in_([r["name"] for r in rows]))).scalars()
                    )
                    fresh = [r for r in dict((r["name"], r) for r in reversed(rows)).values() if r["name"] not in taken]
                    got = dict(c.execute(_INSERT_RETURNING, fresh).all()) if fresh else {}
        except BaseException as e:
            for w in writes:
                w.future.set_exception(e)
            return
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

    def get(self, name: str) -> JobRow | None:
        with self.reader.connect() as c:
            got = c.execute(select(jobs).where(jobs.c.name == name)).mappings().first()
        return _row(got) if got is not None else None

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
        with self.reader.connect() as c:
            return [_row(m) for m in c.execute(q).mappings()]

    def events(self, name: str, *, limit: int = 200) -> list[EventRow]:
        """The job's events, oldest first (the last ``limit``). The first, ``submitted``, is the job row's
        own submission time: not stored twice, so a submission costs one INSERT."""
        q = select(events).where(events.c.job == name).order_by(events.c.id.desc()).limit(limit)
        with self.reader.connect() as c:
            rows = [EventRow(**m) for m in c.execute(q).mappings()]
            job = c.execute(select(jobs.c.submitted, jobs.c.queue).where(jobs.c.name == name)).first()
        if job is not None and len(rows) < limit:
            rows.append(EventRow(0, name, job.submitted, "submitted", "Submitted", f"queued in {job.queue}"))
        return rows[::-1]

    def count_by_queue(self, statuses: Iterable[str]) -> dict[str, dict[str, int]]:
        """Jobs per queue and status (one aggregate query: no row is loaded)."""
        q = (
            select(jobs.c.queue, jobs.c.status, func.count())
            .where(jobs.c.status.in_(list(statuses)))
            .group_by(jobs.c.queue, jobs.c.status)
        )
        out: dict[str, dict[str, int]] = {}
        with self.reader.connect() as c:
            for queue_name, status, n in c.execute(q).all():
                out.setdefault(queue_name, {})[status] = n
        return out

    def count_by_status(self, *, queues: Iterable[str] | None = None) -> dict[str, int]:
        q = select(jobs.c.status, func.count()).group_by(jobs.c.status)
        if queues is not None:
            q = q.where(jobs.c.queue.in_(list(queues)))
        with self.reader.connect() as c:
            return {s: n for s, n in c.execute(q).all()}

    def check(self) -> list[str]:
        """Integrity problems in the store (empty when consistent): running jobs without a placement, and
        GPUs held by two running jobs."""
        problems: list[str] = []
        held: dict[tuple[int, int], str] = {}
        for r in self.jobs(status=[RUNNING], limit=10**9):
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


@dataclass(slots=True)
class _Write:
    """One queued write: a new job's row (group-committed), or a function run in its own transaction."""

    insert: dict[str, Any] | None = None
    fn: Callable[[Connection], Any] | None = None
    future: Future[Any] = field(default_factory=Future)


def _apply(c: Connection, changes: Sequence[Change]) -> set[str]:
    names = sorted({ch.job for ch in changes})
    status = dict(c.execute(select(jobs.c.name, jobs.c.status).where(jobs.c.name.in_(names)).with_for_update()).all())
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
        now_status = status.get(ch.job)
        if now_status not in allowed:
            rejected.add(ch.job)
            continue
        if to is not None:
            status[ch.job] = to
        if ch.job in touched:
            flush()  # a second change to one job in this batch: keep their order
        touched.add(ch.job)
        groups.setdefault(ch.type, []).append(_params(ch, to or now_status or PENDING))
        logged.append({"job": ch.job, "time": ch.time, "type": ch.type, "reason": ch.reason, "message": ch.message})
    flush()
    if logged:
        c.execute(_INSERT_EVENT, logged)
    return rejected


def _params(ch: Change, status: str) -> dict[str, Any]:
    p: dict[str, Any] = {"b_name": ch.job, "b_status": status, "b_reason": ch.reason[:64], "b_message": ch.message}
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
        .where(jobs.c.name == bindparam("b_name"))
        .values(status=bindparam("b_status"), reason=bindparam("b_reason"), message=bindparam("b_message"), **values)
    )


# One UPDATE per kind of change, run with executemany; the placement stays after the end (where it ran).
_ENDED: dict[str, Any] = {"ended": bindparam("b_time"), "exit_code": bindparam("b_exit_code")}
_UPDATES = {
    SCHEDULED: _update(started=bindparam("b_time"), placement=bindparam("b_placement")),
    PREEMPTED: _update(placement=None, restarts=jobs.c.restarts + 1),
    COMPLETED: _update(**_ENDED),
    FAILED: _update(**_ENDED),
    WAITING: _update(),
}


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


def _row(m: Any) -> JobRow:
    return JobRow(
        seq=m["seq"],
        name=m["name"],
        queue=m["queue"],
        kind=m["kind"],
        gpus=m["gpus"],
        priority=m["priority"],
        status=m["status"],
        reason=m["reason"],
        message=m["message"],
        doc=json.loads(m["doc"]),
        submitted=m["submitted"],
        started=m["started"],
        ended=m["ended"],
        placement=decode_placement(m["name"], m["placement"]) if m["placement"] else None,
        exit_code=m["exit_code"],
        restarts=m["restarts"],
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
