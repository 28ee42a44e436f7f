"""Node holds (cordon, drain) and NOTICE events on a real PostgreSQL (tests/service/postgres.py's fixtures):
the ``meta`` rows ``hold:NODE`` bring the holds back after a restart on the same database, an uncordon
deletes its row (so a restart finds none), an empty row of an older version reads as no hold, and a long
node name's key fits PostgreSQL's 64-character column (SQLite would not have checked).

The cluster is 2 NVL72 racks (r000, r001: 18 nodes x 4 GPUs each); one 4-GPU job ``j`` runs on node J,
which is drained with a day's grace; another node C is only cordoned::

    rack of J [J(jjjj) ... ]   drain "firmware", grace 1d: j is told, goes on through the restarts
    r001      [... C(....)]    cordon "watch"
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from tests.service import postgres
from tests.service.conftest import serve_in_thread, small_cluster, wait_for
from tests.service.test_notices import HISTORIES, HISTORY_IDS, check_batch, check_notice

from rackscale.service.app import ServiceConfig
from rackscale.service.live import Change
from rackscale.service.nodes_api import hold_key, stored_holds
from rackscale.service.store import Store, meta

pg_url, pg_store = postgres.pg_url, postgres.pg_store  # the shared fixtures (this module gets its own server)


def hold_rows(store: Store) -> dict[str, str]:
    with store.reader.connect() as c:
        rows = c.execute(select(meta.c.key, meta.c.value).where(meta.c.key.like("hold:%"))).all()
    return {k: v for k, v in rows}


def modes(c: Any) -> dict[str, tuple[str | None, str | None]]:
    """Every held node's (mode, reason)."""
    items = c.get("/v1/nodes").json()["items"]
    return {n["name"]: (n["mode"], n["reason"]) for n in items if n["mode"] is not None}


def notices(c: Any, job: str) -> list[tuple[str, str]]:
    return [
        (e["reason"], e["message"]) for e in c.get(f"/v1/jobs/{job}/events").json()["items"] if e["type"] == "notice"
    ]


def test_holds_come_back_after_a_restart_and_an_uncordon_deletes_them(
    pg_url: str,
    pg_store: Store,
    tmp_path: Path,
) -> None:
    cfg = ServiceConfig(
        data_dir=tmp_path / "data", cluster=small_cluster(), speed=1000.0, interval_s=0.01, db_url=pg_url
    )
    doc = {"name": "j", "kind": "training", "gpus": 4, "durationEstimateSeconds": 1e9}
    with serve_in_thread(cfg) as first, first.client() as c:
        assert c.post("/v1/jobs", json=doc).status_code == 201
        job = wait_for(lambda: (j := c.get("/v1/jobs/j").json())["status"] == "running" and j, what="j running")
        assert isinstance(job, dict)
        [j_node] = [s["node"] for s in job["placement"]["nodes"]]
        c_node = "r001-n17" if j_node != "r001-n17" else "r000-n17"
        assert c.post(f"/v1/nodes/{c_node}/cordon", json={"reason": "watch"}).status_code == 200
        r = c.post(f"/v1/nodes/{j_node}/drain", json={"reason": "firmware", "grace": "1d"})
        assert r.status_code == 200, r.text
        want = {j_node: ("draining", "firmware"), c_node: ("cordoned", "watch")}
        wait_for(lambda: modes(c) == want, what="the holds")
        told = f"draining node {j_node} (firmware): stopped and requeued in 1 d unless it ends first"
        wait_for(lambda: notices(c, "j") == [("Draining", told)], what="the drain's notice")
        assert set(hold_rows(pg_store)) == {hold_key(j_node), hold_key(c_node)}

    with serve_in_thread(cfg) as second, second.client() as c:  # the same database: the holds come back
        wait_for(lambda: modes(c) == want, what="the holds after a restart")
        assert c.get("/v1/jobs/j").json()["status"] == "running"  # in its grace still (a day, ~86 s here)
        # The new host learns the drain again, and tells the job again with the time left.
        wait_for(lambda: len(notices(c, "j")) == 2, what="the notice after the restart")
        assert notices(c, "j")[1][1].startswith(f"draining node {j_node} (firmware): stopped and requeued in ")
        for node in (j_node, c_node):
            assert c.post(f"/v1/nodes/{node}/uncordon").status_code == 200
        wait_for(lambda: modes(c) == {}, what="the uncordons")
        assert hold_rows(pg_store) == {}  # deleted, not left empty
        off = ("DrainCalledOff", f"the drain of node {j_node} was called off: it goes on")
        wait_for(lambda: notices(c, "j")[-1] == off, what="the called-off notice")

    with serve_in_thread(cfg) as third, third.client() as c:  # and a restart finds none
        wait_for(lambda: c.get("/v1/jobs/j").json()["status"] == "running", what="j running again")
        assert modes(c) == {}
        assert len(notices(c, "j")) == 3  # nothing told again
        assert hold_rows(pg_store) == {}


def test_an_empty_hold_row_is_no_hold_and_a_long_names_key_fits(pg_store: Store) -> None:
    s = pg_store
    at_limit, long_name = "n" * 59, "node-" + "x" * 200  # "hold:" + 59 = the column's 64; longer: hashed
    names = ["r000-n00", at_limit, long_name]
    hold = json.dumps({"reason": "firmware", "since": 10.0, "deadline": None})
    s.set_meta(hold_key("r000-n00"), "")  # what an uncordon wrote before rows were deleted
    for name in (at_limit, long_name):
        s.set_meta(hold_key(name), hold)  # PostgreSQL would refuse a key over 64 characters
    assert hold_key(at_limit) == "hold:" + at_limit and len(hold_key(long_name)) <= 64
    got = stored_holds(s, names)
    assert sorted(got) == [1, 2] and (got[2].reason, got[2].since, got[2].deadline) == ("firmware", 10.0, None)
    s.delete_meta(hold_key(long_name))
    s.delete_meta(hold_key(long_name))  # none there: nothing to do
    assert sorted(stored_holds(s, names)) == [1] and s.get_meta(hold_key(long_name)) is None


@pytest.mark.parametrize(("history", "logged"), HISTORIES, ids=HISTORY_IDS)
def test_a_notice_is_an_event_of_the_run_only_on_postgresql(
    pg_store: Store,
    history: list[Change | str],
    logged: bool,
) -> None:
    check_notice(pg_store, history, logged)


def test_notices_keep_their_order_and_a_long_reason_fits_on_postgresql(pg_store: Store) -> None:
    check_batch(pg_store)
