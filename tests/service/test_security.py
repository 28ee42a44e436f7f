"""The service against hostile input and hostile tenants (docs/security.md), one table row per attack class.

Every row asserts the status code, the message, and that nothing else moved: the store holds the same
rows, and another tenant's running job is still running on the same GPUs. The service runs for real
(uvicorn on loopback, SQLite, the runner thread); the raw-socket rows speak HTTP by hand, because no
client library would send what they send.

    one rack, r000 (72 GPUs)           team-b's `victim-b` (8 GPUs) runs from the start;
    +--------------------------+       team-a may ask for priority <= 100, team-b for the default (0)
    | victim-b | ... free ...  |
    +--------------------------+
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.service.conftest import LiveService, serve_in_thread, small_cluster, wait_for

from rackscale.service import http as service_http
from rackscale.service.app import ServiceConfig

ADMIN, TEAM_A, TEAM_B, SCRAPE = (
    "admin-token-0123456789abcdef",
    "team-a-token-0123456789abcdef",
    "team-b-token-0123456789abcdef",
    "scrape-token-0123456789abcdef",
)
TOKENS = f"""
tokens:
  - {{name: ops, role: admin, token: {ADMIN}}}
  - {{name: team-a, role: tenant, queues: [team-a], maxPriority: 100, token: {TEAM_A}}}
  - {{name: team-b, role: tenant, queues: [team-b], token: {TEAM_B}}}
  - {{name: prometheus, role: scrape, token: {SCRAPE}}}
"""
LONG = 1e7  # a job that outlives the test


def job(name: str, gpus: int = 8, **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "training", "gpus": gpus, "durationEstimateSeconds": LONG, **extra}


@dataclass
class Cluster:
    live: LiveService
    victim: dict[str, Any]  # team-b's running job, as the admin saw it at the start

    def client(self, token: str | None) -> httpx.Client:
        return self.live.client(token)

    @property
    def host(self) -> str:
        return self.live.url.removeprefix("http://")

    def rows(self) -> list[tuple[str, str, str]]:
        return [(r.name, r.queue, r.status) for r in self.live.svc.ctx.store.jobs(limit=10**6)]

    def assert_untouched(self, before: list[tuple[str, str, str]]) -> None:
        """The store holds what it held, and team-b's job still runs where it ran."""
        assert self.rows() == before
        with self.client(ADMIN) as c:
            now = c.get("/v1/jobs/victim-b").json()
        assert now["status"] == "running" and now["placement"] == self.victim["placement"]
        assert self.live.svc.ctx.runner.errors == 0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    cfg = ServiceConfig(
        data_dir=tmp_path / "data", cluster=small_cluster(1), speed=1000.0, interval_s=0.01, tokens_file=tokens
    )
    with serve_in_thread(cfg) as live:
        with live.client(TEAM_B) as b:
            assert b.post("/v1/jobs", json=job("victim-b")).status_code == 201
        with live.client(ADMIN) as ops:
            victim = wait_for(
                lambda: (j := ops.get("/v1/jobs/victim-b").json())["status"] == "running" and j, what="victim-b"
            )
        assert isinstance(victim, dict)
        yield Cluster(live, victim)


# ----------------------------------------------------------------------------------------- requests
@dataclass(frozen=True)
class Req:
    method: str
    path: str
    status: int
    needle: str
    token: str | None = TEAM_A
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None


