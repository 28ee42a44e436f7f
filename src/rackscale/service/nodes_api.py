"""Admin routes that take nodes out of service and back: ``POST /v1/nodes/NAME/cordon|drain|uncordon`` and
``POST /v1/racks/NAME/...`` (every node of the rack), body ``{"reason": "...", "grace": "10m"}`` (both
optional; ``grace`` is for a drain: seconds or a duration such as ``90s``, ``10m``, ``1h30m``).

Each node's resulting hold is committed to the store first (a ``meta`` row per held node, ``hold:NAME``,
deleted once uncordoned; an empty value, as an older version wrote, reads as no hold), then handed to the
runner (:meth:`Runner.held`), which applies it in its next step: so an answered request survives a
restart, and :func:`restore_holds` hands the stored holds to the runner again at start-up (a drain whose
grace ran out while the service was down stops its jobs in the first step). The semantics are the host's
(:mod:`rackscale.host.drains`).
"""

# No `from __future__ import annotations` here: FastAPI reads the route signatures at run time.
import asyncio
import contextlib
import json
import threading
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlalchemy.exc import SQLAlchemyError

from rackscale.host.drains import DrainError, HoldOrder, HoldVerb, NodeHold, grace_seconds, merged
from rackscale.model.text import char_name, first_bad_char
from rackscale.service.auth import Principal
from rackscale.service.context import HttpProblem, ServiceContext, authenticate
from rackscale.service.holds_store import encode_hold, hold_key, stored_holds
from rackscale.service.store import StoreUnavailable
from rackscale.service.views import ErrorOut

RETRY_AFTER_S = "5"


class HoldIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field("", max_length=200, description="why (shown in `get nodes` and the drained jobs' events)")
    grace: str | float | None = Field(
        None, description="drain only: how long the jobs may run on after the stop signal (default 0)"
    )

    @field_validator("reason", "grace")
    @classmethod
    def _plain_text(cls, v: object) -> object:
        # Shown in `get nodes`, on the page and in jobs' events: no control, bidi or surrogate character.
        if isinstance(v, str) and (bad := first_bad_char(v)) is not None:
            raise ValueError(f"holds {char_name(bad)}: write plain text")
        return v


class HoldOut(BaseModel):
    node: str
    rack: str
    mode: str | None  # cordoned, draining, drained; None: schedulable
    reason: str | None = None
    since: float | None = None
    deadline: float | None = None


class HoldList(BaseModel):
    verb: str
    items: list[HoldOut]


def restore_holds(ctx: ServiceContext) -> dict[int, NodeHold]:
    """Hand the stored holds to the runner (at start-up, after its recovery restored the running jobs)."""
    holds = stored_holds(ctx.store, [n.name for n in ctx.runner.live.cluster.nodes])
    if holds:
        ctx.runner.held(HoldOrder(tuple(sorted(holds.items()))))
    return holds


