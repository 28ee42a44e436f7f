"""The service's front (service/front.py): a submission that goes straight from the request guard to its
handler gets, byte for byte, what it got through FastAPI's route (status, headers, body), and the store
ends the same; every other request is FastAPI's.

Two services on equal stores and a hand clock get the same requests in turn: one through the app as
served (the guard, then ``SubmitRoute``), the other with the front reduced to the guard, so that
``POST /v1/jobs`` goes through FastAPI's middlewares and router to the route. The hostile requests of
test_security.py run against the served app (uvicorn) as before.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.service.conftest import HandClock, small_cluster

from rackscale.service.app import Service, ServiceConfig, build_service
from rackscale.service.front import ServiceApp
from rackscale.service.guard import RequestGuard

ADMIN, TEAM_A, SCRAPE = "admin-token-0123456789abcdef", "team-a-token-0123456789abcdef", "scrape-token-0123456789ab"
TOKENS = f"""
tokens:
  - {{name: ops, role: admin, token: {ADMIN}}}
  - {{name: team-a, role: tenant, queues: [team-a], maxPriority: 100, token: {TEAM_A}}}
  - {{name: prometheus, role: scrape, token: {SCRAPE}}}
"""
K8S_JOB = json.dumps(
    {
        "apiVersion": "rackscale.io/v1",
        "kind": "Job",
        "metadata": {"name": "k1"},
        "spec": {"kind": "training", "gpus": 4},
    }
).encode()
HOST = (b"host", b"127.0.0.1:8080")
CT = (b"content-type", b"application/json")


def auth(token: str) -> tuple[bytes, bytes]:
    return (b"authorization", f"Bearer {token}".encode())


def job(name: str, **extra: Any) -> bytes:
    return json.dumps({"name": name, "kind": "training", "gpus": 8, **extra}).encode()


@dataclass(frozen=True)
class Call:
    """One request: ``chunks`` is the body as the client's reads bring it (no Content-Length unless
    ``headers`` has one); ``disconnect``: the client goes away after them."""

    id: str
    headers: tuple[tuple[bytes, bytes], ...]
    chunks: tuple[bytes, ...] = ()
    path: str = "/v1/jobs"
    method: str = "POST"
    root_path: str = ""
    disconnect: bool = False


def sized(token: str | None, body: bytes, *more: tuple[bytes, bytes]) -> tuple[tuple[bytes, bytes], ...]:
    """The usual head: Host, Content-Type, Content-Length, Authorization (when given), and ``more``."""
    head = [HOST, CT, (b"content-length", str(len(body)).encode()), *more]
    return tuple(head + ([auth(token)] if token else []))


CALLS = [
    Call("201 admin", sized(ADMIN, job("a1")), (job("a1"),)),
    Call("201 tenant, default queue", sized(TEAM_A, job("t1")), (job("t1"),)),
    Call("201 Kubernetes-style", sized(ADMIN, K8S_JOB), (K8S_JOB,)),
    Call(
        "201 body in three reads, chunked",
        (HOST, CT, auth(ADMIN), (b"transfer-encoding", b"chunked")),
        (job("c1")[:5], job("c1")[5:20], job("c1")[20:]),
    ),
    Call("409 name taken", sized(ADMIN, job("a1")), (job("a1"),)),
    Call("409 name taken by another tenant", sized(TEAM_A, job("a1")), (job("a1"),)),
    Call("401 no token", sized(None, job("x1")), (job("x1"),)),
    Call("401 malformed", sized(None, job("x1"), (b"authorization", b"Basic abc")), (job("x1"),)),
    Call("401 unknown token", sized("nope-0123456789abcdef", job("x1")), (job("x1"),)),
    Call("403 scrape token", sized(SCRAPE, job("x1")), (job("x1"),)),
    Call("403 queue", sized(TEAM_A, job("x1", queue="other")), (job("x1", queue="other"),)),
    Call("403 priority ceiling", sized(TEAM_A, job("x1", priority=101)), (job("x1", priority=101),)),
    Call(
        "403 priority class",
        sized(TEAM_A, job("x1", priorityClassName="high-priority")),
        (job("x1", priorityClassName="high-priority"),),
    ),
    Call("413 declared", sized(ADMIN, b"x" * 70_000), (b"x" * 70_000,)),
    Call("413 streamed", (HOST, CT, auth(ADMIN)), (b'{"name": "' + b"a" * 40_000, b"a" * 40_000 + b'"}')),
    Call(
        "415 text/plain",
        (HOST, (b"content-type", b"text/plain"), (b"content-length", b"20"), auth(ADMIN)),
        (b'{"name": "a", "x": 1}',),
    ),
    Call("403 cross-origin", sized(ADMIN, job("x1"), (b"origin", b"http://evil.example")), (job("x1"),)),
    Call(
        "421 rebinding",
        tuple((b"host", b"evil.example") if h == HOST else h for h in sized(ADMIN, job("x1"))),
        (job("x1"),),
    ),
    Call("422 not JSON", sized(ADMIN, b"{nope"), (b"{nope",)),
    Call("422 not UTF-8", sized(ADMIN, b'{"name": "\xff"}'), (b'{"name": "\xff"}',)),
    Call("422 nested too deeply", sized(ADMIN, b"[" * 1000 + b"]" * 1000), (b"[" * 1000 + b"]" * 1000,)),
    Call("422 not an object", sized(ADMIN, b"[1, 2]"), (b"[1, 2]",)),
    Call("422 empty body", sized(ADMIN, b""), ()),
    Call(
        "422 spec problems",
        sized(ADMIN, job("Bad Name!", gpus=7, gpusPerWorker=4)),
        (job("Bad Name!", gpus=7, gpusPerWorker=4),),
    ),
    Call("422 unknown field", sized(ADMIN, job("x1", gpuz=3)), (job("x1", gpuz=3),)),
    Call("client gone mid-body", (HOST, CT, auth(ADMIN), (b"content-length", b"100")), (b'{"na',), disconnect=True),
    # Not the submission route: FastAPI's either way.
    Call("GET /v1/jobs", (HOST, auth(ADMIN)), method="GET"),
    Call("PUT /v1/jobs", sized(ADMIN, job("x1")), (job("x1"),), method="PUT"),
    Call("POST /v1/jobs/", sized(ADMIN, job("x1")), (job("x1"),), path="/v1/jobs/"),
    Call("POST under a root path", sized(ADMIN, job("r1")), (job("r1"),), path="/api/v1/jobs", root_path="/api"),
]


async def call(app: Any, c: Call) -> tuple[int | None, list[tuple[bytes, bytes]], bytes, str | None]:
    """Status, headers and body of the reply (None: none was sent), and the exception the app raised."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": c.method,
        "scheme": "http",
        "path": c.path,
        "raw_path": c.path.encode(),
        "root_path": c.root_path,
        "query_string": b"",
        "headers": list(c.headers),
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
        "state": {},
    }
    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": b, "more_body": c.disconnect or i < len(c.chunks) - 1}
        for i, b in enumerate(c.chunks)
    ] or [{"type": "http.request", "body": b"", "more_body": False}]
    if c.disconnect:
        messages.append({"type": "http.disconnect"})

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await asyncio.sleep(3600)  # pragma: no cover
        raise AssertionError

    sent: list[dict[str, Any]] = []

    async def send(m: dict[str, Any]) -> None:
        sent.append(m)

    raised = None
    try:
        await app(scope, receive, send)
    except Exception as e:
        raised = type(e).__name__
    start = next((m for m in sent if m["type"] == "http.response.start"), None)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return (start["status"] if start else None), list(start["headers"]) if start else [], body, raised