JSON_JOB = json.dumps(job("sneaky")).encode()
CT = ("Content-Type", "application/json")
DEEP_DOC = json.dumps({**job("deep"), "x": json.loads("[" * 40 + "]" * 40)}).encode()
REQUEST_ROWS = [
    # A page elsewhere: fetch(url, {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}}).
    Req("POST", "/v1/jobs", 415, "application/json", headers=(("Content-Type", "text/plain"),), body=JSON_JOB),
    Req(
        "POST",
        "/v1/jobs",
        415,
        "application/json",
        headers=(("Content-Type", "application/x-www-form-urlencoded"),),
        body=JSON_JOB,
    ),
    Req("POST", "/v1/jobs", 415, "got none", body=JSON_JOB),
    Req("POST", "/v1/jobs", 401, "missing bearer token", token=None, headers=(CT,), body=JSON_JOB),
    # Cross-site requests carry the attacker's Origin; sandboxed frames and file:// send "null".
    Req("POST", "/v1/jobs", 403, "cross-origin", headers=(("Origin", "http://evil.example"), CT), body=JSON_JOB),
    Req("POST", "/v1/jobs", 403, "cross-origin", headers=(("Origin", "null"), CT), body=JSON_JOB),
    Req("DELETE", "/v1/jobs/victim-b", 403, "cross-origin", token=ADMIN, headers=(("Origin", "http://127.0.0.1:1"),)),
    Req("GET", "/v1/jobs", 403, "cross-origin", headers=(("Origin", "http://localhost:3000"),)),
    # DNS rebinding: evil.example made to resolve to 127.0.0.1 sends its own name as Host.
    Req("GET", "/v1/jobs", 421, "host name 'evil.example'", token=ADMIN, headers=(("Host", "evil.example"),)),
    Req("GET", "/", 421, "host name", token=None, headers=(("Host", "evil.example:8080"),)),
    Req("DELETE", "/v1/jobs/victim-b", 421, "host name", token=ADMIN, headers=(("Host", "rebind.evil.example"),)),
    # Parser abuse: JSON nested 1,000 deep, and a document deeper than any job.
    Req("POST", "/v1/jobs", 422, "nested too deeply", headers=(CT,), body=b"[" * 1000 + b"]" * 1000),
    Req("POST", "/v1/jobs", 422, "nested", headers=(CT,), body=DEEP_DOC),
    Req("POST", "/v1/jobs", 413, "over the limit", headers=(CT,), body=b'{"name": "' + b"a" * 70_000 + b'"}'),
    # A scrape token reads /metrics and nothing else; a tenant cannot read /metrics (queue and service names).
    Req("GET", "/v1/jobs", 403, "scrape token", token=SCRAPE),
    Req("POST", "/v1/jobs", 403, "scrape token", token=SCRAPE, headers=(CT,), body=JSON_JOB),
    Req("GET", "/metrics", 403, "may not read /metrics", token=TEAM_A),
    Req("GET", "/metrics", 401, "missing bearer token", token=None),
    # Names arrive in paths too: a lone surrogate or a NUL there is a 404, never a 500.
    Req("GET", "/v1/jobs/%ED%A0%80", 404, "no job named"),
    Req("DELETE", "/v1/jobs/x%00y", 404, "no job named"),
    Req("GET", "/v1/jobs/%1B%5B2J/events", 404, "no job named"),
    # An encoded "/" would route elsewhere once decoded (DELETE /v1/jobs/%2F was redirected to POST-only
    # /v1/jobs: 405): no name holds one, so 404, before auth.
    Req("DELETE", "/v1/jobs/%2F", 404, "encoded one, %2F"),
    Req("DELETE", "/v1/jobs/%2f%2F%2F", 404, "encoded one", token=None),
    Req("GET", "/v1/jobs/victim-a%2F..%2Fvictim-b/events", 404, "names never hold '/'"),
    # Interactive docs load scripts from a CDN on the dashboard's origin: off by default.
    Req("GET", "/docs", 404, "Not Found", token=None),
]


@pytest.mark.parametrize("row", REQUEST_ROWS, ids=lambda r: f"{r.method} {r.path} {r.status} {r.needle[:20]}")
def test_hostile_requests_get_a_clear_4xx_and_change_nothing(cluster: Cluster, row: Req) -> None:
    before = cluster.rows()
    headers = dict(row.headers)
    if row.token:
        headers["Authorization"] = f"Bearer {row.token}"
    with httpx.Client(base_url=cluster.live.url, timeout=10) as c:
        r = c.request(row.method, row.path, headers=headers, content=row.body)
    assert r.status_code == row.status, r.text
    detail = r.json()["detail"]
    assert row.needle in (detail if isinstance(detail, str) else json.dumps(detail)), detail
    cluster.assert_untouched(before)


def test_the_same_origin_and_the_services_own_names_are_accepted(cluster: Cluster) -> None:
    port = cluster.host.rsplit(":", 1)[1]
    ok = [
        {"Origin": cluster.live.url},  # the page this service serves
        {"Host": f"localhost:{port}"},
        {"Host": f"[::1]:{port}"},
        {"Host": f"10.1.2.3:{port}"},  # an IP literal cannot be a rebinding attack
    ]
    with cluster.client(TEAM_A) as a:
        for i, extra in enumerate(ok):
            r = a.post("/v1/jobs", json=job(f"ok-{i}", 1), headers=extra)
            assert r.status_code == 201, (extra, r.text)
        assert a.get("/v1/jobs", headers={"Origin": cluster.live.url}).status_code == 200


