"""The REST API over a real service (uvicorn on loopback, SQLite, the runner thread): status codes, auth,
tenants, validation, and what a restart keeps."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.service.conftest import LiveService, serve_in_thread, small_cluster, wait_for

from rackscale.service.app import ServiceConfig, ServiceConfigError, build_service
from rackscale.service.auth import TokenFileError, TokenTable
from rackscale.service.runner import spec_of
from rackscale.service.store import Store
from rackscale.service.views import clock_time, say_time

ADMIN, TEAM_A, TEAM_B = "admin-token-0123456789", "team-a-token-0123456789", "team-b-token-0123456789"
TOKENS = f"""
tokens:
  - {{name: ops, role: admin, token: {ADMIN}}}
  - {{name: team-a, role: tenant, queues: [team-a], token: {TEAM_A}}}
  - {{name: team-b, role: tenant, queues: [team-b, team-b-batch], token: {TEAM_B}}}
"""


def job(name: str, gpus: int = 8, **extra: object) -> dict[str, object]:
    return {"name": name, "kind": "training", "gpus": gpus, "durationEstimateSeconds": 1e7, **extra}


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[LiveService]:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    cfg = ServiceConfig(
        data_dir=tmp_path / "data", cluster=small_cluster(), speed=1000.0, interval_s=0.01, tokens_file=tokens
    )
    with serve_in_thread(cfg) as live:
        yield live


def test_submit_schedule_list_and_cancel(service: LiveService) -> None:
    c = service.client()
    r = c.post("/v1/jobs", json={"name": "train-1", "kind": "training", "gpus": 8})
    assert r.status_code == 201, r.text
    assert r.json()["status"] == "pending"
    got = wait_for(lambda: (j := c.get("/v1/jobs/train-1").json())["status"] == "running" and j, what="running")
    assert isinstance(got, dict)
    assert got["placement"]["gpus"] == 8 and len(got["placement"]["racks"]) == 1
    assert [j["name"] for j in c.get("/v1/jobs").json()["items"]] == ["train-1"]
    assert c.get("/v1/cluster").json()["gpusAllocated"] == 8
    r = c.delete("/v1/jobs/train-1")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    wait_for(lambda: c.get("/v1/cluster").json()["gpusAllocated"] == 0, what="GPUs released")
    types = [e["type"] for e in c.get("/v1/jobs/train-1/events").json()["items"]]
    assert types == ["submitted", "scheduled", "cancelled"]


def test_a_job_runs_to_completion_on_the_sim_backend(service: LiveService) -> None:
    c = service.client()
    c.post("/v1/jobs", json=job("short", durationEstimateSeconds=600))  # 0.6 s at speed 1000
    wait_for(lambda: c.get("/v1/jobs/short").json()["status"] == "completed", what="completion")
    assert c.get("/v1/kpis").json()["completed"] == 1


def test_a_pending_job_says_why(service: LiveService) -> None:
    c = service.client()
    for n in ("fill-1", "fill-2"):
        c.post("/v1/jobs", json=job(n, 72))
    c.post("/v1/jobs", json=job("waits", 72))
    got = wait_for(lambda: (j := c.get("/v1/jobs/waits").json())["reason"] not in ("Queued",) and j, what="reason")
    assert isinstance(got, dict)
    assert got["status"] == "pending" and got["message"]
    # The reason is read from the live cluster as soon as the cycle decided it; its event is committed by the
    # same step a moment later.
    wait_for(
        lambda: any(e["type"] == "waiting" for e in c.get("/v1/jobs/waits/events").json()["items"]),
        what="the waiting event",
    )


@pytest.mark.parametrize(
    ("body", "loc", "needle"),
    [
        pytest.param({"name": "x", "kind": "training"}, ["body", "gpus"], "required", id="missing-gpus"),
        pytest.param(
            {"name": "x", "kind": "training", "gpus": 7, "gpusPerWorker": 4},
            ["body", "gpus"],
            "multiple",
            id="not-a-multiple",
        ),
        pytest.param({"name": "x", "kind": "trainin", "gpus": 8}, ["body", "kind"], "", id="bad-kind"),
        pytest.param(
            {"name": "Not/OK", "kind": "training", "gpus": 8}, ["body", "name"], "not a valid name", id="bad-name"
        ),
        pytest.param(
            {"name": "x", "kind": "training", "gpus": 8, "priorityClassName": "urgent"},
            ["body", "priorityClassName"],
            "unknown priority class",
            id="unknown-class",
        ),
        pytest.param([1, 2], ["body"], "JSON object", id="not-an-object"),
        pytest.param(
            {"name": "x", "kind": "training", "gpus": 1, "llm": {"model": "llama-3.1-405b"}},
            ["body", "llm"],
            "does not train on 1",
            id="llm-model-too-big-for-its-gpus",
        ),
        pytest.param(
            {"name": "x", "kind": "training", "gpus": 8, "env": {"A;rm -rf /": "1"}},
            ["body", "env", "A;rm -rf /"],
            "not a valid name",
            id="env-name-not-a-shell-name",
        ),
    ],
)
def test_bad_specs_get_422_with_the_field_and_a_fix(
    service: LiveService, body: object, loc: list[str], needle: str
) -> None:
    r = service.client().post("/v1/jobs", json=body)
    assert r.status_code == 422, r.text
    problems = r.json()["detail"]
    assert any(p["loc"] == loc and needle in p["msg"] for p in problems), problems
    assert all(p["fix"] for p in problems)


def test_not_json_is_422_and_too_large_is_413(service: LiveService) -> None:
    c = service.client()
    r = c.post("/v1/jobs", content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 422 and "not valid JSON" in r.text
    big = {"name": "big", "kind": "training", "gpus": 8, "env": {"X": "y" * 100_000}}
    assert c.post("/v1/jobs", json=big).status_code == 413
    assert c.get("/v1/jobs/big").status_code == 404  # nothing stored


def test_duplicate_names_are_409_and_unknown_jobs_404(service: LiveService) -> None:
    c = service.client()
    assert c.post("/v1/jobs", json=job("dup")).status_code == 201
    r = c.post("/v1/jobs", json=job("dup"))
    assert r.status_code == 409
    assert r.json()["detail"] in (
        f"a job named 'dup' is {status}: cancel it first, or pick another name" for status in ("pending", "running")
    )
    assert c.get("/v1/jobs/nope").status_code == 404
    assert c.delete("/v1/jobs/nope").status_code == 404
    assert c.get("/v1/racks/nope").status_code == 404


@pytest.mark.parametrize(
    ("headers", "detail"),
    [
        pytest.param({}, "missing bearer token", id="missing"),
        pytest.param({"Authorization": "Bearer wrong-token-000000000"}, "unknown token", id="wrong"),
        pytest.param({"Authorization": f"Basic {ADMIN}"}, "malformed", id="not-bearer"),
    ],
)
def test_without_a_valid_token_everything_is_401(secured: LiveService, headers: dict[str, str], detail: str) -> None:
    with httpx.Client(base_url=secured.url, headers=headers) as c:
        for method, path in [("GET", "/v1/jobs"), ("GET", "/v1/racks"), ("POST", "/v1/jobs"), ("GET", "/v1/kpis")]:
            r = c.request(method, path, json=job("x") if method == "POST" else None)
            assert r.status_code == 401, (path, r.text)
            assert detail in r.json()["detail"] and r.headers["www-authenticate"] == "Bearer"


def test_tenants_see_and_cancel_only_their_own_jobs(secured: LiveService) -> None:
    a, b, ops = secured.client(TEAM_A), secured.client(TEAM_B), secured.client(ADMIN)
    r = a.post("/v1/jobs", json=job("a-1"))  # no queue: the tenant's first
    assert r.status_code == 201 and r.json()["queue"] == "team-a"
    assert b.post("/v1/jobs", json=job("b-1", queue="team-b-batch")).status_code == 201
    r = a.post("/v1/jobs", json=job("a-sneaky", queue="team-b"))
    assert r.status_code == 403 and "team-b" in r.json()["detail"]
    assert [j["name"] for j in a.get("/v1/jobs").json()["items"]] == ["a-1"]
    assert [j["name"] for j in b.get("/v1/jobs").json()["items"]] == ["b-1"]
    assert sorted(j["name"] for j in ops.get("/v1/jobs").json()["items"]) == ["a-1", "b-1"]
    assert a.get("/v1/jobs?queue=team-b").json()["items"] == []
    for method in ("GET", "DELETE"):
        r = a.request(method, "/v1/jobs/b-1")
        assert r.status_code == 404 and "b-1" in r.text and "team-b" not in r.text
    assert a.get("/v1/jobs/b-1/events").status_code == 404
    assert b.get("/v1/jobs/b-1").json()["status"] in ("pending", "running")  # untouched
    assert [q["name"] for q in a.get("/v1/queues").json()["items"]] == ["team-a"]
    assert ops.delete("/v1/jobs/b-1").json()["status"] == "cancelled"


def test_restart_keeps_every_job_and_every_placement(tmp_path: Path) -> None:
    cfg = ServiceConfig(data_dir=tmp_path / "data", cluster=small_cluster(), speed=1.0, interval_s=0.01)
    with serve_in_thread(cfg) as first:
        c = first.client()
        for i in range(6):
            c.post("/v1/jobs", json=job(f"j{i}", 32))  # 4 fit per rack... 2 racks hold 4 of 6
        wait_for(lambda: c.get("/v1/cluster").json()["running"] == 4, what="4 running")
        before = {j["name"]: j for j in c.get("/v1/jobs").json()["items"]}
    with serve_in_thread(cfg) as second:
        c = second.client()
        after = {j["name"]: j for j in c.get("/v1/jobs").json()["items"]}
        assert after.keys() == before.keys()
        for name, j in before.items():
            assert after[name]["status"] == j["status"]
            assert after[name]["placement"] == j["placement"]
        assert c.get("/v1/cluster").json()["gpusAllocated"] == 4 * 32
        assert second.svc.recovered == {"running": 4, "pending": 2}
        second.svc.ctx.runner.live.state.check_invariants()
    assert Store(f"sqlite:///{cfg.data_dir / 'rackscale.db'}").check() == []


def test_binding_beyond_loopback_without_tokens_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ServiceConfigError, match="without a token file"):
        build_service(ServiceConfig(data_dir=tmp_path, host="0.0.0.0", cluster=small_cluster()), start=False)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        pytest.param("tokens: []", "tokens", id="empty"),
        pytest.param("tokens:\n  - {name: x, role: tenant, token: abcdefghijklmnopq}", "queues", id="tenant-no-queue"),
        pytest.param("tokens:\n  - {name: x, role: root, token: abcdefghijklmnopq}", "role", id="bad-role"),
        pytest.param("tokens:\n  - {name: x, role: admin, token: short}", "token", id="short-token"),
        pytest.param("tokens: [", "YAML", id="bad-yaml"),
    ],
)
def test_bad_token_files_say_what_to_fix(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "t.yaml"
    f.write_text(text)
    with pytest.raises(TokenFileError, match=needle):
        TokenTable.load(f)


def test_a_stored_spec_that_no_longer_loads_fails_that_job_not_the_service(tmp_path: Path) -> None:
    cfg = ServiceConfig(data_dir=tmp_path / "data", cluster=small_cluster(), speed=1.0, interval_s=0.01)
    cfg.data_dir.mkdir(parents=True)
    store = Store(f"sqlite:///{cfg.data_dir}/rackscale.db")
    store.insert_job(
        name="old",
        queue="default",
        kind="training",
        gpus=8,
        priority=0,
        doc={"name": "old", "kind": "training", "gpus": 8, "retired": True},
        submitted=1.0,
    )
    store.insert_job(
        name="ok",
        queue="default",
        kind="training",
        gpus=8,
        priority=0,
        doc={"name": "ok", "kind": "training", "gpus": 8},
        submitted=1.0,
    )
    store.close()
    with serve_in_thread(cfg) as svc:
        c = svc.client()
        old = c.get("/v1/jobs/old").json()
        assert old["status"] == "failed" and old["reason"] == "InvalidSpec" and "retired" in old["message"]
        wait_for(lambda: c.get("/v1/jobs/ok").json()["status"] == "running", what="the other job runs")


def test_a_tenant_sees_other_tenants_gpus_as_used_but_not_their_job_names(secured: LiveService) -> None:
    a, b, ops = secured.client(TEAM_A), secured.client(TEAM_B), secured.client(ADMIN)
    assert a.post("/v1/jobs", json=job("a-job", 8)).status_code == 201
    assert b.post("/v1/jobs", json=job("b-secret", 8, queue="team-b")).status_code == 201
    wait_for(lambda: ops.get("/v1/cluster").json()["running"] == 2, what="both running")
    racks = {r["name"]: r for r in ops.get("/v1/racks").json()["items"]}
    seen_by_a = {r["name"]: r for r in a.get("/v1/racks").json()["items"]}
    assert sum(r["allocated"] for r in seen_by_a.values()) == 16  # capacity is not hidden
    assert sorted(j for r in racks.values() for j in r["jobs"]) == ["a-job", "b-secret"]
    assert [j for r in seen_by_a.values() for j in r["jobs"]] == ["a-job"]
    for where in ["/v1/racks", "/v1/nodes", "/v1/ui/overview?detail=r000,r001"] + [f"/v1/racks/{n}" for n in racks]:
        assert "b-secret" not in a.get(where).text, where
        assert "a-job" not in b.get(where).text, where
    grid = [
        g
        for n in a.get(f"/v1/racks/{next(n for n, r in racks.items() if 'b-secret' in r['jobs'])}").json()["nodes"]
        for g in n["gpuGrid"]
        if g["usedMilli"]
    ]
    assert {g["job"] for g in grid} <= {None, "a-job"} and any(g["job"] is None for g in grid)


# ---------------------------------------------------------------------- a name reused once its job ended
def end_it(c: httpx.Client, name: str, how: str) -> None:
    """Submit ``name`` and see it end: cancelled by a user, completed, or failed (more GPUs than the
    cluster has: it can never run)."""
    body = {
        "cancel": job(name, 8),
        "completed": job(name, 8, durationEstimateSeconds=300),  # 0.3 s at speed 1000
        "failed": job(name, 1000),
    }[how]
    assert c.post("/v1/jobs", json=body).status_code == 201
    if how == "cancel":
        wait_for(lambda: c.get(f"/v1/jobs/{name}").json()["status"] == "running", what="running")
        assert c.delete(f"/v1/jobs/{name}").json()["status"] == "cancelled"
    else:
        wait_for(lambda: c.get(f"/v1/jobs/{name}").json()["status"] == how, what=how)


@pytest.mark.parametrize("how", ["cancel", "completed", "failed"])
def test_a_name_is_free_again_once_its_job_has_ended(service: LiveService, how: str) -> None:
    c = service.client()
    end_it(c, "again", how)
    old = c.get("/v1/jobs/again").json()
    old_events = c.get("/v1/jobs/again/events").json()
    r = c.post("/v1/jobs", json=job("again", 8))
    assert r.status_code == 201, r.text
    new = r.json()
    assert new["run"] > old["run"] and new["status"] == "pending"
    got = wait_for(lambda: (j := c.get("/v1/jobs/again").json())["status"] == "running" and j, what="the new run")
    assert isinstance(got, dict) and got["run"] == new["run"]
    assert got["earlierRunCount"] == 1
    assert [(e["run"], e["status"]) for e in got["earlierRuns"]] == [(old["run"], old["status"])]
    # Each run has its own events: none of the old run's are mixed into the new one's
    events = c.get("/v1/jobs/again/events").json()
    assert events["run"] == new["run"]
    assert [e["type"] for e in events["items"]] == ["submitted", "scheduled"]
    assert c.get(f"/v1/jobs/again/events?run={old['run']}").json() == old_events
    assert c.get(f"/v1/jobs/again?run={old['run']}").json()["status"] == old["status"]
    r = c.get("/v1/jobs/again?run=999999")
    assert r.status_code == 404 and "has no run 999999" in r.text
    # Every run in the list, oldest first; a second active run of the name is still refused
    assert [(j["name"], j["run"]) for j in c.get("/v1/jobs").json()["items"]] == [
        ("again", old["run"]),
        ("again", new["run"]),
    ]
    r = c.post("/v1/jobs", json=job("again", 8))
    assert r.status_code == 409 and "is running: cancel it first, or pick another name" in r.text
    # Cancel addresses the latest run; the ended one stays as it was
    assert c.delete("/v1/jobs/again").json()["run"] == new["run"]
    assert c.get(f"/v1/jobs/again?run={old['run']}").json()["status"] == old["status"]
    wait_for(lambda: c.get("/v1/cluster").json()["gpusAllocated"] == 0, what="GPUs released")


def test_a_new_run_whose_submission_overtakes_the_old_runs_cancel_still_runs(service: LiveService) -> None:
    """Two clients: one cancels the job, the other submits its name again; the runner may hear of the new run
    before the cancel of the old one. The old run is stopped, the new one runs, and the late cancel (of the
    old run) does not touch the new one."""
    c = service.client()
    assert c.post("/v1/jobs", json=job("race", 8)).status_code == 201
    wait_for(lambda: c.get("/v1/jobs/race").json()["status"] == "running", what="running")
    runner, store = service.svc.ctx.runner, service.svc.ctx.store
    with runner.lock:  # no runner step meanwhile: both messages wait in its inbox, the new run's first
        old = store.cancel("race", runner.clock.now())
        assert old is not None and old.status == "cancelled"
        new = store.insert_job(
            name="race",
            queue="default",
            kind="training",
            gpus=16,
            priority=0,
            doc=job("race", 16),
            submitted=old.ended or 0,
        )
        runner.submitted(spec_of(new), new.seq)
        runner.cancelled("race", old.seq)
    got = wait_for(lambda: (j := c.get("/v1/jobs/race").json())["status"] == "running" and j, what="the new run")
    assert isinstance(got, dict) and got["run"] == new.seq
    assert c.get("/v1/cluster").json()["gpusAllocated"] == 16  # the old run's 8 GPUs were freed
    with runner.reading() as lv:
        assert lv.specs["race"].total_gpus == 16
    assert [r.status for r in store.jobs()] == ["cancelled", "running"]
    assert store.check() == []


def test_a_tenant_is_not_told_about_another_tenants_job_of_the_name(secured: LiveService) -> None:
    a, b = secured.client(TEAM_A), secured.client(TEAM_B)
    assert b.post("/v1/jobs", json=job("shared-name", queue="team-b")).status_code == 201
    r = a.post("/v1/jobs", json=job("shared-name"))
    assert r.status_code == 409
    assert (
        r.json()["detail"]
        == "a job named 'shared-name' is pending or running in a queue you cannot use: pick another name"
    )


def test_restart_keeps_every_run_of_a_name(tmp_path: Path) -> None:
    cfg = ServiceConfig(data_dir=tmp_path / "data", cluster=small_cluster(), speed=1.0, interval_s=0.01)
    with serve_in_thread(cfg) as first:
        c = first.client()
        for _ in range(2):  # two runs cancelled, the third running
            c.post("/v1/jobs", json=job("rerun", 8))
            wait_for(lambda: c.get("/v1/jobs/rerun").json()["status"] == "running", what="running")
            c.delete("/v1/jobs/rerun")
        c.post("/v1/jobs", json=job("rerun", 8))
        wait_for(lambda: c.get("/v1/jobs/rerun").json()["status"] == "running", what="the third run")
        before = c.get("/v1/jobs").json()["items"]
        events_before = c.get("/v1/jobs/rerun/events").json()
    with serve_in_thread(cfg) as second:
        c = second.client()
        after = c.get("/v1/jobs").json()["items"]
        assert [(j["run"], j["status"]) for j in after] == [(j["run"], j["status"]) for j in before]
        assert [j["status"] for j in after] == ["cancelled", "cancelled", "running"]
        assert second.svc.recovered == {"running": 1, "pending": 0}  # rebuilt from the active run only
        latest = c.get("/v1/jobs/rerun").json()
        assert latest["run"] == before[-1]["run"] and latest["earlierRunCount"] == 2
        assert c.get("/v1/jobs/rerun/events").json() == events_before
        assert c.get("/v1/cluster").json()["gpusAllocated"] == 8
        assert c.post("/v1/jobs", json=job("rerun", 8)).status_code == 409
    assert Store(f"sqlite:///{cfg.data_dir / 'rackscale.db'}").check() == []


# ---------------------------------------------------------------------- pending reasons
def test_a_reservation_says_when_as_a_clock_time(service: LiveService) -> None:
    c = service.client()
    day = 86400.0  # the racks free up in a day of the service clock (86 s of the test's at speed 1000)
    for n in ("fill-1", "fill-2"):
        c.post("/v1/jobs", json=job(n, 72, durationEstimateSeconds=day))
    wait_for(lambda: c.get("/v1/cluster").json()["running"] == 2, what="the cluster full")
    c.post("/v1/jobs", json=job("big", 72, topology={"required": "rack"}))
    got = wait_for(
        lambda: (j := c.get("/v1/jobs/big").json())["reason"] == "WaitingForReservation" and j, what="a reservation"
    )
    assert isinstance(got, dict)
    message = got["message"]
    assert "t=" not in message and "[" not in message, message
    # e.g. "rack(s) r000 are reserved for it from 2026-12-02 14:05 UTC, in 23 h 59 min; smaller jobs ..."
    assert re.search(r"rack\(s\) [a-z0-9-]+ are reserved for it from (\d{4}-\d\d-\d\d )?\d\d:\d\d UTC, in ", message), (
        message
    )
    assert re.search(r", in (23 h \d+ min|1 d); ", message), message
    # The page and describe read this message; the list says the same
    listed = {j["name"]: j for j in c.get("/v1/jobs?status=pending").json()["items"]}
    assert "UTC, in " in listed["big"]["message"]


NOON = 1796212800.0  # 2026-12-02 12:00:00 UTC
# (at, now, what the API says): the service clock in UTC; the date only when it is another day than now's
CLOCK_TIMES = [
    pytest.param(NOON + 7800, NOON, "14:10 UTC, in 2 h 10 min", id="later-today"),
    pytest.param(NOON - 300, NOON, "11:55 UTC, 5 min ago", id="earlier-today"),
    pytest.param(NOON + 86400 + 3600, NOON, "2026-12-03 13:00 UTC, in 1 d 1 h", id="tomorrow"),
    pytest.param(NOON - 3 * 86400, NOON, "2026-11-29 12:00 UTC, 3 d ago", id="days-ago"),
    pytest.param(NOON + 30, NOON, "12:00 UTC, in 30 s", id="seconds"),
    pytest.param(NOON, NOON, "12:00 UTC, now", id="now"),
]


@pytest.mark.parametrize(("at", "now", "says"), CLOCK_TIMES)
def test_times_in_messages_read_as_utc_clock_times(at: float, now: float, says: str) -> None:
    assert say_time(at, now) == says


def test_a_time_no_calendar_holds_is_said_in_seconds() -> None:
    assert clock_time(1e30, NOON).endswith(" s")


def test_an_llm_job_the_cluster_can_hold_is_taken(service: LiveService) -> None:
    body = {"name": "llm-1", "kind": "training", "gpus": 8, "llm": {"model": "llama-3.1-8b", "tp": 8}}
    r = service.client().post("/v1/jobs", json=body)
    assert r.status_code == 201, r.text


@pytest.mark.parametrize(
    ("llm", "sizes", "status"),
    [
        pytest.param({"model": "llama-3.1-8b"}, {"minGpus": 4, "maxGpus": 16}, 201, id="elastic-llm-taken"),
        pytest.param({"model": "llama-3.1-8b", "dp": 8}, {"minGpus": 4}, 422, id="dp-fixes-the-size"),
        pytest.param({"model": "llama-3.1-8b\u0000"}, {"minGpus": 4}, 422, id="nul-in-the-model"),
        pytest.param({"model": "\ud800"}, {"maxGpus": 16}, 422, id="lone-surrogate-model"),
        pytest.param({"model": "llama-3.1-8b"}, {"minGpus": 10**30}, 422, id="huge-minimum"),
    ],
)
def test_elastic_llm_jobs_are_taken_or_refused_naming_the_field(
    service: LiveService, llm: dict[str, object], sizes: dict[str, object], status: int
) -> None:
    body = json.dumps({"name": "el", "kind": "training", "gpus": 8, "llm": llm, **sizes}).encode()
    r = service.client().post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    if status == 422:
        assert any(p["loc"][:2] == ["body", "llm"] or p["loc"][1] in sizes for p in r.json()["detail"]), r.text


def test_a_million_gpu_elastic_llm_job_is_taken_and_the_service_goes_on(service: LiveService) -> None:
    """Its plan search (a million GPUs: 14,564 racks laid out per plan) runs on the API's thread and the
    host's without stalling either; the job then fails for the cluster's size, with the reason."""
    c = service.client()
    huge = {"name": "huge", "kind": "training", "gpus": 1_048_576, "minGpus": 1, "maxGpus": 1_048_576}
    r = c.post("/v1/jobs", json={**huge, "llm": {"model": "llama-3.1-405b"}})
    assert r.status_code == 201, r.text
    assert c.post("/v1/jobs", json={"name": "small", "kind": "training", "gpus": 1}).status_code == 201
    wait_for(lambda: c.get("/v1/jobs/small").json()["status"] == "running", what="the small job runs")
    # it cannot run here even at the fewest ranks that fit HBM (256 GPUs of 405B): it fails, saying so
    got = wait_for(lambda: (j := c.get("/v1/jobs/huge").json())["status"] == "failed" and j, what="failed")
    assert isinstance(got, dict) and "needs 256 GPUs but the cluster has 144" in got["message"], got


def test_a_stored_llm_job_the_cluster_cannot_hold_fails_with_the_reason(tmp_path: Path) -> None:
    """Past the API's check (stored before it, or on another cluster): the shared host fails it on arrival
    and the store hears so at the next cycle; the other job runs."""
    cfg = ServiceConfig(data_dir=tmp_path / "data", cluster=small_cluster(), speed=1.0, interval_s=0.01)
    cfg.data_dir.mkdir(parents=True)
    store = Store(f"sqlite:///{cfg.data_dir}/rackscale.db")
    big = {"name": "big", "kind": "training", "gpus": 1, "llm": {"model": "llama-3.1-405b"}}
    store.insert_job(name="big", queue="default", kind="training", gpus=1, priority=0, doc=big, submitted=1.0)
    ok = {"name": "ok", "kind": "training", "gpus": 8}
    store.insert_job(name="ok", queue="default", kind="training", gpus=8, priority=0, doc=ok, submitted=1.0)
    store.close()
    with serve_in_thread(cfg) as svc:
        c = svc.client()
        got = wait_for(lambda: (j := c.get("/v1/jobs/big").json())["status"] == "failed" and j, what="failed")
        assert isinstance(got, dict) and got["reason"] == "Unrunnable" and "does not train on 1" in got["message"]
        wait_for(lambda: c.get("/v1/jobs/ok").json()["status"] == "running", what="the other job runs")
