"""The store and the service on a real PostgreSQL (`--db-url`), not only SQLite."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.service.conftest import serve_in_thread, small_cluster, wait_for
from tests.service.postgres import INSTALL_HINT, postgres_server

from rackscale.model.placement import NodeAlloc, Placement
from rackscale.service.app import ServiceConfig
from rackscale.service.live import COMPLETED, SCHEDULED, Change
from rackscale.service.store import DuplicateJob, Store


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    try:
        import psycopg  # noqa: F401
    except ImportError as e:
        raise AssertionError(f"psycopg is missing: {INSTALL_HINT}") from e
    # Not under pytest's tmp dir: as root, the server runs as `postgres`, which cannot enter root's 0700 dirs.
    root = Path(tempfile.mkdtemp(prefix="rackscale-pg-"))
    try:
        with postgres_server(root) as url:
            yield url
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    store = Store(pg_url)
    with store.engine.begin() as c:  # a clean slate per test (the server is shared by the module)
        c.exec_driver_sql("TRUNCATE jobs, events, meta RESTART IDENTITY")
    yield store
    store.close()


def test_the_store_works_the_same_on_postgresql(pg_store: Store) -> None:
    s = pg_store
    assert s.engine.dialect.name == "postgresql"
    futures = [
        s.insert_job_later(name=n, queue="q", kind="training", gpus=4, priority=0, doc={"name": n}, submitted=1.0)
        for n in ("a", "b", "a")  # a duplicate within one group commit
    ]
    assert futures[0].result().name == "a" and futures[1].result().name == "b"
    with pytest.raises(DuplicateJob):
        futures[2].result()
    with pytest.raises(DuplicateJob):
        s.insert_job(name="b", queue="q", kind="training", gpus=4, priority=0, doc={}, submitted=2.0)
    p = Placement("a", (NodeAlloc(0, (0, 1, 2, 3)),), 1)
    assert s.apply([Change("a", SCHEDULED, 3.0, "Scheduled", "placed", p)]) == set()
    assert s.cancel("b", 4.0) is not None
    assert s.apply([Change("b", SCHEDULED, 5.0, "Scheduled", "placed", p)]) == {"b"}  # cancelled first: wins
    assert s.apply([Change("a", COMPLETED, 6.0, "Completed", "done", exit_code=0)]) == set()
    a = s.get("a")
    assert a is not None and a.status == "completed" and a.placement == p and a.exit_code == 0
    assert [e.type for e in s.events("a")] == ["submitted", "scheduled", "completed"]
    assert s.count_by_status() == {"completed": 1, "cancelled": 1}
    assert s.latest_time() == 6.0
    assert s.check() == []


def test_the_service_runs_and_restarts_on_postgresql(pg_url: str, pg_store: Store, tmp_path: Path) -> None:
    cfg = ServiceConfig(
        data_dir=tmp_path / "data", cluster=small_cluster(), speed=1000.0, interval_s=0.01, db_url=pg_url
    )
    with serve_in_thread(cfg) as first:
        c = first.client()
        for i in range(3):
            r = c.post(
                "/v1/jobs", json={"name": f"pg-{i}", "kind": "training", "gpus": 64, "durationEstimateSeconds": 1e7}
            )
            assert r.status_code == 201, r.text
        wait_for(lambda: c.get("/v1/cluster").json()["running"] == 2, what="two running")
        before = {j["name"]: j for j in c.get("/v1/jobs").json()["items"]}
    with serve_in_thread(cfg) as second:
        after = {j["name"]: j for j in second.client().get("/v1/jobs").json()["items"]}
        assert {n: (j["status"], j["placement"]) for n, j in after.items()} == {
            n: (j["status"], j["placement"]) for n, j in before.items()
        }
        assert second.svc.recovered == {"running": 2, "pending": 1}
