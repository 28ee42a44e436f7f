"""Disk and store faults, for real (no mock of the store): no acknowledged job is lost, no fault answers a
bare 500, and the service heals by itself once the store takes writes again.

- The faults: SQLite's own "database or disk is full" (``PRAGMA max_page_count``) and "attempt to write a
  readonly database" (``PRAGMA query_only``: as root, chmod would not stop a write), set on every connection
  of the store's writer engine; a real full filesystem (a tmpfs under the data directory, filled up) where
  ``mount`` is allowed; PostgreSQL refusing writes (a read-only session) and losing its connections.
- Store files that are empty, truncated, garbage, corrupt or another program's database refuse to start,
  with one line that says what to do; ``init_store`` (``--init``) keeps them aside and starts a new store.
- A new store while the backend still runs jobs from an earlier one refuses to start (never adopt-and-stop).
- Records that do not decode fail alone (at recovery) and never break a page.
- A backend that raises fails one job (``start``) or is counted (``poll``, ``stop``), never the cycle.
"""

from __future__ import annotations

import errno
import logging
import os
import pwd
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event
from tests.service import postgres
from tests.service.conftest import HandClock, LiveService, serve_in_thread, small_cluster, wait_for

from rackscale.backends.sim import SimBackend
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.service.app import ServiceConfig, ServiceConfigError, build_service
from rackscale.service.live import COMPLETED, SCHEDULED, Change, LiveCluster
from rackscale.service.runner import Runner, spec_of
from rackscale.service.store import DuplicateJob, RejectedJob, Store, StoreUnavailable

TIMEOUT = 15.0
FULL = "database or disk is full"
READ_ONLY = "attempt to write a readonly database"


# ---------------------------------------------------------------------- the faults
def on_writer_connections(engine: Any, statement: str) -> Callable[[], None]:
    """Run ``statement`` on every new connection of ``engine`` from now on (the pooled ones are dropped, so
    the next write opens one); returns what lifts it."""

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute(statement)
        cur.close()
        if engine.dialect.name != "sqlite":
            dbapi_conn.commit()  # a SET in a transaction rolled back would be undone

    event.listen(engine, "connect", on_connect)
    engine.dispose()

    def lift() -> None:
        event.remove(engine, "connect", on_connect)
        engine.dispose()

    return lift


class Fault:
    """One way for the store's disk to fail: ``on`` and ``off`` while a Store (or the service) runs."""

    id = ""
    words = ""  # what the 503 says is wrong
    fix = ""  # and part of what it says to do
    every_write = True  # every write fails (else only those that need new pages: max_page_count)

    def data_dir(self, tmp: Path) -> Path:
        return tmp / "data"

    def on(self, store: Store) -> None:
        raise NotImplementedError

    def off(self, store: Store) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Pragma(Fault):
    def __init__(self, id: str, pragma: str, words: str, fix: str, *, every_write: bool) -> None:
        self.id, self.pragma, self.words, self.fix, self.every_write = id, pragma, words, fix, every_write
        self._lift: Callable[[], None] | None = None

    def on(self, store: Store) -> None:
        self._lift = on_writer_connections(store.engine, self.pragma)

    def off(self, store: Store) -> None:
        assert self._lift is not None
        self._lift()