def mount_nodes(app: FastAPI, ctx: ServiceContext) -> None:
    """Add the routes; hand the stored holds to the runner."""
    live = ctx.runner.live
    cluster = live.cluster
    node_by_name = {n.name: n.index for n in cluster.nodes}
    node_names = [n.name for n in cluster.nodes]
    rack_by_name = {r.name: r.index for r in cluster.racks}
    # What the store holds, kept here too: a request merges with it under the lock (read, merge, write).
    current = restore_holds(ctx)
    lock = threading.Lock()
    errors: dict[int | str, dict[str, Any]] = {
        403: {"model": ErrorOut, "description": "not an admin token"},
        404: {"model": ErrorOut, "description": "no such node or rack"},
        422: {"model": ErrorOut, "description": "a bad reason or grace"},
        503: {"model": ErrorOut, "description": "the store cannot write now"},
    }

    async def admin(authorization: Annotated[str | None, Header()] = None) -> Principal:
        who = authenticate(ctx, authorization)
        if not who.is_admin:
            raise HttpProblem(403, f"token {who.name!r} may not cordon or drain nodes (an admin token may)")
        return who

    Admin = Annotated[Principal, Depends(admin)]

    def commit(nodes: list[int], verb: HoldVerb, body: HoldIn) -> HoldList:
        try:
            grace = grace_seconds(body.grace) if body.grace is not None else 0.0
        except DrainError as e:
            raise HttpProblem(422, [{"loc": ["body", "grace"], "msg": str(e), "fix": "e.g. 90s, 10m, 1h30m"}]) from e
        if body.grace is not None and verb is not HoldVerb.DRAIN:
            raise HttpProblem(422, [{"loc": ["body", "grace"], "msg": "only a drain has a grace", "fix": "drop it"}])
        with lock:
            # What the store has now, not only what this process wrote: with replicas (--ha) another one's
            # API may have held these nodes. A store that cannot read keeps the last known (its write below
            # answers 503 then).
            with contextlib.suppress(SQLAlchemyError):
                fresh = stored_holds(ctx.store, node_names)
                current.clear()
                current.update(fresh)
            now = ctx.runner.clock.now()
            new = [(n, merged(current.get(n), verb, now=now, reason=body.reason, grace_s=grace)) for n in nodes]
            written: list[int] = []
            try:
                for n, hold in new:
                    if hold != current.get(n):
                        key = hold_key(cluster.nodes[n].name)
                        if hold is None:  # no row, not an empty one (an older empty row reads as no hold)
                            ctx.store.delete_meta(key)
                        else:
                            ctx.store.set_meta(key, encode_hold(hold))
                        written.append(n)
            except StoreUnavailable as e:  # the nodes written so far are committed: hand those on
                done = [(n, h) for n, h in new if n in written]
                _remember(current, done)
                ctx.runner.held(HoldOrder(tuple(done)))
                raise HttpProblem(503, str(e), {"Retry-After": RETRY_AFTER_S}) from e
            _remember(current, new)
            ctx.runner.held(HoldOrder(tuple(new)))
        items = [
            HoldOut(
                node=cluster.nodes[n].name,
                rack=cluster.racks[cluster.nodes[n].rack].name,
                mode=None if h is None else ("draining" if h.drain else "cordoned"),
                reason=None if h is None else h.reason,
                since=None if h is None else h.since,
                deadline=None if h is None else h.deadline,
            )
            for n, h in new
        ]
        return HoldList(verb=verb.value, items=items)

    async def hold_body(request: Request) -> HoldIn:
        """The optional JSON body, read only once the caller is known to be an admin (a route's declared
        body is parsed before its dependencies run: a bad body would then answer 422 to anyone)."""
        raw = await request.body()
        if len(raw) > ctx.max_body_bytes:
            raise HttpProblem(413, f"the body is over {ctx.max_body_bytes} bytes")
        if not raw.strip():
            return HoldIn()
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            msg = f"not valid JSON: {type(e).__name__}"
            raise HttpProblem(422, [{"loc": ["body"], "msg": msg, "fix": 'e.g. {"reason": "firmware"}'}]) from e
        try:
            return HoldIn.model_validate(doc)
        except ValidationError as e:
            raise HttpProblem(
                422,
                [
                    {"loc": ["body", *map(str, err["loc"])], "msg": err["msg"], "fix": "see /openapi.json"}
                    for err in e.errors()[:20]
                ],
            ) from e

    body_schema: dict[str, Any] = {
        "requestBody": {"required": False, "content": {"application/json": {"schema": HoldIn.model_json_schema()}}}
    }

    @app.post(
        "/v1/nodes/{name}/{verb}",
        response_model=HoldList,
        responses=errors,
        summary="Cordon, drain or uncordon a node (admin)",
        openapi_extra=body_schema,
    )
    async def node_hold(name: str, verb: HoldVerb, who: Admin, request: Request) -> HoldList:
        body = await hold_body(request)
        if name not in node_by_name:
            raise HttpProblem(404, f"no node named {name[:100]!r}")
        return await asyncio.to_thread(commit, [node_by_name[name]], verb, body)

    @app.post(
        "/v1/racks/{name}/{verb}",
        response_model=HoldList,
        responses=errors,
        summary="Cordon, drain or uncordon every node of a rack (admin)",
        openapi_extra=body_schema,
    )
    async def rack_hold(name: str, verb: HoldVerb, who: Admin, request: Request) -> HoldList:
        body = await hold_body(request)
        if name not in rack_by_name:
            raise HttpProblem(404, f"no rack named {name[:100]!r}")
        nodes = list(cluster.racks[rack_by_name[name]].nodes)
        return await asyncio.to_thread(commit, nodes, verb, body)


def _remember(current: dict[int, NodeHold], new: list[tuple[int, NodeHold | None]]) -> None:
    for n, hold in new:
        if hold is None:
            current.pop(n, None)
        else:
            current[n] = hold


__all__ = ["HoldIn", "HoldList", "HoldOut", "hold_key", "mount_nodes", "restore_holds", "stored_holds"]
