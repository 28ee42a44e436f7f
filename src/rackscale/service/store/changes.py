"""A scheduling cycle's changes (:class:`~rackscale.service.live.Change`) committed to the store: each one
applies only to the run it was decided for, and only from the phases its transition allows, so a change
that lost a race (the job was cancelled meanwhile) is rejected rather than applied; the caller learns which.

A NOTICE (a drain will stop the job, the autoscaler holds it) is an event of the run and nothing else: the
row's phase, placement, reason and message stay. Those say why the job is where it is (why it waits, where
it was placed, why it ended), which a notice does not change; and a notice that is later called off (an
uncordon, the load read again) would leave a stale message on the row, or need another write to put the
old one back, which is lost by then. So a notice costs one event INSERT, no UPDATE; one for a run that has
ended meanwhile is dropped, and not reported as rejected (the caller would undo the job's other changes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, bindparam, select, text, update
from sqlalchemy.engine import Connection

from rackscale.service.live import COMPLETED, FAILED, NOTICE, PREEMPTED, RESIZED, SCHEDULED, WAITING, Change
from rackscale.service.phase import ACTIVE, JobPhase
from rackscale.service.store.rows import encode_placement
from rackscale.service.store.schema import ACTIVE_SQL, INSERT_EVENT, jobs

# A change (its type) applies only to a run in one of these phases, and moves it to the second (None: it
# stays where it is).
TRANSITIONS: dict[str, tuple[tuple[JobPhase, ...], JobPhase | None]] = {
    SCHEDULED: ((JobPhase.PENDING,), JobPhase.RUNNING),
    PREEMPTED: ((JobPhase.RUNNING,), JobPhase.PENDING),
    RESIZED: ((JobPhase.RUNNING,), None),  # an elastic gang goes on at another size: only its placement changes
    COMPLETED: ((JobPhase.RUNNING,), JobPhase.COMPLETED),
    FAILED: (ACTIVE, JobPhase.FAILED),
    WAITING: ((JobPhase.PENDING,), None),
    NOTICE: (ACTIVE, None),  # an event of the run only (no UPDATE: see the module's docstring)
}


def apply_changes(c: Connection, changes: Sequence[Change]) -> set[str]:
    """Apply ``changes`` in order within the caller's transaction and log their events; the names of the
    jobs whose change did not apply."""
    names = sorted({ch.job for ch in changes})
    # The active run of each name (at most one): a change applies to it, and only to the run it was decided
    # for (``Change.run``; 0: whichever is active), never to a newer run of the same name.
    active = c.execute(active_runs(c.dialect.name, names)).all()
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
        allowed, to = TRANSITIONS[ch.type]
        seq = run_of.get(ch.job)
        if ch.run and seq != ch.run:
            seq = None  # its run has ended meanwhile (a newer run of the name may be active)
        now_status = status.get(seq) if seq is not None else None
        if seq is None or now_status not in allowed:
            if ch.type != NOTICE:  # a notice that lost its race is dropped: there is nothing to undo
                rejected.add(ch.job)
            continue
        if to is not None:
            status[seq] = to
        if ch.type != NOTICE:
            if ch.job in touched:
                flush()  # a second change to one job in this batch: keep their order
            touched.add(ch.job)
            groups.setdefault(ch.type, []).append(_params(ch, seq, to or now_status or JobPhase.PENDING))
        # The reason as the row keeps it: the column holds 64 characters (PostgreSQL refuses a longer one).
        event = {"job": ch.job, "run": seq, "time": ch.time, "type": ch.type, "reason": ch.reason[:64]}
        logged.append({**event, "message": ch.message})
    flush()
    if logged:
        c.execute(INSERT_EVENT, logged)
    return rejected


# SQLite, without statistics, reads ``name IN (...) AND status IN ('pending', 'running')`` through ix_jobs_status
# (EXPLAIN QUERY PLAN: SEARCH jobs USING INDEX ix_jobs_status (status=?)), a walk of every active row: 12 ms
# for 10 names among 65,000 pending jobs, on the thread that commits the submissions too. The unary plus
# makes the status term unusable for an index, so the names are looked up in ix_jobs_name (name, seq): a
# name's few runs each, 0.1 ms for 10 names (tests/service/test_store.py asserts the plan). PostgreSQL plans
# from its statistics; ACTIVE_SQL as literal text there lets it read the partial index of active names.
_ACTIVE_SQLITE = text("+" + ACTIVE_SQL)


def active_runs(dialect: str, names: list[str]) -> Any:
    """SELECT name, seq, status of the active runs of ``names`` (locked FOR UPDATE where the database can)."""
    where = _ACTIVE_SQLITE if dialect == "sqlite" else text(ACTIVE_SQL)
    return select(jobs.c.name, jobs.c.seq, jobs.c.status).where(and_(jobs.c.name.in_(names), where)).with_for_update()


def _params(ch: Change, seq: int, status: str) -> dict[str, Any]:
    # str(): the stored text itself, whatever a driver makes of an enum member.
    p: dict[str, Any] = {"b_seq": seq, "b_status": str(status), "b_reason": ch.reason[:64], "b_message": ch.message}
    if ch.type == SCHEDULED:
        p["b_time"] = ch.time
        p["b_placement"] = encode_placement(ch.placement) if ch.placement is not None else None
    elif ch.type == RESIZED:
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
    RESIZED: _update(placement=bindparam("b_placement")),
    COMPLETED: _update(**_ENDED),
    FAILED: _update(**_ENDED),
    WAITING: _update(),
}