# ----------------------------------------------------------------------------------------- strings
@dataclass(frozen=True)
class Bad:
    doc: dict[str, Any]
    loc: list[str | int]
    needle: str


K8S = {"apiVersion": "rackscale.io/v1", "kind": "Job"}
STRING_ROWS = {
    "nul-in-command": Bad(job("n1", command=["/bin/echo", "a\0b"]), ["body", "command", 1], "NUL"),
    "nul-in-env": Bad(job("n2", env={"A": "x\0"}), ["body", "env", "A"], "NUL"),
    "nul-in-name": Bad(job("n3\0"), ["body", "name"], "NUL"),
    "nul-in-an-unknown-key": Bad({**job("n4"), "x\0y": 1}, ["body", "x\\x00y"], "NUL"),
    "surrogate-in-command": Bad(job("s1", command=["/bin/echo", "\ud800"]), ["body", "command", 1], "lone surrogate"),
    "surrogate-in-env": Bad(job("s2", env={"A": "\udfff"}), ["body", "env", "A"], "lone surrogate"),
    "surrogate-in-label": Bad(
        {**K8S, "metadata": {"name": "s3", "labels": {"team": "\ud800"}}, "spec": {"kind": "batch"}},
        ["body", "metadata", "labels", "team"],
        "lone surrogate",
    ),
    "surrogate-in-annotation": Bad(
        {**K8S, "metadata": {"name": "s4", "annotations": {"note": "hi \ud83d"}}, "spec": {"kind": "batch"}},
        ["body", "metadata", "annotations", "note"],
        "lone surrogate",
    ),
    "surrogate-in-queue": Bad(job("s5", queue="team-a\ud800"), ["body", "queue"], "lone surrogate"),
    "escape-in-command": Bad(job("c1", command=["/bin/echo", "\x1b]0;pwned\x07"]), ["body", "command", 1], "\\x1b"),
    "escape-in-env": Bad(job("c2", env={"A": "\x1b[2J"}), ["body", "env", "A"], "control character"),
    "escape-in-label-value": Bad(
        {**K8S, "metadata": {"name": "c3", "labels": {"a": "b\x07"}}, "spec": {"kind": "batch"}},
        ["body", "metadata", "labels", "a"],
        "not a valid label value",
    ),
    "bidi-in-gpu-model": Bad(job("c4", gpuModels=["GB200\u202e"]), ["body", "gpuModels", 0], "bidirectional"),
    "bidi-in-class": Bad(job("c5", priorityClassName="default\u2066"), ["body", "priorityClassName"], "bidirectional"),
    "name-with-trailing-newline": Bad(job("x\n"), ["body", "name"], "not a valid name"),
    "name-too-long": Bad(job("a" * 254), ["body", "name"], ""),
    "queue-too-long": Bad(job("q1", queue="q" * 254), ["body", "queue"], ""),
    "queue-with-slash": Bad(job("q2", queue="team-a/../team-b"), ["body", "queue"], "not a valid name"),
    "k8s-name-with-newline": Bad(
        {**K8S, "metadata": {"name": "ok\n"}, "spec": {"kind": "batch"}},
        ["body", "metadata", "name"],
        "not a valid name",
    ),
}


@pytest.mark.parametrize("bad", list(STRING_ROWS.values()), ids=list(STRING_ROWS))
def test_hostile_strings_get_422_at_their_field_and_change_nothing(cluster: Cluster, bad: Bad) -> None:
    before = cluster.rows()
    with cluster.client(TEAM_A) as a:
        # json.dumps writes a lone surrogate as the escape "\ud800", which a JSON parser turns back into one.
        r = a.post("/v1/jobs", content=json.dumps(bad.doc), headers={"Content-Type": "application/json"})
        assert r.status_code == 422, r.text
        problems = r.json()["detail"]
        assert any(p["loc"] == bad.loc and bad.needle in p["msg"] for p in problems), problems
        assert a.get("/v1/jobs").status_code == 200  # every list page still answers
    cluster.assert_untouched(before)


