"""A store as rackscale wrote it before names could be reused (issue 10): a job's name unique over every row,
and events keyed by the job's name only. Opening it with today's Store migrates it."""

from __future__ import annotations

import json

from sqlalchemy import Column, Float, Index, Integer, MetaData, String, Table, Text, create_engine, insert

legacy = MetaData()
jobs = Table(
    "jobs",
    legacy,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("name", String(253), nullable=False, unique=True),
    Column("queue", String(253), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("gpus", Float, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("reason", String(64), nullable=False, default=""),
    Column("message", Text, nullable=False, default=""),
    Column("doc", Text, nullable=False),
    Column("submitted", Float, nullable=False),
    Column("started", Float),
    Column("ended", Float),
    Column("placement", Text),
    Column("exit_code", Integer),
    Column("restarts", Integer, nullable=False, default=0),
    Index("ix_jobs_status", "status"),
    Index("ix_jobs_queue", "queue"),
)
events = Table(
    "events",
    legacy,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job", String(253), nullable=False),
    Column("time", Float, nullable=False),
    Column("type", String(16), nullable=False),
    Column("reason", String(64), nullable=False),
    Column("message", Text, nullable=False),
    Index("ix_events_job", "job", "id"),
)
meta = Table("meta", legacy, Column("key", String(64), primary_key=True), Column("value", Text, nullable=False))

PLACEMENT = json.dumps({"units": 1, "allocs": [[0, [0, 1, 2, 3], 1000, 0, 0]]})


def write_legacy_store(url: str) -> None:
    """Three jobs: ``old`` cancelled (submitted, scheduled, cancelled), ``busy`` running (on node 0),
    ``queued`` pending; each with its events under its name."""
    engine = create_engine(url)
    legacy.create_all(engine)
    base = {"queue": "q", "kind": "training", "gpus": 4.0, "priority": 0, "restarts": 0, "started": None,
            "ended": None, "placement": None, "exit_code": None}  # fmt: skip

    def doc(name: str) -> str:
        return json.dumps({"name": name, "kind": "training", "gpus": 4, "queue": "q"})

    with engine.begin() as c:
        c.execute(insert(meta).values(key="created", value="2025-01-01T00:00:00Z"))
        c.execute(
            insert(jobs),
            [
                {**base, "name": "old", "status": "cancelled", "reason": "Cancelled", "message": "cancelled by a user",
                 "doc": doc("old"), "submitted": 1.0, "started": 2.0, "ended": 3.0, "placement": PLACEMENT},
                {**base, "name": "busy", "status": "running", "reason": "Scheduled", "message": "placed",
                 "doc": doc("busy"), "submitted": 4.0, "started": 5.0, "placement": PLACEMENT},
                {**base, "name": "queued", "status": "pending", "reason": "Queued", "message": "waiting",
                 "doc": doc("queued"), "submitted": 6.0},
            ],
        )  # fmt: skip
        c.execute(
            insert(events),
            [
                {"job": "old", "time": 2.0, "type": "scheduled", "reason": "Scheduled", "message": "placed"},
                {"job": "old", "time": 3.0, "type": "cancelled", "reason": "Cancelled", "message": "by a user"},
                {"job": "busy", "time": 5.0, "type": "scheduled", "reason": "Scheduled", "message": "placed"},
            ],
        )
    engine.dispose()
