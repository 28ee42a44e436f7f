"""Paging of ``GET /v1/jobs``: a keyset cursor (``after`` = the ``nextAfter`` of the previous page, the seq
of its last row), so a walk is stable while jobs arrive and move, a bad cursor is a 422 naming the field,
and a cursor carries nothing across tenants (a tenant's page holds only its own jobs, whatever the cursor).

The cluster: one NVL72 rack, held whole by a blocker so that every other job waits::

    r000 [BBBBBBBB ... BBBB]  72 GPUs, blocker (team-a)      queue: a-00 .. a-NN (team-a), b-00 .. (team-b)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.service.conftest import LiveService, serve_in_thread, small_cluster, wait_for

from rackscale.service.app import ServiceConfig
from rackscale.service.views import JobList

ADMIN = "ops-token-0123456789abcdef0123"
TEAM_A = "team-a-token-0123456789abcdef"
TEAM_B = "team-b-token-0123456789abcdef"
TOKENS = f"""\
tokens:
  - {{name: ops, role: admin, token: {ADMIN}}}
  - {{name: team-a, role: tenant, queues: [team-a], token: {TEAM_A}}}
  - {{name: team-b, role: tenant, queues: [team-b], token: {TEAM_B}}}
"""
LONG = 1e7  # outlives the test


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[LiveService]:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    cfg = ServiceConfig(
        data_dir=tmp_path / "data", cluster=small_cluster(1), speed=1000.0, interval_s=0.01, tokens_file=tokens
    )
    with serve_in_thread(cfg) as live:
        yield live


def _submit(c: httpx.Client, name: str, queue: str, gpus: int = 1) -> int:
    r = c.post(
        "/v1/jobs",
        json={"name": name, "kind": "training", "gpus": gpus, "queue": queue, "durationEstimateSeconds": LONG},
    )
    assert r.status_code == 201, r.text
    return int(r.json()["run"])


def _walk(c: httpx.Client, query: str, limit: int, between: Any = None) -> tuple[list[dict[str, Any]], list[int]]:
    """Every page of ``query`` (``limit`` rows each), calling ``between(page_number)`` after each page."""
    rows: list[dict[str, Any]] = []
    cursors: list[int] = []
    after = 0
    for n in range(1000):
        r = c.get(f"/v1/jobs?{query}&limit={limit}&after={after}")
        assert r.status_code == 200, r.text
        page = r.json()
        rows += page["items"]
        if page["nextAfter"] is None:
            return rows, cursors
        after = page["nextAfter"]
        cursors.append(after)
        if between is not None:
            between(n)
    raise AssertionError("the walk did not end")


def _blocked(c: httpx.Client) -> None:
    """The blocker holds the whole rack: every job submitted after it waits."""
    _submit(c, "blocker", "team-a", gpus=72)
    wait_for(lambda: c.get("/v1/jobs/blocker").json()["status"] == "running", what="the blocker to run")


def test_a_walk_sees_every_job_once_in_order_while_jobs_arrive(svc: LiveService) -> None:
    """Submissions between pages land after the cursor (a new seq is larger): the walk ends with them,
    every job exactly once, oldest first, like a fresh listing at its end."""
    with svc.client(ADMIN) as c:
        _blocked(c)
        for i in range(12):
            _submit(c, f"a-{i:02d}", "team-a")
        arrived = iter(range(100, 112))

        def submit_two(_page: int) -> None:
            for _ in range(2):
                _submit(c, f"a-{next(arrived)}", "team-a")

        rows, _ = _walk(c, "status=pending", limit=5, between=submit_two)
        names = [j["name"] for j in rows]
        runs = [j["run"] for j in rows]
        assert len(names) == len(set(names)), "a job listed twice"
        assert runs == sorted(runs), "not oldest first"
        fresh = [j["name"] for j in c.get("/v1/jobs?status=pending&limit=5000").json()["items"]]
        assert names == fresh
        assert {f"a-{i:02d}" for i in range(12)} <= set(names)


def test_jobs_that_leave_the_filter_mid_walk_are_not_doubled_and_do_not_hide_others(svc: LiveService) -> None:
    """Walking the pending jobs while they start (the blocker cancelled after the first page): a job that
    started is left out of later pages, the ones still pending after the cursor are all there, none twice."""
    with svc.client(ADMIN) as c:
        _blocked(c)
        for i in range(20):
            _submit(c, f"a-{i:02d}", "team-a", gpus=8)  # 9 of them fit the rack once it is free

        def free_the_rack(page: int) -> None:
            if page == 0:
                assert c.delete("/v1/jobs/blocker").status_code == 200
                wait_for(lambda: c.get("/v1/cluster").json()["running"] == 9, what="9 of the waiting jobs to start")

        rows, cursors = _walk(c, "status=pending", limit=4, between=free_the_rack)
        names = [j["name"] for j in rows]
        assert len(names) == len(set(names))
        still = {j["name"]: j["run"] for j in c.get("/v1/jobs?status=pending&limit=5000").json()["items"]}
        assert {n for n, run in still.items() if run > cursors[0]} <= set(names)
        assert all(j["status"] == "pending" for j in rows)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("after=-1", "after"),
        ("after=abc", "after"),
        ("after=1.5", "after"),
        (f"after={2**63}", "after"),
        ("after=99999999999999999999999999999999", "after"),
        ("after=%00", "after"),
        ("limit=0", "limit"),
        ("limit=5001", "limit"),
        ("limit=-3", "limit"),
        ("limit=ten", "limit"),
    ],
    ids=[
        "negative",
        "not-a-number",
        "fraction",
        "past-2^62",
        "huge",
        "nul",
        "limit-0",
        "limit-over",
        "limit-neg",
        "limit-word",
    ],
)
def test_a_bad_cursor_or_limit_is_a_422_naming_the_field(svc: LiveService, query: str, field: str) -> None:
    with svc.client(TEAM_A) as c:
        r = c.get(f"/v1/jobs?{query}")
        assert r.status_code == 422, r.text
        assert [p["loc"] for p in r.json()["detail"]] == [["query", field]]


def test_a_cursor_past_every_job_is_an_empty_last_page(svc: LiveService) -> None:
    with svc.client(ADMIN) as c:
        _submit(c, "a-00", "team-a")
        page = c.get(f"/v1/jobs?after={2**62}").json()
        assert page == {"items": [], "nextAfter": None}


def test_a_cursor_from_another_tenants_listing_reveals_nothing(svc: LiveService) -> None:
    """Team B pages with cursors taken from team A's walk: each page holds only B's jobs after that seq
    (what B's own full listing says), and every cursor B is given is the seq of one of B's own jobs."""
    with svc.client(TEAM_A) as a, svc.client(TEAM_B) as b:
        for i in range(6):  # interleaved: A's and B's seqs alternate
            _submit(a, f"a-{i:02d}", "team-a")
            _submit(b, f"b-{i:02d}", "team-b")
        a_rows, a_cursors = _walk(a, "kind=training", limit=2)
        assert {j["queue"] for j in a_rows} == {"team-a"}
        b_all = b.get("/v1/jobs?limit=5000").json()["items"]
        assert {j["queue"] for j in b_all} == {"team-b"}
        b_runs = {j["run"] for j in b_all}
        for cursor in a_cursors:
            got = b.get(f"/v1/jobs?after={cursor}&limit=2").json()
            assert [j["name"] for j in got["items"]] == [j["name"] for j in b_all if j["run"] > cursor][:2]
            assert got["nextAfter"] is None or got["nextAfter"] in b_runs
        # B asking for A's queue by name gets nothing, with or without a cursor.
        for cursor in (0, *a_cursors):
            assert b.get(f"/v1/jobs?queue=team-a&after={cursor}").json() == {"items": [], "nextAfter": None}


def test_a_page_is_its_response_model_and_each_row_the_jobs_own_view(svc: LiveService) -> None:
    """The page is serialised once by pydantic (not validated again by FastAPI): it still parses as the
    OpenAPI document's JobList, and each row is what ``GET /v1/jobs/{name}`` says of the job (which has its
    earlier runs besides; a waiting job's reason may change between the reads), non-ASCII text and a running
    job's placement included."""
    with svc.client(ADMIN) as c:
        c.post(
            "/v1/jobs",
            json={"name": "b-00", "kind": "training", "gpus": 72, "queue": "team-b", "durationEstimateSeconds": LONG},
        )
        wait_for(lambda: c.get("/v1/jobs/b-00").json()["status"] == "running", what="the blocker to run")
        r = c.post(
            "/v1/jobs",
            json={
                "name": "a-00",
                "kind": "training",
                "gpus": 1,
                "queue": "team-a",
                "durationEstimateSeconds": 0.5,
                "env": {"NOTE": "données, 数据 ✓"},
            },
        )
        assert r.status_code == 201, r.text
        page = c.get("/v1/jobs?limit=10")
        assert page.headers["content-type"] == "application/json"
        listed = page.json()
        assert JobList.model_validate_json(page.content).model_dump(mode="json") == listed
        assert [j["name"] for j in listed["items"]] == ["b-00", "a-00"]
        assert listed["items"][1]["spec"]["env"] == {"NOTE": "données, 数据 ✓"}
        assert listed["items"][1]["spec"]["durationEstimateSeconds"] == 0.5
        assert listed["items"][0]["placement"]["gpus"] == 72
        # (A waiting job's reason is live: a cycle between the two reads may say it anew.)
        live = ("earlierRunCount", "earlierRuns", "reason", "message")
        for row in listed["items"]:
            one = c.get(f"/v1/jobs/{row['name']}").json()
            assert {k: v for k, v in one.items() if k not in live} == {k: v for k, v in row.items() if k not in live}
