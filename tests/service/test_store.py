"""The store: conditional status changes (a cancel and a placement racing for one job: the first commit
wins), the event log, and the integrity check."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import exc as sa_exc

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
