"""Routes of scheduled scaling: ``POST /v1/schedules`` (admin; the body a ScalingSchedule document, sent as
``application/json`` as the request guard wants of every changing request, and read as JSON, else as YAML;
a put of an existing name replaces it: 200, a new one 201), ``GET /v1/schedules``, ``GET
/v1/schedules/NAME`` (with its latest fires), ``DELETE /v1/schedules/NAME`` (admin; what it set stays).

Who reads what: an admin sees every schedule; a tenant sees the schedules of the queues it may use (a queue
target) and of the services it can see (a service target whose job runs in one of its queues); another is
a 404, as another tenant's job is. Only an admin changes them: a schedule moves a queue's quota for everyone.

A Deployment target is refused with a 422: the service's backends (sim, local, slurm) have no Kubernetes
Deployments; ``rackscale kube-scheduler --schedule FILE`` scales them. An unknown queue is fine (the step
creates it with the quota); so is a service not running yet (a step that finds none changes nothing, and
says so in the schedule's history). Persistence and firing: :mod:`rackscale.service.schedules_store`.
"""

# No `from __future__ import annotations` here: FastAPI reads the route signatures at run time.
import asyncio
import json
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Request, Response
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from pydantic import BaseModel

from rackscale.host.scaling import ScalingSchedule, TargetKind, next_fire, schedule_to_doc
from rackscale.host.scaling_docs import parse_schedule
from rackscale.loaders import safe_load_bounded
from rackscale.model.spec_errors import SpecError
from rackscale.service.auth import Principal
from rackscale.service.context import HttpProblem, ServiceContext, authenticate
from rackscale.service.schedules_store import FireRecord, Record, ScheduleKeeper, ScheduleOrder
from rackscale.service.store import StoreUnavailable
from rackscale.service.views import ErrorOut

RETRY_AFTER_S = "5"
MAX_SCHEDULES = 1000  # each is looked at every runner step: a bound, not a plan


class FireOut(BaseModel):
    at: float  # the step's time (epoch seconds, service clock)
    step: int
    summary: str
    applied: float  # when the runner applied it (later than `at` for a step due while the service was down)


class NextOut(BaseModel):
    at: float
    step: int
    sets: str


class ScheduleOut(BaseModel):
    name: str
    targetKind: str
    target: str
    timeZone: str
    steps: list[dict[str, Any]]
    next: NextOut | None
    lastFired: FireOut | None
    firedSinceStart: int
    history: list[FireOut] | None = None  # GET of one schedule only, oldest first
    document: dict[str, Any]


class ScheduleList(BaseModel):
    items: list[ScheduleOut]


class Deleted(BaseModel):
    deleted: str


def _fire(f: FireRecord | None) -> FireOut | None:
    return None if f is None else FireOut(at=f.at, step=f.step, summary=f.summary, applied=f.applied)


def _next(s: ScalingSchedule, now: float) -> NextOut | None:
    try:
        at, i = next_fire(s, after=now)
    except (ValueError, ArithmeticError):  # croniter looks only so far ahead: it never fires again
        return None
    return NextOut(at=at, step=i, sets=s.steps[i].describe())


def schedule_out(rec: Record, *, now: float, fired: int, history: bool = False) -> ScheduleOut:
    s = rec.schedule
    doc = schedule_to_doc(s)
    spec = doc["spec"]
    assert isinstance(spec, dict)
    return ScheduleOut(
        name=s.name,
        targetKind=s.target_kind.value,
        target=s.target,
        timeZone=s.time_zone,
        steps=list(spec["steps"]),
        next=_next(s, now),
        lastFired=_fire(rec.last),
        firedSinceStart=fired,
        history=[f for h in rec.history if (f := _fire(h)) is not None] if history else None,
        document=doc,
    )


def _problems(e: SpecError) -> list[dict[str, Any]]:
    return [
        {"loc": ["body", *p.loc], "msg": p.message, "fix": p.fix, **({"line": p.line} if p.line else {})}
        for p in e.problems[:20]
    ]


