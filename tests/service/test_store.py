"""The store: conditional status changes (a cancel and a placement racing for one job: the first commit
wins), the event log, and the integrity check."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import exc as sa_exc
from tests.service.legacy_store import write_legacy_store

from rackscale.model.placement import NodeAlloc, Placement
from rackscale.service.live import COMPLETED, FAILED, PREEMPTED, SCHEDULED, WAITING, Change
from rackscale.service.store import DuplicateJob, Store, sqlite_file_problem, unavailable


def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'db.sqlite'}")


def add(s: Store, name: str, t: float = 0.0) -> None:
    s.insert_job(name=name, queue="q", kind="training", gpus=4, priority=0, doc={"name": name}, submitted=t)


def place(name: str, node: int = 0) -> Placement:
    return Placement(name, (NodeAlloc(node, (0, 1, 2, 3)),), 1)


@pytest.mark.parametrize(
    ("history", "change", "applies", "status"),
    [
        pytest.param([], SCHEDULED, True, "running", id="pending->running"),
        pytest.param([SCHEDULED], SCHEDULED, False, "running", id="scheduled-twice"),
        pytest.param([SCHEDULED], PREEMPTED, True, "pending", id="running->pending"),
        pytest.param([], PREEMPTED, False, "pending", id="preempt-a-queued-job"),
        pytest.param([SCHEDULED], COMPLETED, True, "completed", id="running->completed"),
        pytest.param([], COMPLETED, False, "pending", id="complete-a-queued-job"),
        pytest.param([], FAILED, True, "failed", id="pending->failed"),
        pytest.param([SCHEDULED, COMPLETED], FAILED, False, "completed", id="fail-after-the-end"),
        pytest.param([], WAITING, True, "pending", id="waiting-keeps-pending"),
        pytest.param(["cancel"], SCHEDULED, False, "cancelled", id="cancelled-first-wins"),
    ],
)
def test_transitions(tmp_path: Path, history: list[str], change: str, applies: bool, status: str) -> None:
    s = store(tmp_path)
    add(s, "j")
    for i, h in enumerate(history):
        if h == "cancel":
            s.cancel("j", float(i + 1))
        else:
            s.apply([Change("j", h, float(i + 1), h, h, place("j") if h == SCHEDULED else None)])
    rejected = s.apply([Change("j", change, 10.0, "R", "m", place("j") if change == SCHEDULED else None)])
    assert (rejected == set()) is applies
    row = s.get("j")
    assert row is not None and row.status == status
    if applies:
        assert s.events("j")[-1].type == change


def test_preemption_counts_a_restart_and_drops_the_placement(tmp_path: Path) -> None:
    s = store(tmp_path)
    add(s, "j")
    s.apply([Change("j", SCHEDULED, 1.0, "", "", place("j"))])
    assert (row := s.get("j")) is not None and row.placement == place("j")
    s.apply([Change("j", PREEMPTED, 2.0, "Preempted", "by x")])
    row = s.get("j")
    assert row is not None and row.restarts == 1 and row.placement is None and row.status == "pending"


def test_duplicates_are_refused_and_nothing_is_half_written(tmp_path: Path) -> None:
    s = store(tmp_path)
    add(s, "j")
    with pytest.raises(DuplicateJob):
        add(s, "j", 5.0)
    assert [e.type for e in s.events("j")] == ["submitted"]
    assert s.count_by_status() == {"pending": 1}


def test_check_finds_a_gpu_held_twice(tmp_path: Path) -> None:
    s = store(tmp_path)
    add(s, "a")
    add(s, "b")
    s.apply([Change("a", SCHEDULED, 1.0, "", "", place("a")), Change("b", SCHEDULED, 1.0, "", "", place("b", 1))])
    assert s.check() == []
    c = store(tmp_path)  # a second handle on the same file sees the same rows
    assert {r.name for r in c.jobs(status=["running"])} == {"a", "b"}
    add(s, "c")
    s.apply([Change("c", SCHEDULED, 2.0, "", "", place("c", 1))])
    assert any("held by both" in p for p in s.check())


def test_paging_and_filters(tmp_path: Path) -> None:
    s = store(tmp_path)
    for i in range(7):
        add(s, f"j{i}")
    s.cancel("j3", 1.0)
    first = s.jobs(limit=3)
    assert [r.name for r in first] == ["j0", "j1", "j2"]
    assert [r.name for r in s.jobs(after=first[-1].seq, limit=3)] == ["j3", "j4", "j5"]
    assert [r.name for r in s.jobs(status=["cancelled"])] == ["j3"]
    assert s.latest_time() == 1.0
    assert s.count_by_queue(["pending", "cancelled"]) == {"q": {"pending": 6, "cancelled": 1}}


def _psycopg(name: str, text: str) -> BaseException:
    import psycopg.errors

    err: BaseException = getattr(psycopg.errors, name)(text)
    return err


@pytest.mark.parametrize(
    ("make", "reason", "fix"),
    [
        pytest.param(
            lambda: sqlite3.OperationalError("database or disk is full"), "disk is full", "free space", id="full"
        ),
        pytest.param(
            lambda: sqlite3.OperationalError("attempt to write a readonly database"), "readonly", "writable", id="ro"
        ),
        pytest.param(lambda: sqlite3.OperationalError("disk I/O error"), "disk I/O", "check the disk", id="io"),
        pytest.param(
            lambda: sqlite3.OperationalError("unable to open database file"), "unable", "still exists", id="cantopen"
        ),
        pytest.param(lambda: sqlite3.OperationalError("database is locked"), "locked", "write lock", id="locked"),
        pytest.param(
            lambda: sqlite3.DatabaseError("database disk image is malformed"), "malformed", "backup", id="corrupt"
        ),
        pytest.param(lambda: _psycopg("DiskFull", "could not extend file"), "extend", "free space", id="pg-full"),
        pytest.param(
            lambda: _psycopg("ReadOnlySqlTransaction", "cannot execute INSERT in a read-only transaction"),
            "read-only",
            "primary",
            id="pg-read-only",
        ),
        pytest.param(
            lambda: _psycopg("AdminShutdown", "terminating connection due to administrator command"),
            "administrator",
            "server runs",
            id="pg-shutdown",
        ),
        pytest.param(lambda: OSError(28, "No space left on device"), "No space", "free space", id="oserror"),
    ],
)
def test_store_faults_are_typed_with_their_cause_and_fix(make: object, reason: str, fix: str) -> None:
    orig = make()  # type: ignore[operator]
    wrapped = orig if isinstance(orig, OSError) else sa_exc.OperationalError("INSERT ...", {}, orig)
    if isinstance(orig, sqlite3.DatabaseError) and not isinstance(orig, sqlite3.OperationalError):
        wrapped = sa_exc.DatabaseError("INSERT ...", {}, orig)
    if type(orig).__name__ == "ReadOnlySqlTransaction":
        wrapped = sa_exc.InternalError("INSERT ...", {}, orig)
    got = unavailable(wrapped)
    assert got is not None and reason in got.reason and fix in got.fix, (got, reason, fix)
    assert str(got).startswith(f"the store cannot write: {got.reason} (fix: ")
    if "backup" not in fix:
        assert got.fix.endswith("the service resumes by itself")


def test_what_the_row_did_wrong_is_not_a_store_fault() -> None:
    for e in (
        sa_exc.IntegrityError("INSERT", {}, sqlite3.IntegrityError("NOT NULL constraint failed: jobs.queue")),
        sa_exc.DataError("INSERT", {}, Exception("value too long for type character varying(253)")),
        ValueError("a bug"),
        KeyError("x"),
    ):
        assert unavailable(e) is None, e


def test_a_sound_store_passes_the_start_checks_even_copied_mid_write(tmp_path: Path) -> None:
    """A store copied while open (as a kill -9 leaves it: the WAL not checkpointed) is not called broken."""
    s = store(tmp_path)
    for i in range(200):
        add(s, f"j{i}")
    assert (tmp_path / "db.sqlite-wal").stat().st_size > 0
    copy = tmp_path / "copy"
    copy.mkdir()
    for suffix in ("", "-wal"):
        shutil.copy(tmp_path / f"db.sqlite{suffix}", copy / f"db.sqlite{suffix}")
    s.close()
    assert sqlite_file_problem(copy / "db.sqlite") is None
    assert sqlite_file_problem(tmp_path / "db.sqlite") is None
    assert sqlite_file_problem(tmp_path / "absent.sqlite") is None
    assert len(Store(f"sqlite:///{copy / 'db.sqlite'}").jobs()) == 200


def test_check_reports_records_that_do_not_decode(tmp_path: Path) -> None:
    s = store(tmp_path)
    add(s, "a")
    add(s, "b")
    con = sqlite3.connect(tmp_path / "db.sqlite")
    con.execute("UPDATE jobs SET doc = '[1, 2]' WHERE name = 'a'")
    con.commit()
    con.close()
    a = s.get("a")
    assert a is not None and a.corrupt is not None and a.doc == {} and a.message.startswith("the stored record is")
    assert s.check() == [f"a: the stored record is corrupt: {a.corrupt}"]
    assert [r.name for r in s.jobs()] == ["a", "b"]


# ---------------------------------------------------------------------- a name reused once its job ended
def end(s: Store, name: str, how: str) -> None:
    """End the active run of ``name``: cancelled by a user, or completed or failed on the cluster."""
    if how == "cancel":
        s.cancel(name, 5.0)
        return
    s.apply([Change(name, SCHEDULED, 2.0, "Scheduled", "placed", place(name))])
    s.apply([Change(name, how, 3.0, how, how, exit_code=0 if how == COMPLETED else 1)])


@pytest.mark.parametrize("how", ["cancel", COMPLETED, FAILED])
def test_a_name_is_free_again_once_its_job_has_ended(tmp_path: Path, how: str) -> None:
    s = store(tmp_path)
    add(s, "j", 1.0)
    first = s.get("j")
    assert first is not None
    end(s, "j", how)
    ended = s.get("j")
    assert ended is not None and ended.status in ("cancelled", "completed", "failed")
    old_events = [e.type for e in s.events("j")]
    add(s, "j", 10.0)  # a new run of the name; the ended one stays as history
    new = s.get("j")
    assert new is not None and new.seq > first.seq and new.status == "pending" and new.submitted == 10.0
    assert [(r.name, r.status) for r in s.jobs()] == [("j", ended.status), ("j", "pending")]  # oldest first
    assert [e.type for e in s.events("j")] == ["submitted"]  # the new run's own, none of the old run's
    assert [e.type for e in s.events("j", run=first.seq)] == old_events
    assert {e.run for e in s.events("j", run=first.seq)} == {first.seq}
    assert s.get("j", run=first.seq) == ended
    count, earlier = s.earlier_runs("j", new.seq)
    assert count == 1 and [r.seq for r in earlier] == [first.seq]
    assert s.earlier_runs("j", first.seq) == (0, [])
    assert s.check() == []


@pytest.mark.parametrize("status", ["pending", "running"])
def test_a_second_active_run_of_a_name_is_refused(tmp_path: Path, status: str) -> None:
    s = store(tmp_path)
    add(s, "j")
    if status == "running":
        s.apply([Change("j", SCHEDULED, 1.0, "Scheduled", "placed", place("j"))])
    s.cancel("other", 1.0)  # no such job: nothing
    with pytest.raises(DuplicateJob):
        add(s, "j", 2.0)
    s.cancel("j", 3.0)
    add(s, "j", 4.0)
    with pytest.raises(DuplicateJob):  # nor beside the new run
        add(s, "j", 5.0)
    assert [r.status for r in s.jobs()] == ["cancelled", "pending"]


def test_a_group_commit_takes_one_new_run_of_an_ended_name(tmp_path: Path) -> None:
    s = store(tmp_path)
    add(s, "j")
    s.cancel("j", 1.0)
    futures = [
        s.insert_job_later(name=n, queue="q", kind="training", gpus=4, priority=0, doc={"name": n}, submitted=2.0)
        for n in ("j", "k", "j")
    ]
    assert futures[0].result().name == "j" and futures[1].result().name == "k"
    with pytest.raises(DuplicateJob):
        futures[2].result()
    assert [(r.name, r.status) for r in s.jobs()] == [("j", "cancelled"), ("j", "pending"), ("k", "pending")]


def test_a_change_decided_for_an_ended_run_never_lands_on_the_new_run(tmp_path: Path) -> None:
    s = store(tmp_path)
    add(s, "j")
    first = s.get("j")
    assert first is not None
    s.cancel("j", 1.0)  # cancelled while a cycle placed it ...
    add(s, "j", 2.0)  # ... and submitted again before the cycle's commit
    second = s.get("j")
    assert second is not None
    stale = Change("j", SCHEDULED, 3.0, "Scheduled", "placed", place("j"), run=first.seq)
    assert s.apply([stale]) == {"j"}
    assert (row := s.get("j")) is not None and row.status == "pending" and row.placement is None
    assert s.apply([Change("j", SCHEDULED, 4.0, "Scheduled", "placed", place("j"), run=second.seq)]) == set()
    assert (row := s.get("j")) is not None and row.status == "running"
    assert [e.type for e in s.events("j")] == ["submitted", "scheduled"]
    assert [e.type for e in s.events("j", run=first.seq)] == ["submitted", "cancelled"]
    # A change that names no run goes to the active one; with none active it is refused
    assert s.apply([Change("j", COMPLETED, 5.0, "Completed", "done", exit_code=0)]) == set()
    assert s.apply([Change("j", FAILED, 6.0, "Failed", "late")]) == {"j"}
    assert [r.status for r in s.jobs()] == ["cancelled", "completed"]


def test_check_finds_a_name_with_two_active_runs(tmp_path: Path) -> None:
    s = store(tmp_path)
    add(s, "j")
    con = sqlite3.connect(tmp_path / "db.sqlite")
    con.execute("DROP INDEX ux_jobs_active_name")  # what a store without the index could come to
    cols = "name, queue, kind, gpus, priority, status, reason, message, doc"
    con.execute(f"INSERT INTO jobs ({cols}, submitted, restarts) SELECT {cols}, 9, 0 FROM jobs")
    con.commit()
    con.close()
    assert s.check() == ["j: two active runs (seq 1 and 2)"]


def test_an_older_store_is_migrated_when_opened(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    write_legacy_store(url)
    s = Store(url)
    assert not s.created and len(s.migrated) == 2, s.migrated
    assert "3 event(s) filled by job name" in s.migrated[0]
    # The rows kept their seq; the events found their runs
    assert [(r.seq, r.name, r.status) for r in s.jobs()] == [
        (1, "old", "cancelled"),
        (2, "busy", "running"),
        (3, "queued", "pending"),
    ]
    assert [(e.run, e.type) for e in s.events("old")] == [(1, "submitted"), (1, "scheduled"), (1, "cancelled")]
    assert [(e.run, e.type) for e in s.events("busy")] == [(2, "submitted"), (2, "scheduled")]
    assert s.check() == []
    # The ended job's name is free; the active ones' are not
    add(s, "old", 10.0)
    with pytest.raises(DuplicateJob):
        add(s, "busy", 10.0)
    assert [e.type for e in s.events("old")] == ["submitted"]
    s.close()
    again = Store(url)  # migrated once: a second open changes nothing
    assert again.migrated == []
    assert [(r.name, r.status) for r in again.jobs()] == [
        ("old", "cancelled"),
        ("busy", "running"),
        ("queued", "pending"),
        ("old", "pending"),
    ]
    again.close()
    assert sqlite_file_problem(tmp_path / "db.sqlite") is None


def test_a_commit_finds_the_changed_jobs_by_name_not_by_walking_every_active_run(tmp_path: Path) -> None:
    """The lookup of a cycle's changed jobs: SQLite without statistics would walk ix_jobs_status (every
    pending and running row, 12 ms at 65,000) for ``status IN (...)``; the statement it is given reads the
    names' runs from an index on the name instead, and finds only the active ones."""
    from rackscale.service.store.changes import active_runs

    s = store(tmp_path)
    for i in range(50):
        add(s, f"j{i}")
    s.cancel("j1", 1.0)
    add(s, "j1", 2.0)  # j1: an ended run and an active one
    s.cancel("j2", 1.0)  # j2: ended only
    query = active_runs("sqlite", ["j1", "j2", "j3"])
    with s.engine.connect() as c:
        sql = str(query.compile(dialect=c.dialect, compile_kwargs={"literal_binds": True}))
        plan = " ".join(str(r[3]) for r in c.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}").all())
        found = sorted((name, status) for name, _, status in c.execute(query).all())
    assert "ix_jobs_status" not in plan and "SEARCH jobs USING INDEX ix_jobs_name (name=?)" in plan, plan
    assert found == [("j1", "pending"), ("j3", "pending")]
    s.close()