HOSTILE = st.sampled_from(
    ["\0", "\ud800", "\udfff", "\x1b", "\x07", "\r", "\x7f", "\x9b", "\u202e", "\u2066", "\n", "\t"]
)
TEXT = st.lists(st.one_of(HOSTILE, st.characters()), max_size=12).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    field=st.sampled_from(
        ["name", "queue", "command", "env-value", "env-name", "gpuModels", "priorityClassName", "label"]
    ),
    text=TEXT,
)
def test_any_string_anywhere_is_a_201_or_a_4xx_and_every_page_still_answers(
    cluster: Cluster, field: str, text: str
) -> None:
    doc: dict[str, Any] = job("fuzz-" + str(abs(hash(text)) % 10**9), 1)
    if field == "command":
        doc["command"] = ["/bin/true", text]
    elif field == "env-value":
        doc["env"] = {"A": text}
    elif field == "env-name":
        doc["env"] = {text: "1"}
    elif field == "gpuModels":
        doc["gpuModels"] = [text]
    elif field == "label":
        doc = {**K8S, "metadata": {"name": doc["name"], "labels": {"k": text}}, "spec": {"kind": "batch"}}
    else:
        doc[field] = text
    with cluster.client(ADMIN) as ops:
        r = ops.post("/v1/jobs", content=json.dumps(doc), headers={"Content-Type": "application/json"})
        assert r.status_code in (201, 409, 422), r.text
        assert ops.get("/v1/jobs").status_code == 200
        if r.status_code == 201:
            assert ops.delete(f"/v1/jobs/{doc.get('name') or doc['metadata']['name']}").status_code == 200


# ----------------------------------------------------------------------------------------- tenants
PRIORITY_ROWS = [
    pytest.param(TEAM_B, {"priority": 1}, "ceiling is 0", id="b-over-its-default-ceiling"),
    pytest.param(TEAM_A, {"priority": 101}, "ceiling is 100", id="a-over-its-ceiling"),
    pytest.param(TEAM_A, {"priority": 2**31 - 1}, "ceiling is 100", id="a-int32-max"),
    pytest.param(TEAM_A, {"priorityClassName": "high-priority"}, "allowed: default, low-priority", id="a-high-class"),
    pytest.param(
        TEAM_B, {"priorityClassName": "high-priority"}, "priorityClassName 'high-priority'", id="b-high-class"
    ),
]


@pytest.mark.parametrize(("token", "extra", "needle"), PRIORITY_ROWS)
def test_a_tenant_cannot_ask_for_a_priority_above_its_ceiling(
    cluster: Cluster, token: str, extra: dict[str, Any], needle: str
) -> None:
    before = cluster.rows()
    with cluster.client(token) as t:
        r = t.post("/v1/jobs", json=job("greedy", 72, **extra))
    assert r.status_code == 403, r.text
    assert needle in r.json()["detail"]
    cluster.assert_untouched(before)
    with cluster.client(ADMIN) as ops:  # an admin may
        assert (
            ops.post("/v1/jobs", json=job("urgent", 1, queue="team-a", priorityClassName="high-priority")).status_code
            == 201
        )


def test_preemption_across_tenants_never_names_the_other_tenants_job(cluster: Cluster) -> None:
    secret = "a-secret-project-name"
    with cluster.client(TEAM_A) as a, cluster.client(TEAM_B) as b:
        # team-b fills the rest of the rack; team-a's whole-rack gang at priority 100 preempts both jobs.
        assert b.post("/v1/jobs", json=job("filler-b", 64)).status_code == 201
        wait_for(lambda: b.get("/v1/jobs/filler-b").json()["status"] == "running", what="filler-b")
        assert a.post("/v1/jobs", json=job(secret, 72, priority=100)).status_code == 201
        wait_for(lambda: a.get(f"/v1/jobs/{secret}").json()["status"] == "running", what="the preemptor")
        seen: list[str] = []
        for name in ("victim-b", "filler-b"):
            events = b.get(f"/v1/jobs/{name}/events").json()["items"]
            assert any(e["type"] == "preempted" for e in events), events
            seen += [e["message"] for e in events]
            seen.append(b.get(f"/v1/jobs/{name}").json()["message"])  # the pending reason while it waits
        seen.append(b.get("/v1/jobs").text)
        seen.append(json.dumps(b.get("/v1/racks/r000").json()))
        preempted = next(m for m in seen if m.startswith("preempted by"))
        assert preempted.startswith("preempted by a job of another queue (priority 100 > 0")
        assert all(secret not in text for text in seen), [t for t in seen if secret in t]
    with cluster.client(ADMIN) as ops:  # the admin sees every name, but the event text is the same for all
        assert secret in ops.get("/v1/jobs").text


