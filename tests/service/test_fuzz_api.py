"""Schemathesis over every operation of the service's OpenAPI spec, in-process (ASGI), bounded.

Three passes, each on its own service (runner started, SQLite in a temp dir): auth off (``--no-auth``);
auth on without a valid token (every /v1 answer must be 401); auth on with a tenant's token. Checks: never
a 5xx, and responses conform to the schema where one is declared. After each pass the store is consistent
(``Store.check()``) and the service still answers.

Every free-form string of the spec (no pattern, enum or format of its own) is drawn from a strategy that
mixes in what a hostile client sends: NUL, lone surrogates, C0/C1 controls, DEL and bidi overrides.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from tests.service.conftest import small_cluster

with warnings.catch_warnings():  # starlette deprecates its TestClient over httpx (wants httpx2)
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from rackscale.service.app import Service, ServiceConfig, build_service
from rackscale.service.store import Store

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance, status_code_conformance]
BASIC = [not_a_server_error, content_type_conformance]
# Derandomized: the same cases every run. A longer exploration (2026-12-05: max_examples=400, random seeds,
# every pass) found no 5xx and no schema violation; it needs the lone surrogates left out of
# HOSTILE_FORMAT, since schemathesis' negative mode checks each drawn body with jsonschema_rs, which cannot
# encode one (UnicodeEncodeError while generating the case: a limit of the harness, not of the service).
FUZZ = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
    derandomize=True,
)
TENANT_TOKEN = "tenant-token-0123456789abcdef"
ADMIN_TOKEN = "admin-token-0123456789abcdef"
TOKENS_YAML = f"""
tokens:
  - name: ops
    role: admin
    token: "{ADMIN_TOKEN}"
  - name: team-a
    role: tenant
    queues: [team-a, team-a-batch]
    token: "{TENANT_TOKEN}"
"""


def _service(tmp: Path, *, auth: bool) -> Iterator[Service]:
    tokens = None
    if auth:
        tokens = tmp / "tokens.yaml"
        tokens.write_text(TOKENS_YAML)
    svc = build_service(
        ServiceConfig(
            data_dir=tmp / "data",
            cluster=small_cluster(),
            speed=1000.0,
            interval_s=0.01,
            tokens_file=tokens,
            no_auth=not auth,
            allowed_hosts=("testserver",),  # the test client's Host
        )
    )
    try:
        yield svc
    finally:
        svc.close()


@pytest.fixture(scope="module")
def open_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    yield from _service(tmp_path_factory.mktemp("fuzz-open"), auth=False)


@pytest.fixture(scope="module")
def auth_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    yield from _service(tmp_path_factory.mktemp("fuzz-auth"), auth=True)


HOSTILE_FORMAT = "rackscale-hostile-text"  # for JSON bodies: a lone surrogate travels as "\ud800"
HOSTILE_URL_FORMAT = "rackscale-hostile-url-text"  # for paths and queries, which carry bytes: no surrogates
_HOSTILE_CHARS = ["\x00", "\x1b", "\x07", "\r", "\x7f", "\x9b", "\u202e", "\u2066", "\n"]
_SURROGATES = ["\ud800", "\udfff"]


def _hostile(chars: list[str]) -> st.SearchStrategy[str]:
    return st.lists(st.one_of(st.sampled_from(chars), st.characters(codec="utf-8")), min_size=1, max_size=20).map(
        "".join
    )


schemathesis.openapi.format(HOSTILE_FORMAT, _hostile(_HOSTILE_CHARS + _SURROGATES))
schemathesis.openapi.format(HOSTILE_URL_FORMAT, _hostile(_HOSTILE_CHARS))


def _hostile_strings(node: Any, fmt: str) -> None:
    """Give every free-form string schema a hostile format (those with a pattern, enum or format keep it)."""
    if isinstance(node, dict):
        if node.get("type") == "string" and not {"pattern", "enum", "format", "const"} & set(node):
            node["format"] = fmt
        for value in node.values():
            _hostile_strings(value, fmt)
    elif isinstance(node, list):
        for value in node:
            _hostile_strings(value, fmt)


def _openapi() -> dict[str, Any]:
    """The service's OpenAPI document (from a service that is built but not started), hostile strings in."""
    with tempfile.TemporaryDirectory(prefix="rackscale-openapi-") as tmp:
        svc = build_service(ServiceConfig(data_dir=Path(tmp), cluster=small_cluster()), start=False)
        try:
            doc = svc.app.openapi()
        finally:
            svc.close()
    for ops in doc["paths"].values():  # requests only: the responses' schemas stay as the service declares them
        for op in ops.values():
            _hostile_strings(op.get("requestBody"), HOSTILE_FORMAT)
            _hostile_strings(op.get("parameters"), HOSTILE_URL_FORMAT)
    return doc