def read_schedule(raw: bytes) -> ScalingSchedule:
    """The body as a schedule, or an HttpProblem 422 naming each bad field."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        fix = "send the document as UTF-8 YAML or JSON"
        raise HttpProblem(422, [{"loc": ["body"], "msg": f"not UTF-8 (byte {e.start})", "fix": fix}]) from e
    try:
        if text.lstrip().startswith("{"):
            try:
                doc: Any = json.loads(text)
            except (ValueError, RecursionError):
                doc = safe_load_bounded(text, "body")  # YAML's flow style also starts with "{"
        else:
            doc = safe_load_bounded(text, "body")
        return parse_schedule(doc, source="body")
    except SpecError as e:
        raise HttpProblem(422, _problems(e)) from e


def visible(ctx: ServiceContext, who: Principal, s: ScalingSchedule) -> bool:
    if who.is_admin:
        return True
    if s.target_kind is TargetKind.QUEUE:
        return who.can_use(s.target)
    if s.target_kind is TargetKind.SERVICE:
        row = ctx.store.get(s.target)
        return row is not None and who.can_use(row.queue)
    return False


def mount_schedules(app: FastAPI, ctx: ServiceContext) -> None:
    """Add the routes and the metrics; hand the stored schedules to the runner (before its first step)."""
    keeper: ScheduleKeeper = ctx.runner.schedules
    for s in keeper.restore():
        ctx.runner.scheduled(ScheduleOrder(put=s))
    if ctx.metrics is not None:
        ctx.metrics.registry.register(ScheduleCollector(ctx))
    errors: dict[int | str, dict[str, Any]] = {
        403: {"model": ErrorOut, "description": "not an admin token"},
        404: {"model": ErrorOut, "description": "no such schedule (or not yours)"},
        413: {"model": ErrorOut, "description": "the body is over the limit"},
        422: {"model": ErrorOut, "description": "a bad document: each problem with its field and a fix"},
        503: {"model": ErrorOut, "description": "the store cannot write now"},
    }

    async def principal(authorization: Annotated[str | None, Header()] = None) -> Principal:
        return authenticate(ctx, authorization)

    async def admin(authorization: Annotated[str | None, Header()] = None) -> Principal:
        who = authenticate(ctx, authorization)
        if not who.is_admin:
            raise HttpProblem(403, f"token {who.name!r} may not change schedules (an admin token may)")
        return who

    Who = Annotated[Principal, Depends(principal)]
    Admin = Annotated[Principal, Depends(admin)]

    def out(rec: Record, *, history: bool = False) -> ScheduleOut:
        return schedule_out(rec, now=ctx.runner.clock.now(), fired=keeper.fired[rec.schedule.name], history=history)

    def put(s: ScalingSchedule) -> tuple[Record, bool]:
        if s.target_kind is TargetKind.DEPLOYMENT:
            raise HttpProblem(
                422,
                [
                    {
                        "loc": ["body", "spec", "target", "deployment"],
                        "msg": f"the {ctx.backend} backend has no Kubernetes Deployments to scale",
                        "fix": "give it to `rackscale kube-scheduler --schedule FILE`, or target a queue or service",
                    }
                ],
            )
        if s.name not in {r.schedule.name for r in keeper.snapshot()} and len(keeper.records) >= MAX_SCHEDULES:
            fix = "delete schedules no longer needed (rackscale delete schedule NAME)"
            raise HttpProblem(422, [{"loc": ["body"], "msg": f"there are {MAX_SCHEDULES} schedules", "fix": fix}])
        try:
            rec, new = keeper.put(s)
        except StoreUnavailable as e:
            raise HttpProblem(503, str(e), {"Retry-After": RETRY_AFTER_S}) from e
        ctx.runner.scheduled(ScheduleOrder(put=s))
        return rec, new

    @app.post(
        "/v1/schedules",
        response_model=ScheduleOut,
        status_code=201,
        responses={200: {"model": ScheduleOut, "description": "replaced the schedule of that name"}, **errors},
        summary="Put a ScalingSchedule (admin): JSON, or YAML text sent as application/json",
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": {}}}}},
    )
    async def post_schedule(who: Admin, request: Request, response: Response) -> ScheduleOut:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > ctx.max_body_bytes:
            raise HttpProblem(413, f"the body is over {ctx.max_body_bytes} bytes")
        raw = await request.body()
        if len(raw) > ctx.max_body_bytes:
            raise HttpProblem(413, f"the body is over {ctx.max_body_bytes} bytes")
        s = read_schedule(raw)
        rec, new = await asyncio.to_thread(put, s)
        response.status_code = 201 if new else 200
        return out(rec)

    @app.get("/v1/schedules", response_model=ScheduleList, summary="Schedules: next fire, last fired")
    async def list_schedules(who: Who) -> ScheduleList:
        return ScheduleList(items=[out(r) for r in keeper.snapshot() if visible(ctx, who, r.schedule)])

    @app.get("/v1/schedules/{name}", response_model=ScheduleOut, responses=errors, summary="One schedule")
    async def get_schedule(name: str, who: Who) -> ScheduleOut:
        rec = keeper.get(name)
        if rec is None or not visible(ctx, who, rec.schedule):
            raise HttpProblem(404, f"no schedule named {name[:100]!r}" + ("" if who.is_admin else " for your queues"))
        return out(rec, history=True)

    @app.delete("/v1/schedules/{name}", response_model=Deleted, responses=errors, summary="Delete (admin)")
    async def delete_schedule(name: str, who: Admin) -> Deleted:
        try:
            gone = await asyncio.to_thread(keeper.delete, name)
        except StoreUnavailable as e:
            raise HttpProblem(503, str(e), {"Retry-After": RETRY_AFTER_S}) from e
        if not gone:
            raise HttpProblem(404, f"no schedule named {name[:100]!r}")
        ctx.runner.scheduled(ScheduleOrder(delete=name))
        return Deleted(deleted=name)


class ScheduleCollector(Collector):
    """``rackscale_schedule_fired_total{schedule}`` (fires since the process started) and
    ``rackscale_schedule_next_fire_timestamp_seconds{schedule}`` (service clock), read at scrape time."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        keeper = self.ctx.runner.schedules
        now = self.ctx.runner.clock.now()
        fired = CounterMetricFamily("rackscale_schedule_fired", "Schedule steps fired.", labels=["schedule"])
        nxt = GaugeMetricFamily(
            "rackscale_schedule_next_fire_timestamp_seconds",
            "When each schedule fires next (service clock, epoch seconds).",
            labels=["schedule"],
        )
        for rec in keeper.snapshot():
            name = rec.schedule.name
            fired.add_metric([name], keeper.fired[name])
            if (n := _next(rec.schedule, now)) is not None:
                nxt.add_metric([name], n.at)
        yield fired
        yield nxt


__all__ = ["MAX_SCHEDULES", "ScheduleCollector", "ScheduleList", "ScheduleOut", "mount_schedules", "read_schedule"]