def make(path: Path) -> Service:
    tokens = path / "tokens.yaml"
    path.mkdir()
    tokens.write_text(TOKENS)
    svc = build_service(
        ServiceConfig(data_dir=path / "data", cluster=small_cluster(1), tokens_file=tokens), start=False
    )
    svc.ctx.runner.clock = HandClock()  # type: ignore[assignment]
    return svc


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Service, Service]]:
    served, through = make(tmp_path / "served"), make(tmp_path / "through")
    app = through.app
    assert isinstance(app, ServiceApp) and isinstance(app.front, RequestGuard)
    app.front = RequestGuard(app.framework, hosts=app.front.hosts)  # no SubmitRoute: FastAPI's route
    yield served, through
    served.close()
    through.close()


def rows(svc: Service) -> list[tuple[Any, ...]]:
    return [(r.seq, r.name, r.queue, r.status, r.priority, r.doc) for r in svc.ctx.store.jobs(limit=10**6)]


def test_a_submission_gets_what_fastapis_route_answers_byte_for_byte(pair: tuple[Service, Service]) -> None:
    served, through = pair

    async def run() -> list[tuple[str, Any, Any]]:
        out = []
        for c in CALLS:
            out.append((c.id, await call(served.app, c), await call(through.app, c)))
        return out

    for what, got, want in asyncio.run(run()):
        assert got == want, what
    answers = {what: got for what, got, _ in asyncio.run(run())}  # the same calls again: all names taken now
    assert answers["201 admin"][0] == 409
    assert rows(served) == rows(through) and len(rows(served)) == 5  # a1, t1, k1, c1, r1