# Loaded from the document, not with schemathesis.pytest.from_fixture: its lazy loader reads
# `request.node._nodeid`, which pytest 9.2 no longer has. The app each test calls is passed as `app=`.
api = schemathesis.openapi.from_dict(_openapi())


def _consistent(svc: Service) -> None:
    assert svc.ctx.runner.problem is None
    assert svc.ctx.runner.errors == 0, "the runner raised while the fuzzer ran (see the log)"
    store = Store(svc.ctx.store.url)
    try:
        assert store.check() == []
    finally:
        store.close()
    with TestClient(svc.app) as client:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"} if svc.ctx.tokens is not None else {}
        assert client.get("/v1/jobs", headers=headers).status_code == 200  # every list page still answers
        assert client.get("/readyz").status_code == 200
        assert client.get("/v1/cluster", headers=headers).status_code == 200
        ok = client.post(
            "/v1/jobs",
            json={"name": "after-fuzz", "kind": "training", "gpus": 1, "queue": "team-a"},
            headers=headers,
        )
        assert ok.status_code in (201, 409), ok.text


def _call_and_check(case: Any, app: Any, headers: dict[str, str] | None = None) -> Any:
    response = case.call(app=app, headers=headers)
    wrong_method = case.method.upper() != case.operation.method.upper()
    case.validate_response(response, checks=BASIC if wrong_method else CHECKS, headers=headers)
    return response


# ------------------------------------------------------------------------------------------ auth off
@api.parametrize()
@FUZZ
def test_fuzz_auth_off(case: Any, open_service: Service) -> None:
    _call_and_check(case, open_service.app)


def test_store_consistent_after_fuzz_auth_off(open_service: Service) -> None:
    _consistent(open_service)


# ------------------------------------------------------------------------------------------ auth on
@api.parametrize()
@FUZZ
def test_fuzz_auth_on_without_token_is_401(case: Any, auth_service: Service) -> None:
    # Whatever Authorization header the fuzzer makes up (or none), it is not a valid token.
    headers = dict(case.headers or {})
    auth = str(headers.get("authorization", headers.get("Authorization", "")))
    assert TENANT_TOKEN not in auth and ADMIN_TOKEN not in auth
    response = _call_and_check(case, auth_service.app)
    # A method the path does not have is refused by the router (405) before auth runs: no data either way.
    expected = {401 if case.method.upper() == case.operation.method.upper() else 405}
    sent = {k.lower(): v for k, v in (response.request.headers or {}).items()}
    if case.method.upper() in ("POST", "PUT", "PATCH", "DELETE") and not str(
        sent.get("content-type", "")
    ).lower().startswith("application/json"):
        expected.add(415)  # a body that is not JSON is refused by the guard, before auth: no data either way
    if "%2F" in case.formatted_path.upper():
        expected.add(404)  # an encoded "/" in a path parameter matches no route: refused before auth too
    assert response.status_code in expected, (
        f"{case.method} {case.formatted_path}: {response.status_code} {response.text}"
    )


@api.parametrize()
@FUZZ
def test_fuzz_auth_on_tenant_token(case: Any, auth_service: Service) -> None:
    _call_and_check(case, auth_service.app, headers={"Authorization": f"Bearer {TENANT_TOKEN}"})


def test_store_consistent_after_fuzz_auth_on(auth_service: Service) -> None:
    _consistent(auth_service)


# ------------------------------------------------------------------------------------------ spec bugs found
def test_errors_are_documented_as_the_service_sends_them(open_service: Service) -> None:
    """422 is the service's {detail: [{loc, msg, fix}]} everywhere (not FastAPI's default), and the 404 of an
    unknown ?rack= is declared (both were found by this fuzzer)."""
    doc = open_service.app.openapi()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            ref = op["responses"].get("422", {}).get("content", {}).get("application/json", {}).get("schema", {})
            if ref:
                assert ref.get("$ref", "").endswith("/ErrorOut"), (method, path, ref)
    with TestClient(open_service.app) as client:
        r = client.get("/v1/jobs?limit=0")
        assert r.status_code == 422 and set(r.json()["detail"][0]) == {"loc", "msg", "fix"}
        assert client.get("/v1/nodes?rack=no-such-rack").status_code == 404
    assert "404" in doc["paths"]["/v1/nodes"]["get"]["responses"]