# A name is free again once its job ends, for any tenant: "reused" is run by team-b (cancelled), then by
# team-a (cancelled), then by team-b again (active). Who looks at which run, and whose earlier runs it may
# count and list (each run by the queue it ran in).
EARLIER_ROWS = [
    pytest.param(TEAM_A, 2, [], id="a-its-run-does-not-list-bs-earlier-run"),
    pytest.param(TEAM_B, 3, ["team-b"], id="b-its-latest-lists-its-own-run-not-as"),
    pytest.param(TEAM_B, 1, [], id="b-its-first-run"),
    pytest.param(ADMIN, 3, ["team-a", "team-b"], id="admin-sees-every-run"),
]


@pytest.mark.parametrize(("token", "nth", "owners"), EARLIER_ROWS)
def test_a_reused_name_never_shows_another_tenants_runs_of_it(
    cluster: Cluster, token: str, nth: int, owners: list[str]
) -> None:
    runs: list[int] = []
    for owner in (TEAM_B, TEAM_A, TEAM_B):
        with cluster.client(owner) as c:
            r = c.post("/v1/jobs", json=job("reused", 1))
            assert r.status_code == 201, r.text
            runs.append(r.json()["run"])
            if len(runs) < 3:
                assert c.delete("/v1/jobs/reused").json()["status"] == "cancelled"
    with cluster.client(token) as c:
        got = c.get("/v1/jobs/reused", params={"run": runs[nth - 1]})
        assert got.status_code == 200, got.text
        view = got.json()
    earlier = {runs[0]: "team-b", runs[1]: "team-a"}
    assert view["earlierRunCount"] == len(owners), view
    assert sorted(earlier[e["run"]] for e in view["earlierRuns"]) == owners, view["earlierRuns"]


