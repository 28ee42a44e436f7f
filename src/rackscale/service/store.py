"""Persistent state: every accepted job and every change to it, committed before the service replies.

SQLAlchemy Core over SQLite (WAL, the default, in the data directory) or any URL SQLAlchemy takes
(PostgreSQL: ``postgresql+psycopg://...``). Status changes are conditional updates (``WHERE status IN
...``), so a cancellation and a placement racing for the same job cannot both win: the one committed first
does, and the other learns it from the rows it could not change.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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
    create_engine,
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

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
_INSERT_JOB = insert(jobs)
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
    def __init__(self, url: str, *, synchronous: str = "NORMAL") -> None:
        self.url = url
        # Two engines: writes take the write lock up front (BEGIN IMMEDIATE on SQLite); reads never do.
        self.engine: Engine = create_engine(url)
        self.reader: Engine = create_engine(url)
        if self.engine.dialect.name == "sqlite":
            _sqlite_setup(self.engine, synchronous, immediate=True)
            _sqlite_setup(self.reader, synchronous, immediate=False)
        metadata.create_all(self.engine)

    def close(self) -> None:
        self.engine.dispose()
        self.reader.dispose()

    # ------------------------------------------------------------------ writes
    def insert_job(
        self, *, name: str, queue: str, kind: str, gpus: float, priority: int, doc: dict[str, Any], submitted: float
    ) -> JobRow:
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
        try:
            with self.engine.begin() as c:
                seq = c.execute(insert(jobs).values(**row)).inserted_primary_key[0]  # type: ignore[index]
                c.execute(
                    insert(events).values(
                        job=name, time=submitted, type="submitted", reason="Submitted", message=f"queued in {queue}"
                    )
                )
        except IntegrityError as e:
            raise DuplicateJob(name) from e
        return _row({**row, "seq": seq, "started": None, "ended": None, "placement": None, "exit_code": None})

    def cancel(self, name: str, now: float) -> JobRow | None:
        """Cancel a queued or running job. Returns the row after (unchanged if the job had already ended)."""
        with self.engine.begin() as c:
            c.execute(
                update(jobs)
                .where(and_(jobs.c.name == name, jobs.c.status.in_(ACTIVE)))
                .values(status=CANCELLED, ended=now, reason="Cancelled", message="cancelled by a user")
            )
            got = c.execute(select(jobs).where(jobs.c.name == name)).mappings().first()
            if got is not None and got["status"] == CANCELLED and got["ended"] == now:
                c.execute(
                    insert(events).values(
                        job=name, time=now, type=CANCELLED, reason="Cancelled", message="cancelled by a user"
                    )
                )
        return _row(got) if got is not None else None

    def apply(self, changes: Sequence[Change]) -> set[str]:
        """Commit a cycle's changes in one transaction; return the jobs whose change did not apply (their
        status moved meanwhile, e.g. cancelled between the decision and this commit)."""
        if not changes:
            return set()
        names = sorted({ch.job for ch in changes})
        rejected: set[str] = set()
        with self.engine.begin() as c:
            status = dict(
                c.execute(select(jobs.c.name, jobs.c.status).where(jobs.c.name.in_(names)).with_for_update()).all()
            )
            updates: list[dict[str, Any]] = []
            logged: list[dict[str, Any]] = []
            for ch in changes:
                allowed, to = _TRANSITIONS[ch.type]
                now_status = status.get(ch.job)
                if now_status not in allowed:
                    rejected.add(ch.job)
                    continue
                if to is not None:
                    status[ch.job] = to
                updates.append(_values(ch, to or now_status or PENDING))
                logged.append(
                    {"job": ch.job, "time": ch.time, "type": ch.type, "reason": ch.reason, "message": ch.message}
                )
            for upd in updates:
                name = upd.pop("b_name")
                c.execute(update(jobs).where(jobs.c.name == name).values(**upd))
            if logged:
                c.execute(_INSERT_EVENT, logged)
        return rejected

    def set_meta(self, key: str, value: str) -> None:
        with self.engine.begin() as c:
            if c.execute(select(meta.c.key).where(meta.c.key == key)).first() is None:
                c.execute(insert(meta).values(key=key, value=value))
            else:
                c.execute(update(meta).where(meta.c.key == key).values(value=value))

    # ------------------------------------------------------------------ reads
    def get_meta(self, key: str) -> str | None:
        with self.reader.connect() as c:
            return c.execute(select(meta.c.value).where(meta.c.key == key)).scalar_one_or_none()

    def latest_time(self) -> float | None:
        """The latest service-clock time the store saw (the clock resumes from it after a restart)."""
        with self.reader.connect() as c:
            t: float | None = c.execute(select(func.max(events.c.time))).scalar_one_or_none()
        return t

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
        q = select(events).where(events.c.job == name).order_by(events.c.id.desc()).limit(limit)
        with self.reader.connect() as c:
            rows = [EventRow(**m) for m in c.execute(q).mappings()]
        return rows[::-1]

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


def _values(ch: Change, status: str) -> dict[str, Any]:
    v: dict[str, Any] = {"b_name": ch.job, "status": status, "reason": ch.reason[:64], "message": ch.message}
    if ch.type == SCHEDULED:
        v["started"] = ch.time
        v["placement"] = encode_placement(ch.placement) if ch.placement is not None else None
    elif ch.type == PREEMPTED:
        v["placement"] = None
        v["restarts"] = jobs.c.restarts + 1
    elif ch.type in (COMPLETED, FAILED):
        v["ended"] = ch.time  # the placement stays: where it ran
        v["exit_code"] = ch.exit_code
    return v


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
