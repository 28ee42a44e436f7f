"""Opening an older store: bring its schema to this one, in one transaction (see :func:`migrate_store`)."""

from __future__ import annotations

from sqlalchemy import MetaData, select, update
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.schema import CreateTable

from rackscale.service.store.schema import events, jobs


def migrate_store(engine: Engine) -> list[str]:
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