class FullFilesystem(Fault):
    """A 16 MiB tmpfs under the data directory, filled to the last byte by another file. (The WAL grows
    with every commit until a checkpoint, at 1000 pages: far more than these tests write.)"""

    id, words, fix = "full-filesystem", FULL, "free space in the data directory"

    def __init__(self) -> None:
        self.mnt: Path | None = None

    def data_dir(self, tmp: Path) -> Path:
        mnt = tmp / "fs"
        mnt.mkdir()
        got = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0755", "tmpfs", str(mnt)], capture_output=True, text=True
        )
        if got.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({got.stderr.strip()}); the pragma faults stand in for it")
        self.mnt = mnt
        return mnt / "data"

    def on(self, store: Store) -> None:
        assert self.mnt is not None
        fd = os.open(self.mnt / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            chunk = b"\0" * (1 << 20)
            while chunk:
                try:
                    os.write(fd, chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    chunk = chunk[: len(chunk) // 2]
        finally:
            os.close(fd)

    def off(self, store: Store) -> None:
        assert self.mnt is not None
        (self.mnt / "filler").unlink()

    def close(self) -> None:
        if self.mnt is not None:
            subprocess.run(["umount", "-l", str(self.mnt)], check=False, capture_output=True)


def faults() -> list[Any]:
    return [
        pytest.param(
            lambda: Pragma(
                "disk-full", "PRAGMA max_page_count = 1", FULL, "free space in the data directory", every_write=False
            ),
            id="disk-full",
        ),
        pytest.param(
            lambda: Pragma(
                "read-only", "PRAGMA query_only = ON", READ_ONLY, "make the store writable", every_write=True
            ),
            id="read-only",
        ),
        pytest.param(FullFilesystem, id="full-filesystem"),
    ]


@pytest.fixture(params=faults())
def fault(request: pytest.FixtureRequest) -> Iterator[Fault]:
    f: Fault = request.param()
    try:
        yield f
    finally:
        f.close()


# ---------------------------------------------------------------------- helpers
def job(name: str, *, gpus: int = 8, pad: bool = False) -> dict[str, Any]:
    """A training job that runs for ever (1e7 s); ``pad``: a spec bigger than a page of the store, so its
    row needs new pages (which a full store cannot give)."""
    doc: dict[str, Any] = {"name": name, "kind": "training", "gpus": gpus, "durationEstimateSeconds": 1e7}
    if pad:
        doc["env"] = {f"PAD_{i}": "x" * 200 for i in range(40)}
    return doc


def healthy_gauge(c: httpx.Client) -> float:
    body = c.get("/metrics").text
    return float(next(ln.split()[1] for ln in body.splitlines() if ln.startswith("rackscale_runner_healthy ")))


def add(s: Store, name: str, **kw: Any) -> Any:
    args: dict[str, Any] = dict(name=name, queue="q", kind="training", gpus=4, priority=0, doc={"name": name})
    args.update(kw)
    return s.insert_job_later(submitted=0.0, **args)


def place(name: str, node: int = 0) -> Placement:
    return Placement(name, (NodeAlloc(node, (0, 1, 2, 3)),), 1)


# ---------------------------------------------------------------------- the store's writes, typed
def test_every_write_fails_typed_while_the_fault_lasts_and_the_store_heals(tmp_path: Path, fault: Fault) -> None:
    data = fault.data_dir(tmp_path)
    data.mkdir(parents=True)
    s = Store(f"sqlite:///{data / 'db.sqlite'}")
    try:
        add(s, "a").result()
        s.apply([Change("a", SCHEDULED, 1.0, "Scheduled", "placed", place("a"))])
        fault.on(s)
        writes: dict[str, Callable[[], object]] = {
            "insert": lambda: add(s, "b", doc={"name": "b", "pad": "p" * 9000}).result(),
        }
        if fault.every_write:  # writes that need no new page fail too
            writes |= {
                "cancel": lambda: s.cancel("a", 2.0),
                "apply": lambda: s.apply([Change("a", COMPLETED, 2.0, "Completed", "done", exit_code=0)]),
                "set_meta": lambda: s.set_meta("k", "v"),
                "small-insert": lambda: add(s, "c").result(),
            }
        for what, write in writes.items():
            with pytest.raises(StoreUnavailable) as got:
                write()
            assert fault.words in str(got.value) and fault.fix in str(got.value), (what, str(got.value))
            assert "the service resumes by itself" in str(got.value)
            assert s.failing == str(got.value), what
        assert s.probe() is False
        # Nothing of it was committed.
        assert [(r.name, r.status) for r in s.jobs()] == [("a", "running")]
        assert s.get_meta("k") is None
        fault.off(s)
        assert s.probe() is True and s.failing is None
        assert add(s, "b").result().name == "b"
        assert s.cancel("a", 3.0) is not None
        assert s.count_by_status() == {"pending": 1, "cancelled": 1}
        assert s.check() == []
    finally:
        s.close()


def test_a_group_commit_with_one_bad_row_commits_the_others(tmp_path: Path) -> None:
    """SQLite: a NOT NULL column left empty fails that job alone (the batch is retried a row at a time)."""
    s = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    futures = [add(s, "a"), add(s, "bad", queue=None), add(s, "b"), add(s, "a")]
    assert futures[0].result().name == "a" and futures[2].result().name == "b"
    with pytest.raises(RejectedJob, match=r"refused job 'bad': NOT NULL constraint failed: jobs\.queue"):
        futures[1].result()
    with pytest.raises(DuplicateJob):
        futures[3].result()
    assert [r.name for r in s.jobs()] == ["a", "b"]
    assert s.failing is None  # the store is fine: it was the row
    s.close()


# ---------------------------------------------------------------------- the service under a fault
def test_a_store_fault_answers_503_loses_nothing_and_heals_by_itself(tmp_path: Path, fault: Fault) -> None:
    cfg = ServiceConfig(data_dir=fault.data_dir(tmp_path), cluster=small_cluster(), speed=1000.0, interval_s=0.01)
    early = ["early-1", "early-2"]
    with serve_in_thread(cfg) as live, live.client() as c:
        runner, store = live.svc.ctx.runner, live.svc.ctx.store
        for n in early:
            assert c.post("/v1/jobs", json=job(n)).status_code == 201
        wait_for(
            lambda: all(c.get(f"/v1/jobs/{n}").json()["status"] == "running" for n in early), what="early jobs to run"
        )
        before = {n: c.get(f"/v1/jobs/{n}").json() for n in early}
        if fault.every_write:
            # Accepted (committed) just before the fault; its placement is decided in memory, and cannot commit.
            with runner.lock:
                assert c.post("/v1/jobs", json=job("late")).status_code == 201
                fault.on(store)
            wait_for(lambda: runner.unhealthy, what="the runner to find that its commit fails")
        else:
            fault.on(store)

        # Submitting: 503 with the cause and the fix, Retry-After; nothing is stored.
        r = c.post("/v1/jobs", json=job("during", pad=True))
        assert r.status_code == 503, r.text
        detail = r.json()["detail"]
        assert fault.words in detail and f"fix: {fault.fix}" in detail, detail
        assert int(r.headers["retry-after"]) > 0
        assert c.get("/v1/jobs/during").status_code == 404
        ready = c.get("/readyz")
        assert ready.status_code == 503 and fault.words in ready.json()["detail"], ready.text
        assert healthy_gauge(c) == 0
        r = c.delete("/v1/jobs/early-1")
        assert r.status_code == 503 and fault.words in r.json()["detail"], r.text
        if fault.every_write:
            time.sleep(0.3)  # steps go on meanwhile, every one failing to commit
            assert c.get("/v1/jobs/late").json()["status"] == "pending"
            assert "late" not in runner.backend.running(), "started on the backend before its placement committed"
        assert {n: c.get(f"/v1/jobs/{n}").json() for n in early} == before

        fault.off(store)
        wait_for(lambda: c.get("/readyz").status_code == 200, timeout=TIMEOUT, what="the service to heal by itself")
        assert healthy_gauge(c) == 1 and runner.unhealthy is None and store.failing is None
        acked = [*early, "after"]
        if fault.every_write:
            wait_for(lambda: c.get("/v1/jobs/late").json()["status"] == "running", what="late to be placed")
            assert "late" in runner.backend.running()
            acked.append("late")
        assert c.post("/v1/jobs", json=job("after")).status_code == 201
        assert runner.errors == 0
    with serve_in_thread(cfg) as again, again.client() as c:
        after = {j["name"]: j for j in c.get("/v1/jobs").json()["items"]}
        assert sorted(after) == sorted(acked)
        for n in early:
            assert (after[n]["status"], after[n]["placement"]) == ("running", before[n]["placement"])
        assert again.svc.ctx.store.check() == []


def test_a_failed_submission_is_not_stored_and_may_be_sent_again(tmp_path: Path) -> None:
    """The insert itself fails (the store was fine a moment before): 503, then the same job is accepted."""
    cfg = ServiceConfig(data_dir=tmp_path / "data", cluster=small_cluster(), speed=1000.0, interval_s=0.01)
    with serve_in_thread(cfg) as live, live.client() as c:
        store = live.svc.ctx.store
        lift = on_writer_connections(store.engine, "PRAGMA query_only = ON")
        r = c.post("/v1/jobs", json=job("j"))
        assert r.status_code == 503 and READ_ONLY in r.json()["detail"] and "retry-after" in r.headers, r.text
        assert c.get("/v1/jobs/j").status_code == 404
        lift()
        wait_for(lambda: c.get("/readyz").status_code == 200, timeout=TIMEOUT, what="healed (the runner's probe)")
        assert c.post("/v1/jobs", json=job("j")).status_code == 201


def test_the_runner_keeps_what_it_could_not_commit_and_polls_nothing_until_it_can(tmp_path: Path) -> None:
    """An exit seen in a step whose commit fails is committed later; meanwhile the backend is not polled (it
    may forget an exit once polled again) and no cycle runs."""
    cluster = small_cluster()
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    backend = SimBackend(cluster)
    polls: list[float] = []
    real_poll = backend.poll

    def poll(now: float) -> Any:
        polls.append(now)
        return real_poll(now)

    backend.poll = poll  # type: ignore[method-assign]
    clock = HandClock()
    runner = Runner(LiveCluster(cluster), store, backend, clock)  # type: ignore[arg-type]
    runner.recover()
    for name in ("a", "b"):
        doc = {"name": name, "kind": "training", "gpus": 72 if name == "b" else 8, "durationEstimateSeconds": 100}
        row = store.insert_job(name=name, queue="q", kind="training", gpus=8, priority=0, doc=doc, submitted=0.0)
        runner.submitted(spec_of(row))
    runner.step()
    assert backend.running() == {"a", "b"}
    lift = on_writer_connections(store.engine, "PRAGMA query_only = ON")
    clock.t = 200.0  # both ended
    assert runner.step() == [] and runner.unhealthy is not None and READ_ONLY in runner.unhealthy
    assert [(r.name, r.status) for r in store.jobs()] == [("a", "running"), ("b", "running")]
    seen = len(polls)
    for t in (300.0, 400.0):
        clock.t = t
        assert runner.step() == []
    assert len(polls) == seen, "polled while its exits were not committed"
    lift()
    clock.t = 500.0
    done = runner.step()
    assert {(ch.job, ch.type) for ch in done} == {("a", COMPLETED), ("b", COMPLETED)}
    assert runner.unhealthy is None and runner.problem is None
    assert [(r.name, r.status) for r in store.jobs()] == [("a", "completed"), ("b", "completed")]
    store.close()


# ---------------------------------------------------------------------- store files that cannot be used
def _real_store(path: Path, n: int = 300) -> None:
    s = Store(f"sqlite:///{path}")
    for f in [add(s, f"j{i}", doc={"name": f"j{i}", "pad": "x" * 300}) for i in range(n)]:
        f.result()
    s.close()  # the last connection: checkpointed, no WAL left


def _truncated(path: Path) -> None:
    _real_store(path)
    os.truncate(path, path.stat().st_size // 2)


def _corrupt(path: Path) -> None:
    _real_store(path)
    with path.open("r+b") as f:
        f.seek(4096)  # page 2 (a b-tree page) zeroed
        f.write(b"\0" * 4096)


def _foreign(path: Path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO users (name) VALUES ('alice')")
    con.commit()
    con.close()


BROKEN = [
    pytest.param(lambda p: p.write_bytes(b""), "is empty (a crash or a full disk may have truncated it)", id="empty"),
    pytest.param(_truncated, "is truncated", id="truncated"),
    pytest.param(
        lambda p: p.write_bytes(b"not a database\n" * 300),
        "is not a rackscale store (not even a SQLite database",
        id="garbage",
    ),
    pytest.param(lambda p: p.write_bytes(b"SQLite format 3\0\x10"), "is truncated", id="cut-in-its-header"),
    pytest.param(_corrupt, "is corrupt (quick_check: Page 2:", id="corrupt"),
]


@pytest.mark.parametrize(("make", "says"), BROKEN)
def test_a_broken_store_file_refuses_to_start_and_init_keeps_it_aside(
    tmp_path: Path, make: Callable[[Path], None], says: str, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    db = data / "rackscale.db"
    make(db)
    content = db.read_bytes()
    cfg = ServiceConfig(data_dir=data, cluster=small_cluster(), speed=1000.0, interval_s=0.01)
    with pytest.raises(ServiceConfigError) as got:
        build_service(cfg, start=False)
    msg = str(got.value)
    assert "\n" not in msg
    assert msg.startswith(f"the store file {db} {says}"), msg
    assert "restore it from a backup, or pass --init to start a new store" in msg
    assert f"is kept as {db}.broken-<UTC time>" in msg
    assert db.read_bytes() == content, "refusing must not touch the file"

    cfg.init_store = True
    caplog.set_level(logging.WARNING, logger="rackscale.service")
    with serve_in_thread(cfg) as live, live.client() as c:
        kept = [k for k in data.glob("rackscale.db.broken-*") if not k.name.endswith(("-wal", "-shm"))]
        assert len(kept) == 1 and kept[0].read_bytes() == content, kept
        assert any(f"kept as {kept[0]}; starting a new store" in r.getMessage() for r in caplog.records)
        assert c.post("/v1/jobs", json=job("fresh")).status_code == 201
        assert live.svc.ctx.store.get_meta("created")


def test_another_programs_database_is_refused_even_with_init(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _foreign(data / "rackscale.db")
    for init in (False, True):
        cfg = ServiceConfig(data_dir=data, cluster=small_cluster(), init_store=init)
        with pytest.raises(
            ServiceConfigError, match=r"is a SQLite database but not a rackscale store \(its tables: users"
        ):
            build_service(cfg, start=False)
    con = sqlite3.connect(data / "rackscale.db")
    assert con.execute("SELECT name FROM users").fetchall() == [("alice",)]
    assert not list(data.glob("*.broken-*"))


def test_a_store_rackscale_made_is_marked_and_opens_again(tmp_path: Path) -> None:
    s = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    assert s.created and s.is_new() and s.get_meta("created")
    add(s, "a").result()
    s.close()
    again = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    assert not again.created and not again.is_new()
    again.close()


# ---------------------------------------------------------------------- a new store, old work
ME = pwd.getpwuid(os.geteuid()).pw_name


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def test_a_new_store_never_adopts_and_stops_what_the_backend_still_runs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    options: dict[str, object] = {"gpus": [0], "run_as": ME, "allow_root_jobs": True}
    cfg = ServiceConfig(data_dir=data, backend="local", backend_options=options, interval_s=0.01)
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    body = {"name": "keeper", "kind": "batch", "gpus": 1, "command": sleeper}
    pid_file = data / "run" / "keeper.pid"
    with serve_in_thread(cfg) as live, live.client() as c:
        assert c.post("/v1/jobs", json=body).status_code == 201
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), what="the job's pid file")
    pid = int(pid_file.read_text())
    try:
        assert _alive(pid)
        for f in data.glob("rackscale.db*"):  # the store is lost (or --data-dir points at a new one)
            f.unlink()
        for attempt in range(2):  # the refused start made a new, empty store: it is refused again
            with pytest.raises(ServiceConfigError) as got:
                build_service(cfg, start=False)
            assert str(got.value) == (
                f"the store in {data / 'rackscale.db'} is new but the local backend still runs 1 job(s) from an "
                "earlier store (keeper): restore the store, or pass --init to stop them"
            ), attempt
            assert _alive(pid), "refusing must leave the job running"
        cfg.init_store = True
        with serve_in_thread(cfg):
            wait_for(lambda: not _alive(pid), timeout=TIMEOUT, what="adopt to stop the job the new store does not know")
    finally:
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)


# ---------------------------------------------------------------------- records that do not decode
def test_corrupt_records_fail_alone_at_recovery_and_never_break_a_page(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    db = data / "rackscale.db"
    s = Store(f"sqlite:///{db}")
    for n in ("bad-doc", "bad-placement", "bad-text", "deep-doc", "bad-type", "fine"):
        add(s, n, doc={"name": n, "kind": "training", "gpus": 4}).result()
    s.apply([Change("bad-placement", SCHEDULED, 1.0, "Scheduled", "placed", place("bad-placement"))])
    s.apply([Change("bad-text", SCHEDULED, 1.0, "Scheduled", "placed", place("bad-text", 1))])
    s.apply([Change("bad-text", COMPLETED, 2.0, "Completed", "done", exit_code=0)])
    s.close()
    con = sqlite3.connect(db)
    con.execute("UPDATE jobs SET doc = '{\"name\": \"bad-doc\", ' WHERE name = 'bad-doc'")
    con.execute("UPDATE jobs SET placement = '[[' WHERE name = 'bad-placement'")
    con.execute("UPDATE jobs SET message = CAST(X'646f6e65ff' AS TEXT) WHERE name = 'bad-text'")
    # Valid JSON, but deeper than any reply can carry (it made every page that held it a 500).
    con.execute("UPDATE jobs SET doc = ? WHERE name = 'deep-doc'", ('{"a": ' + "[" * 300 + "]" * 300 + "}",))
    con.execute("UPDATE jobs SET gpus = 'four' WHERE name = 'bad-type'")  # SQLite keeps text in a FLOAT column
    # ... and a BLOB in a TEXT one; an ended job's events with a time that is text and a reason that is a BLOB.
    con.execute("UPDATE jobs SET queue = X'71ff' WHERE name = 'bad-text'")
    con.execute("UPDATE events SET time = 'later', reason = X'ff' WHERE job = 'bad-text'")
    con.commit()
    con.close()
    problems = Store(f"sqlite:///{db}").check()
    assert [p.split(":")[0] for p in problems] == ["bad-doc", "bad-placement", "bad-text", "deep-doc", "bad-type"], (
        problems
    )

    cfg = ServiceConfig(data_dir=data, cluster=small_cluster(), speed=1000.0, interval_s=0.01)
    with serve_in_thread(cfg) as live, live.client() as c:
        page = c.get("/v1/jobs")
        assert page.status_code == 200, page.text
        got = {j["name"]: j for j in page.json()["items"]}
        for n in ("bad-doc", "bad-placement", "deep-doc", "bad-type"):  # active: failed at recovery, saying why
            assert (got[n]["status"], got[n]["reason"]) == ("failed", "CorruptRecord"), got[n]
            assert got[n]["message"].startswith("the stored record is corrupt: "), got[n]
        assert got["bad-text"]["status"] == "completed"
        assert got["bad-text"]["message"] == (
            "the stored record is corrupt: queue not of the column's type; message not valid UTF-8"
        )
        assert got["fine"]["status"] == "running" and got["fine"]["spec"]["name"] == "fine"
        assert c.get("/v1/jobs/bad-text").status_code == 200
        assert c.get("/v1/jobs/deep-doc").status_code == 200
        assert c.get("/v1/jobs/bad-type").status_code == 200
        events = c.get("/v1/jobs/bad-text/events")
        assert events.status_code == 200, events.text
        stored = [e for e in events.json()["items"] if e["type"] != "submitted"]
        assert stored and all(
            e["message"] == "the stored event is corrupt: time, reason not of the column's type" and e["time"] == 0
            for e in stored
        ), stored
        assert c.get("/v1/queues").status_code == 200
        assert c.get("/readyz").status_code == 200
        wait_for(lambda: c.get("/v1/jobs/fine").json()["status"] == "running", what="fine to run")
        assert live.svc.ctx.runner.live.state.running.keys() == {"fine"}


# ---------------------------------------------------------------------- a backend that raises
def test_a_backend_start_that_raises_fails_that_job_only(service: LiveService, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = service.svc.ctx.runner
    backend: Any = runner.backend
    real = backend.start

    def start(spec: Any, placement: Any, *, now: float) -> None:
        if spec.name == "bad":
            raise ValueError("embedded null byte")
        real(spec, placement, now=now)

    monkeypatch.setattr(backend, "start", start)
    with service.client() as c:
        with runner.lock:  # both in one cycle
            for n in ("bad", "good"):
                assert c.post("/v1/jobs", json=job(n)).status_code == 201
        wait_for(lambda: c.get("/v1/jobs/bad").json()["status"] == "failed", what="bad to fail")
        bad = c.get("/v1/jobs/bad").json()
        assert (bad["reason"], bad["message"]) == (
            "BackendFailed",
            "the backend could not start it: ValueError: embedded null byte",
        )
        assert c.get("/v1/jobs/good").json()["status"] == "running"
        assert backend.running() == {"good"}
        assert c.get("/v1/cluster").json()["gpusAllocated"] == 8  # bad's GPUs are free again
        assert runner.errors == 1 and c.get("/readyz").status_code == 200


def test_a_backend_poll_or_stop_that_raises_is_counted_and_the_step_goes_on(
    service: LiveService, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = service.svc.ctx.runner
    backend: Any = runner.backend
    real_poll, real_stop = backend.poll, backend.stop
    raised = {"poll": 0, "stop": 0}

    def poll(now: float) -> Any:
        if raised["poll"] < 3:
            raised["poll"] += 1
            raise RuntimeError("the backend lost its way")
        return real_poll(now)

    def stop(job: str, *, now: float) -> None:
        raised["stop"] += 1
        raise OSError("no such process")

    monkeypatch.setattr(backend, "poll", poll)
    with service.client() as c:
        assert c.post("/v1/jobs", json=job("p")).status_code == 201
        wait_for(lambda: c.get("/v1/jobs/p").json()["status"] == "running", what="p to run despite poll raising")
        monkeypatch.setattr(backend, "stop", stop)
        assert c.delete("/v1/jobs/p").json()["status"] == "cancelled"
        wait_for(lambda: raised["stop"] == 1, what="the stop")
        monkeypatch.setattr(backend, "stop", real_stop)
        assert c.post("/v1/jobs", json=job("q")).status_code == 201
        wait_for(lambda: c.get("/v1/jobs/q").json()["status"] == "running", what="q to run after stop raised")
        assert runner.errors == 4 and c.get("/readyz").status_code == 200


# ---------------------------------------------------------------------- PostgreSQL
# The module's server and a store emptied before each test (tests/service/postgres.py).
pg_url, pg = postgres.pg_url, postgres.pg_store


def test_postgresql_an_over_long_name_fails_alone_and_its_batch_commits(pg: Store) -> None:
    futures = [add(pg, "a"), add(pg, "x" * 300), add(pg, "b")]
    assert futures[0].result().name == "a" and futures[2].result().name == "b"
    with pytest.raises(RejectedJob, match="value too long for type character varying"):
        futures[1].result()
    assert [r.name for r in pg.jobs()] == ["a", "b"]
    assert pg.failing is None


def test_postgresql_a_read_only_session_is_unavailable_then_heals(pg: Store) -> None:
    add(pg, "a").result()
    lift = on_writer_connections(pg.engine, "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    for write in (lambda: add(pg, "b").result(), lambda: pg.cancel("a", 1.0)):
        with pytest.raises(StoreUnavailable, match="read-only transaction") as got:
            write()
        assert "fix: " in str(got.value) and pg.failing == str(got.value)
    lift()
    assert add(pg, "b").result().name == "b" and pg.failing is None
    assert pg.count_by_status() == {"pending": 2}


def test_postgresql_lost_connections_are_replaced_without_a_failed_write(pg: Store, pg_url: str) -> None:
    add(pg, "a").result()
    killer = Store(pg_url)
    with killer.engine.begin() as c:  # every other session of the server, the store's among them
        c.exec_driver_sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
    killer.close()
    assert add(pg, "b").result().name == "b"  # the pool tests a connection before a write (pre-ping)
    assert pg.cancel("a", 1.0) is not None and pg.failing is None
