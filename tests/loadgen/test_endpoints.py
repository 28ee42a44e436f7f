"""The HTTP adapters: what counts as an answer, what is counted as a failure, and what stops a run before
it starts. The responses come from ``httpx.MockTransport`` (each case is one response the adapter must
judge); the real server is in test_loadgen_cli.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import httpx
import pytest

from rackscale.loadgen.endpoints import Api, HttpEndpoint, RequestFailed, Tally, synthetic_samples

Handler = Callable[[httpx.Request], httpx.Response]
OPENAI_OK = {"choices": [{"text": " rack gpu", "index": 0}]}


def endpoint(api: Api, handler: Handler, tally: Tally | None = None) -> HttpEndpoint:
    return HttpEndpoint(
        url="http://model.test/x",
        api=api,
        samples=synthetic_samples(api, 4),
        tally=tally or Tally(),
        model="m" if api is Api.OPENAI else None,
        max_tokens=3,
        transport=httpx.MockTransport(handler),
    )


def answer(status: int, body: object = None, raw: bytes | None = None) -> Handler:
    return lambda _req: httpx.Response(status, content=raw if raw is not None else json.dumps(body).encode())


@pytest.mark.parametrize(
    ("api", "handler", "reason"),
    [
        (Api.OPENAI, answer(200, OPENAI_OK), None),
        (Api.PREDICT, answer(200, {"outputs": [0.1, 0.9]}), None),
        (Api.OPENAI, answer(500, {"error": "boom"}), "HTTP 500"),
        (Api.PREDICT, answer(503, None), "HTTP 503"),
        (Api.PREDICT, answer(200, raw=b"<html>"), "answer is not JSON"),
        (Api.PREDICT, answer(200, {"predictions": [1]}), "answer has no outputs list"),
        (Api.OPENAI, answer(200, {"choices": []}), "answer has no choices"),
        (Api.OPENAI, answer(200, {"choices": [{"message": "x"}]}), "answer's first choice has no text"),
        (Api.OPENAI, answer(200, [1, 2]), "answer has no choices"),
    ],
    ids=[
        "openai-ok",
        "predict-ok",
        "http-500",
        "http-503",
        "not-json",
        "no-outputs",
        "no-choices",
        "no-text",
        "json-list",
    ],
)
def test_one_request_is_judged_and_counted(api: Api, handler: Handler, reason: str | None) -> None:
    tally = Tally()
    e = endpoint(api, handler, tally)
    if reason is None:
        e.send(0)
    else:
        with pytest.raises(RequestFailed) as err:
            e.send(0)
        assert err.value.reason == reason
    got = tally.snapshot()
    assert (got.sent, got.failed, got.reasons) == (
        1,
        0 if reason is None else 1,
        () if reason is None else ((reason, 1),),
    )


def test_transport_errors_and_timeouts_are_counted_by_kind() -> None:
    calls = iter([httpx.ReadTimeout, httpx.ConnectError, httpx.ReadTimeout, httpx.RemoteProtocolError])

    def broken(req: httpx.Request) -> httpx.Response:
        raise next(calls)("no answer", request=req)

    tally = Tally()
    e = endpoint(Api.PREDICT, broken, tally)
    for _ in range(4):
        with pytest.raises(RequestFailed):
            e.send(0)
    got = tally.snapshot()
    assert (got.sent, got.failed) == (4, 4)
    assert got.reasons == (("timeout", 2), ("ConnectError", 1), ("RemoteProtocolError", 1))


@pytest.mark.parametrize(
    ("api", "index", "body"),
    [
        (Api.OPENAI, 1, {"model": "m", "prompt": synthetic_samples(Api.OPENAI, 4)[1], "max_tokens": 3}),
        (Api.PREDICT, 6, {"inputs": synthetic_samples(Api.PREDICT, 4)[2]}),  # 6 wraps round 4 samples
    ],
    ids=["openai", "predict-wraps"],
)
def test_the_request_body_is_the_api_s(api: Api, index: int, body: dict[str, object]) -> None:
    seen: list[dict[str, object]] = []

    def record(req: httpx.Request) -> httpx.Response:
        seen.append(json.loads(req.content))
        return answer(200, OPENAI_OK if api is Api.OPENAI else {"outputs": []})(req)

    endpoint(api, record).send(index)
    assert seen == [body]


@pytest.mark.parametrize(
    ("api", "handler", "says"),
    [
        (Api.PREDICT, answer(200, {"outputs": [1]}), None),
        (Api.PREDICT, answer(500, {}), None),  # left to the run, which counts it
        (Api.PREDICT, answer(404, {}), "HTTP 404 to a predict request: check --endpoint, --api"),
        (Api.OPENAI, answer(400, {}), "HTTP 400 to a openai request: check --endpoint, --api and --model"),
        (Api.OPENAI, answer(200, {"outputs": [1]}), "answer has no choices (is --api openai right?)"),
    ],
    ids=["ok", "server-error", "not-found", "bad-request", "wrong-api"],
)
def test_the_probe_stops_only_what_cannot_work(api: Api, handler: Handler, says: str | None) -> None:
    tally = Tally()
    got = endpoint(api, handler, tally).probe()
    assert (got is None) if says is None else (got is not None and says in got)
    assert tally.snapshot().sent == 0  # the probe is not part of the run's counts


def test_the_tally_is_exact_under_many_threads() -> None:
    tally = Tally()

    def work(k: int) -> None:
        for i in range(500):
            tally.record("HTTP 500" if (i + k) % 5 == 0 else None)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = tally.snapshot()
    assert (got.sent, got.failed) == (4000, 800)


def test_openai_needs_a_model() -> None:
    with pytest.raises(ValueError, match="--model is needed"):
        HttpEndpoint(url="http://x.test/", api=Api.OPENAI, samples=["p"], tally=Tally())