def test_the_answers_are_the_apis(pair: tuple[Service, Service]) -> None:
    """What the table above compares is what the API documents (docs/security.md, docs/service.md)."""
    served, _ = pair
    got = {c.id: asyncio.run(call(served.app, c)) for c in CALLS}
    status = {k: v[0] for k, v in got.items()}
    assert status["201 admin"] == status["201 Kubernetes-style"] == status["201 body in three reads, chunked"] == 201
    assert status["409 name taken"] == 409 and status["401 no token"] == 401
    assert status["403 priority ceiling"] == status["403 priority class"] == 403 and status["413 streamed"] == 413
    assert status["415 text/plain"] == 415 and status["421 rebinding"] == 421
    assert got["client gone mid-body"][2:] == (b"Internal Server Error", "ClientDisconnect")  # Starlette's way
    assert status["POST /v1/jobs/"] == 307 and status["PUT /v1/jobs"] == 405
    assert status["POST under a root path"] == 201
    reply = json.loads(got["201 admin"][2])
    assert (reply["name"], reply["status"], reply["run"], reply["spec"]["name"]) == ("a1", "pending", 1, "a1")
    assert (b"content-type", b"application/json") in got["201 admin"][1]
    problems = json.loads(got["422 spec problems"][2])["detail"]
    assert [p["loc"] for p in problems] == [["body", "name"]] and problems[0]["fix"]
    assert ("www-authenticate", "Bearer") in [(k.decode(), v.decode()) for k, v in got["401 no token"][1]]


def test_a_store_that_cannot_write_and_a_bug_answer_alike(pair: tuple[Service, Service]) -> None:
    """503 with Retry-After while the runner cannot commit; a bug in the handler is Starlette's plain 500,
    and the exception goes on to the server (which logs it)."""
    served, through = pair
    c = Call("201", sized(ADMIN, job("b1")), (job("b1"),))
    for svc in pair:
        svc.ctx.runner.unhealthy = "the disk is full (fix: free space)"
    got, want = asyncio.run(call(served.app, c)), asyncio.run(call(through.app, c))
    assert got == want and got[0] == 503 and (b"retry-after", b"5") in got[1]

    def broken(**_kw: Any) -> Any:
        raise RuntimeError("a bug")

    for svc in pair:
        svc.ctx.runner.unhealthy = None
        svc.ctx.store.insert_job_later = broken  # type: ignore[method-assign]
    got, want = asyncio.run(call(served.app, c)), asyncio.run(call(through.app, c))
    assert got == want == (500, got[1], b"Internal Server Error", "RuntimeError")
