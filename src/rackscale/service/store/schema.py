"""The store's schema: the ``jobs``, ``events`` and ``meta`` tables, their indexes, and the INSERT
statements built once from them (SQLAlchemy caches the compiled form of a statement object, not of one
rebuilt per call)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, DateTime, Float, Index, Integer, MetaData, String, Table, Text, insert, select, text

from rackscale.service.phase import ACTIVE

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
    Column("status", String(16), nullable=False),  # a JobPhase value
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
# is the index's own (SQLite and PostgreSQL prove it from the text). ``.value``: the repr of a member
# would be the enum's, not the stored text.
ACTIVE_SQL = f"status IN ({', '.join(repr(s.value) for s in ACTIVE)})"
Index(
    "ux_jobs_active_name",
    jobs.c.name,
    unique=True,
    sqlite_where=text(ACTIVE_SQL),
    postgresql_where=text(ACTIVE_SQL),
)
# The jobs table's columns in order: the order of a row read as a tuple (``Store.job_tuples``).
JOB_COLUMNS: tuple[str, ...] = tuple(c.name for c in jobs.columns)

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
# The leader lease of a highly available service (store/lease.py): one row per election, on PostgreSQL only.
leader_lease = Table(
    "leader_lease",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("holder", String(253), nullable=False),  # the replica id ('' once released)
    Column("generation", Integer, nullable=False),  # + 1 at every takeover: the fence of every leader write
    Column("renewed_at", DateTime(timezone=True), nullable=False),  # the database's clock
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("service_time", Float),  # the leader's service clock at that renewal
)


INSERT_RETURNING = insert(jobs).returning(jobs.c.name, jobs.c.seq)
INSERT_EVENT = insert(events)


def insert_new_statement(dialect: str) -> Any:
    """INSERT .. ON CONFLICT (name) WHERE <active> DO NOTHING RETURNING name, seq, where the dialect has it:
    a name taken by an active run is skipped; an ended run's name is free. None for another dialect."""
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert  # type: ignore[assignment]
    else:
        return None
    return (
        dialect_insert(jobs)
        .on_conflict_do_nothing(index_elements=["name"], index_where=text(ACTIVE_SQL))
        .returning(jobs.c.name, jobs.c.seq)
    )


def latest_run(name: str) -> Any:
    """SELECT the latest run of ``name`` (the active one, if any: it is always the latest)."""
    return select(jobs).where(jobs.c.name == name).order_by(jobs.c.seq.desc()).limit(1)
