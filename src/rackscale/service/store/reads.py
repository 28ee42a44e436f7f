"""The store's reads. They run on the caller's thread, on connections of their own (``reader``: with WAL
they never wait for the writer), and read a damaged record leniently (see :meth:`StoreReads._fetch`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypedDict, Unpack

from sqlalchemy import and_, func, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine

from rackscale.service.phase import ACTIVE, JobPhase
from rackscale.service.store.rows import (
    EventRow,
    JobRow,
    as_text,
    event_row,
    job_row,
    lenient_text,
    repaired,
)
from rackscale.service.store.schema import events, jobs, latest_run, meta


class StoreReads:
    """The read half of :class:`~rackscale.service.store.Store`."""

    reader: Engine

    def get_meta(self, key: str) -> str | None:
        with self.reader.connect() as c:
            return c.execute(select(meta.c.value).where(meta.c.key == key)).scalar_one_or_none()

    def latest_time(self) -> float | None:
        """The latest service-clock time the store saw (the clock resumes from it after a restart). Of the
        times that are numbers: SQLite keeps a text in a FLOAT column, and sorts it above every number."""
        sqlite = self.reader.dialect.name == "sqlite"
        with self.reader.connect() as c:
            times = [
                c.execute(
                    select(func.max(t)).where(func.typeof(t).in_(("integer", "real")))
                    if sqlite
                    else select(func.max(t))
                ).scalar_one_or_none()
                for t in (events.c.time, jobs.c.submitted)
            ]
        known = [float(t) for t in times if isinstance(t, int | float)]
        return max(known) if known else None

    def get(self, name: str, *, run: int | None = None) -> JobRow | None:
        """The latest run of ``name`` (the active one, if any: it is always the latest), or its run ``run``."""
        q = latest_run(name) if run is None else select(jobs).where(and_(jobs.c.name == name, jobs.c.seq == run))
        got = self._fetch(q)
        return job_row(got[0]) if got else None

    def earlier_runs(
        self, name: str, before: int, *, limit: int = 5, queues: Iterable[str] | None = None
    ) -> tuple[int, list[JobRow]]:
        """How many runs of ``name`` came before run ``before``, and the last ``limit`` of them, latest first;
        only those of ``queues`` when given (a name ended is free for anyone: a tenant counts only its own)."""
        where = and_(jobs.c.name == name, jobs.c.seq < before)
        if queues is not None:
            where = and_(where, jobs.c.queue.in_(list(queues)))
        counted = self._fetch(select(func.count().label("n")).select_from(jobs).where(where))
        n = int(counted[0]["n"]) if counted else 0
        if n == 0:
            return 0, []
        return n, [job_row(m) for m in self._fetch(select(jobs).where(where).order_by(jobs.c.seq.desc()).limit(limit))]

    def _fetch(self, q: Any) -> list[Any]:
        """The rows of ``q`` (as mappings); see :meth:`_fetch_marked`."""
        return self._fetch_marked(q)[0]

    def _fetch_marked(self, q: Any, *, tuples: bool = False) -> tuple[list[Any], bool]:
        """The rows of ``q`` (as mappings, or as tuples in the query's column order), and whether every text
        was decoded strictly. SQLite keeps whatever bytes it is given as text; one value that is not UTF-8
        would fail the whole query: then the query runs again, decoding leniently (the rows' readers mark
        such a row corrupt). A strict decode (and PostgreSQL, which stores no invalid text) leaves the
        readers nothing to repair."""
        with self.reader.connect() as c:
            try:
                return (list(c.execute(q).all()) if tuples else list(c.execute(q).mappings())), True
            except sa_exc.OperationalError as e:
                if "decode" not in str(e.orig).lower() or self.reader.dialect.name != "sqlite":
                    raise
                c.rollback()
                raw: Any = c.connection.dbapi_connection
                raw.text_factory = lenient_text
                try:
                    return (list(c.execute(q).all()) if tuples else list(c.execute(q).mappings())), False
                finally:
                    c.rollback()
                    raw.text_factory = str

    def jobs(self, **query: Unpack[JobQuery]) -> list[JobRow]:
        got, strict = self._fetch_marked(_jobs_query(**query))
        return [job_row(m, decoded=strict) for m in got]

    def job_tuples(self, **query: Unpack[JobQuery]) -> tuple[list[Sequence[Any]], bool]:
        """:meth:`jobs`' rows as they are stored, each a tuple in ``JOB_COLUMNS`` order, and whether every text
        was decoded strictly (``job_row(dict(zip(JOB_COLUMNS, t)), decoded=strict)`` is :meth:`jobs`' row).
        For a list page, which turns a sound row into its JSON without a ``JobRow`` (service/job_list.py)."""
        return self._fetch_marked(_jobs_query(**query), tuples=True)

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
        rows = [event_row(m) for m in self._fetch(q)]
        got = self._fetch(select(jobs.c.submitted, jobs.c.queue).where(and_(jobs.c.seq == run, jobs.c.name == name)))
        if got and len(rows) < limit:
            job, _ = repaired(got[0], ("queue",))
            at = job["submitted"] if type(job["submitted"]) in (int, float) else 0.0  # (see rows.COLUMN_TYPES)
            rows.append(EventRow(0, name, run, at, "submitted", "Submitted", f"queued in {as_text(job['queue'])}"))
        return rows[::-1]

    def cancels_since(self, after_id: int, *, limit: int = 10_000) -> list[tuple[int, str, int | None]]:
        """The cancellations logged after event ``after_id``, oldest first: (event id, job, run). A leader
        picks up this way the cancels another replica's API committed (service/pickup.py)."""
        q = (
            select(events.c.id, events.c.job, events.c.run)
            .where(and_(events.c.id > after_id, events.c.type == JobPhase.CANCELLED.value))
            .order_by(events.c.id)
            .limit(limit)
        )
        # (Any value in any column: see rows.COLUMN_TYPES. A cancel's run that is not a number names none.)
        return [(int(m["id"]), as_text(m["job"]), m["run"] if type(m["run"]) is int else None) for m in self._fetch(q)]

    def last_event_id(self) -> int:
        with self.reader.connect() as c:
            return int(c.execute(select(func.max(events.c.id))).scalar_one_or_none() or 0)

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
            out.setdefault(as_text(queue_name), {})[as_text(status)] = int(n)
        return out

    def count_by_status(self, *, queues: Iterable[str] | None = None) -> dict[str, int]:
        q = select(jobs.c.status, func.count().label("count")).group_by(jobs.c.status)
        if queues is not None:
            q = q.where(jobs.c.queue.in_(list(queues)))
        return {as_text(m["status"]): int(m["count"]) for m in self._fetch(q)}

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
            if r.status != JobPhase.RUNNING:
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


class JobQuery(TypedDict, total=False):
    """Which stored jobs :meth:`StoreReads.jobs` reads: in these queues, of these statuses, of this kind
    (None: any), after run ``after`` (a keyset cursor: oldest first), at most ``limit`` (default 500)."""

    queues: Iterable[str] | None
    status: Iterable[str] | None
    kind: str | None
    after: int
    limit: int


def _jobs_query(
    *,
    queues: Iterable[str] | None = None,
    status: Iterable[str] | None = None,
    kind: str | None = None,
    after: int = 0,
    limit: int = 500,
) -> Any:
    q = select(jobs).where(jobs.c.seq > after).order_by(jobs.c.seq).limit(limit)
    if queues is not None:
        q = q.where(jobs.c.queue.in_(list(queues)))
    if status is not None:
        q = q.where(jobs.c.status.in_(list(status)))
    if kind is not None:
        q = q.where(jobs.c.kind == kind)
    return q