def test_a_cancel_racing_a_reuse_of_the_name_never_cancels_nor_shows_another_tenants_job(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """team-a cancels its ended job "raced" again; team-b submits "raced" between the API's check (the latest
    run is team-a's) and the store's cancel: team-b's job stays pending, and team-a's reply is its own run."""
    store = cluster.live.svc.ctx.store
    with cluster.client(TEAM_A) as a:
        assert a.post("/v1/jobs", json=job("raced", 1)).status_code == 201
        assert a.delete("/v1/jobs/raced").json()["status"] == "cancelled"
        mine = a.get("/v1/jobs/raced").json()
        cancel = store.cancel

        def reused_meanwhile(name: str, now: float, **kw: Any) -> Any:
            store.insert_job(
                name=name, queue="team-b", kind="training", gpus=1.0, priority=0, doc=job(name, 1), submitted=now
            )
            return cancel(name, now, **kw)

        monkeypatch.setattr(store, "cancel", reused_meanwhile)
        r = a.delete("/v1/jobs/raced")
        monkeypatch.setattr(store, "cancel", cancel)
    assert r.status_code == 200, r.text
    got = r.json()
    assert (got["queue"], got["run"], got["status"]) == ("team-a", mine["run"], "cancelled"), got
    theirs = store.get("raced")
    assert theirs is not None and (theirs.queue, theirs.status) == ("team-b", "pending")


def test_whoami_names_the_token_and_nothing_of_anyone_elses(cluster: Cluster) -> None:
    """The page names who it is signed in as, and who a link's token is before it switches (login CSRF)."""
    seen = {}
    for token in (TEAM_A, TEAM_B, ADMIN, SCRAPE):
        with cluster.client(token) as c:
            r = c.get("/v1/whoami")
        assert r.status_code == 200, r.text
        seen[token] = r.json()
    assert seen[TEAM_A] == {"name": "team-a", "role": "tenant", "queues": ["team-a"], "auth": True}
    assert seen[TEAM_B] == {"name": "team-b", "role": "tenant", "queues": ["team-b"], "auth": True}
    assert seen[ADMIN] == {"name": "ops", "role": "admin", "queues": [], "auth": True}
    assert seen[SCRAPE] == {"name": "prometheus", "role": "scrape", "queues": [], "auth": True}
    with cluster.client(None) as anon:
        assert anon.get("/v1/whoami").status_code == 401
    with cluster.client("nope-0123456789abcdef") as wrong:
        assert wrong.get("/v1/whoami").json()["detail"] == "unknown token"


def test_metrics_are_read_with_a_scrape_or_admin_token(cluster: Cluster) -> None:
    for token in (SCRAPE, ADMIN):
        with cluster.client(token) as c:
            r = c.get("/metrics")
            assert r.status_code == 200 and 'queue="team-b"' in r.text


# A tenant's names become label values (`service`, `queue`): whatever it sends, a scrape stays the series it
# was, one line each (no injected line, no broken quote), or the name is refused before it is stored.
LABEL_ROWS = {
    "newline": ('svc\nrackscale_gpus{state="free"} 1e9', None),
    "quote": ('svc"} 1\nx{a="', None),
    "backslash": ("svc\\", None),
    "10k-characters": ("s" * 10_000, None),
    "longest-name": ("s" * 253, "s" * 253),
    "dots-and-dashes": ("svc-1.a_b", "svc-1.a_b"),
}


@pytest.mark.parametrize(("name", "label"), list(LABEL_ROWS.values()), ids=list(LABEL_ROWS))
def test_a_tenants_names_in_metrics_labels_are_plain_label_values(
    cluster: Cluster, name: str, label: str | None
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    svc = {"name": name, "kind": "inference", "replicas": 1, "gpusPerReplica": 1}
    with cluster.client(TEAM_A) as a:
        r = a.post("/v1/jobs", json=svc)
        assert r.status_code == (201 if label is not None else 422), r.text
        if label is not None:
            wait_for(lambda: a.get(f"/v1/jobs/{name}").json()["status"] == "running", what="the service")
    with cluster.client(SCRAPE) as s:
        text = s.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    services = {x.labels["service"] for x in families["rackscale_inference_tokens_per_second"].samples}
    assert services == ({label} if label is not None else set()), services
    assert all(x.labels.get("queue") in (None, "team-a", "team-b") for f in families.values() for x in f.samples)
    assert all(x.value < 1e9 for x in families["rackscale_gpus"].samples)


# ----------------------------------------------------------------------------------------- the socket
def _raw(url: str, data: bytes, *, read_timeout: float = 10.0) -> bytes:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=read_timeout) as s:
        with contextlib.suppress(OSError):  # the server may close before it has read everything we send
            s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            out += chunk
    return out


# ----------------------------------------------------------------------------------------- reply headers
# (method, path, token, headers, body, status): every kind of reply the API gives, from every layer that
# writes one: the request guard (403, 404, 415, 421), the submission route (201, 413, 422), FastAPI's routing
# and validation (404, 405, 422), a route (200, 401, 403, 404), /metrics, health and the OpenAPI document.
HEADER_ROWS: list[tuple[str, str, str | None, tuple[tuple[str, str], ...], bytes | None, int]] = [
    ("GET", "/v1/jobs", TEAM_A, (), None, 200),
    ("GET", "/v1/jobs/victim-b", ADMIN, (), None, 200),
    ("GET", "/v1/cluster", TEAM_B, (), None, 200),
    ("GET", "/v1/ui/overview?rack=r000", TEAM_A, (), None, 200),
    ("GET", "/v1/whoami", TEAM_A, (), None, 200),
    ("POST", "/v1/jobs", TEAM_A, (CT,), json.dumps(job("headers-a")).encode(), 201),
    ("GET", "/metrics", SCRAPE, (), None, 200),
    ("GET", "/healthz", None, (), None, 200),
    ("GET", "/openapi.json", None, (), None, 200),
    ("GET", "/v1/jobs", None, (), None, 401),
    ("GET", "/v1/jobs", SCRAPE, (), None, 403),
    ("GET", "/v1/jobs/victim-b", TEAM_A, (), None, 404),
    ("GET", "/v1/nope", TEAM_A, (), None, 404),
    ("PUT", "/v1/jobs", TEAM_A, (CT,), b"{}", 405),
    ("GET", "/v1/jobs?limit=0", TEAM_A, (), None, 422),
    ("POST", "/v1/jobs", TEAM_A, (CT,), b"[" * 1000 + b"]" * 1000, 422),
    ("POST", "/v1/jobs", TEAM_A, (CT,), b'{"name": "' + b"a" * 70_000 + b'"}', 413),
    ("POST", "/v1/jobs", TEAM_A, (("Content-Type", "text/plain"),), JSON_JOB, 415),
    ("GET", "/v1/jobs", TEAM_A, (("Origin", "http://evil.example"),), None, 403),
    ("GET", "/v1/jobs", TEAM_A, (("Host", "evil.example"),), None, 421),
    ("DELETE", "/v1/jobs/%2F", TEAM_A, (), None, 404),
]


def test_every_api_reply_carries_nosniff_and_no_store_errors_included(cluster: Cluster) -> None:
    """A JSON reply (an error quoting a hostile name too) is never sniffed as a document, framed or cached:
    before, only the page and its assets said nosniff."""
    with httpx.Client(base_url=cluster.live.url, timeout=10) as c:
        for method, path, token, extra, body, status in HEADER_ROWS:
            headers = dict(extra) | ({"Authorization": f"Bearer {token}"} if token else {})
            r = c.request(method, path, headers=headers, content=body)
            what = f"{method} {path} {dict(extra)}"
            assert r.status_code == status, (what, r.text[:200])
            assert r.headers.get("x-content-type-options") == "nosniff", what
            assert r.headers.get("cache-control") == "no-store", what
            assert r.headers.get("content-security-policy") == "default-src 'none'; frame-ancestors 'none'", what
            assert r.headers.get("x-frame-options") == "DENY", what
            assert r.headers.get("referrer-policy") == "no-referrer", what
            assert len(r.headers.get_list("x-content-type-options")) == 1, what  # added once, never twice
        # The page and its assets keep their own headers (the page's CSP lets its script run; assets may be
        # cached); a missing asset's error says nosniff too.
        page, asset, missing = c.get("/"), c.get("/static/app.js"), c.get("/static/nope.js")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-cache" and page.headers["x-content-type-options"] == "nosniff"
    assert (
        "no-store" not in asset.headers.get("cache-control", "")
        and asset.headers["x-content-type-options"] == "nosniff"
    )
    assert missing.status_code == 404 and missing.headers["x-content-type-options"] == "nosniff"


def test_request_headers_over_the_limit_get_431_and_the_connection_closes(cluster: Cluster) -> None:
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Junk: " + b"a" * (service_http.MAX_HEAD_BYTES + 1024)
    got = _raw(cluster.live.url, head)  # never finished: the server must not wait for the rest
    assert got.startswith(b"HTTP/1.1 431 "), got[:200]
    assert b"request headers over" in got
    assert b"\r\nx-content-type-options: nosniff\r\n" in got.split(b"\r\n\r\n")[0]
    with cluster.client(ADMIN) as ops:  # the service answers everyone else as before
        assert ops.get("/v1/jobs/victim-b").json()["status"] == "running"


def test_a_head_that_never_ends_is_cut_off(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    assert service_http.BoundedHttpToolsProtocol is not None
    monkeypatch.setattr(service_http.BoundedHttpToolsProtocol, "head_timeout_s", 0.5)
    t0 = time.monotonic()
    got = _raw(cluster.live.url, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a", read_timeout=10)
    assert got == b"" and time.monotonic() - t0 < 5  # closed by the server, not by our read timeout


def test_without_a_token_file_a_token_is_generated_and_required(tmp_path: Path) -> None:
    cfg = ServiceConfig(data_dir=tmp_path / "data", cluster=small_cluster(1), speed=1000.0, interval_s=0.01)
    with serve_in_thread(cfg) as live:
        token = live.admin_token
        assert token is not None and len(token) >= 40
        stored = tmp_path / "data" / "admin.token"
        assert stored.read_text().strip() == token and stored.stat().st_mode & 0o777 == 0o600
        with live.client(None) as anon:
            for method, path in (
                ("POST", "/v1/jobs"),
                ("DELETE", "/v1/jobs/x"),
                ("GET", "/v1/jobs"),
                ("GET", "/metrics"),
            ):
                r = anon.request(method, path, json=job("x") if method == "POST" else None)
                assert r.status_code == 401, (method, path, r.text)
            assert anon.get("/healthz").status_code == 200 and anon.get("/").status_code == 200
        with live.client() as admin:
            assert admin.post("/v1/jobs", json=job("mine", 1)).status_code == 201
    # A restart keeps the token (clients keep working); --no-auth is the explicit way out.
    with serve_in_thread(cfg) as again:
        assert again.admin_token == token
    off = ServiceConfig(
        data_dir=tmp_path / "data", cluster=small_cluster(1), speed=1000.0, interval_s=0.01, no_auth=True
    )
    with serve_in_thread(off) as open_live, open_live.client(None) as anon:
        assert open_live.admin_token is None
        assert anon.get("/v1/jobs/mine").status_code == 200
