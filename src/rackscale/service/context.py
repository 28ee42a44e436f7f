"""What the REST API (:mod:`~rackscale.service.api`) and the web page (:mod:`~rackscale.service.web`) both
stand on: the :class:`ServiceContext` they serve from, :class:`HttpProblem` (an error reply), and
:func:`authenticate` (who is calling). A module of its own so that neither of the two imports the other for
it: the API mounts the page, and the page only needs these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rackscale.model.errors import RackscaleError
from rackscale.service.auth import ANONYMOUS, Principal, TokenTable

if TYPE_CHECKING:
    # Types only: the context is built by rackscale.service.app, which imports them all anyway.
    from rackscale.service.metrics import Metrics
    from rackscale.service.runner import Runner
    from rackscale.service.store import Store

DEFAULT_MAX_BODY = 64 * 1024


class HttpProblem(RackscaleError):
    """An error reply: ``status``, the JSON ``{"detail": detail}`` body, and extra ``headers``."""

    def __init__(self, status: int, detail: Any, headers: dict[str, str] | None = None) -> None:
        self.status, self.detail, self.headers = status, detail, headers


@dataclass(slots=True)
class ServiceContext:
    """What the routes serve from: the store, the runner (and the live cluster it drives), the options."""

    store: Store
    runner: Runner
    backend: str
    tokens: TokenTable | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY
    metrics: Metrics | None = None  # None: /metrics answers 404 (library use without Prometheus)
    web_dir: str | None = None
    # Host header names accepted (rackscale.service.guard); None: no request guard (library use only).
    allowed_hosts: frozenset[str] | None = None
    docs: bool = False  # /docs and /redoc load their scripts from a CDN: off unless asked for


def authenticate(ctx: ServiceContext, authorization: str | None, *, metrics: bool = False) -> Principal:
    """Who is calling: anyone is an admin with auth off (--no-auth); else a known bearer token, or 401.
    A scrape token is good for /metrics only (``metrics``)."""
    if ctx.tokens is None:
        return ANONYMOUS
    bad = {"WWW-Authenticate": "Bearer"}
    if not authorization:
        raise HttpProblem(401, "missing bearer token (send 'Authorization: Bearer TOKEN')", bad)
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise HttpProblem(401, "malformed Authorization header (expected 'Bearer TOKEN')", bad)
    who = ctx.tokens.lookup(token.strip())
    if who is None:
        raise HttpProblem(401, "unknown token", bad)
    if who.role == "scrape" and not metrics:
        raise HttpProblem(403, f"token {who.name!r} is a scrape token: it may read /metrics only")
    return who
