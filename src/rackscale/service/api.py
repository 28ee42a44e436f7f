"""The REST API (FastAPI), under ``/v1``; ``/metrics`` for Prometheus; the web page at ``/``.

Errors are JSON ``{"detail": ...}``: 401 without a valid token, 403/404 for another tenant's jobs (never
their data), 404 for unknown names, 409 for the name of a job still pending or running (an ended job's name
may be submitted again: a new run of it), 413 for a body over the limit, 422 for a
bad job spec with each problem's field path and a fix. Nothing here raises to the client as a 500 on bad
input; a 503 (with Retry-After) says the store cannot write now, why and the fix: nothing of that request was
stored, and the service takes work again by itself once the store does.
"""

# No `from __future__ import annotations` here: FastAPI reads the route signatures at run time, and the
# dependency aliases below are local to create_app.
import asyncio
import json
import logging
import time
from dataclasses import replace
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive

from rackscale.llm.jobs import LlmJobError, check_job
from rackscale.model.spec_docs import FlatJobDoc
from rackscale.model.spec_errors import SpecError
from rackscale.model.specs import job_from_dict
from rackscale.scheduler.status import Status
from rackscale.service.auth import Principal
from rackscale.service.context import DEFAULT_MAX_BODY, HttpProblem, ServiceContext, authenticate
from rackscale.service.front import ServiceApp, SubmitRoute, problem_response, read_body
from rackscale.service.guard import RequestGuard
from rackscale.service.job_list import job_page_json
from rackscale.service.nodes_api import mount_nodes
from rackscale.service.phase import ACTIVE, STATUSES
from rackscale.service.schedules_api import mount_schedules
from rackscale.service.store import DuplicateJob, JobRow, RejectedJob, Store, StoreUnavailable, unavailable
from rackscale.service.views import (
    ClusterOut,
    ErrorOut,
    EventList,
    JobList,
    JobOut,
    KpisOut,
    NodeDetail,
    NodeList,
    QueueList,
    RackDetail,
    RackList,
    WhoAmIOut,
    event_out,
    job_out,
    kpis_out,
    node_detail,
    node_out,
    queues_out,
    rack_detail,
    rack_out,
    visible_to,
)
from rackscale.service.web import mount

# Re-exported: they lived here before rackscale.service.context (callers import them from the API).
__all__ = ["DEFAULT_MAX_BODY", "RETRY_AFTER_S", "HttpProblem", "ServiceContext", "authenticate", "create_app"]

RETRY_AFTER_S = "5"  # the Retry-After of a 503 (the store cannot write now; the service heals by itself)
READ_LOG_EVERY_S = 30.0  # a store that cannot be read is logged at most this often
log = logging.getLogger("rackscale.service")

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "missing or wrong bearer token"},
    403: {"model": ErrorOut, "description": "the token may not use this queue, priority or class"},
    404: {"model": ErrorOut, "description": "no such job (or not yours)"},
    413: {"model": ErrorOut, "description": "request body too large"},
    415: {"model": ErrorOut, "description": "the body is not sent as application/json"},
    422: {"model": ErrorOut, "description": "invalid request: each problem with its field path and a fix"},
    503: {"model": ErrorOut, "description": "the service cannot take work now"},
}


def create_app(ctx: ServiceContext) -> FastAPI:
    app = ServiceApp(
        title="rackscale",
        version="1",
        summary="Topology-aware scheduling of GPU jobs on rack-scale (NVLink-domain) clusters.",
        # Declared app-wide so that no route advertises FastAPI's default 422 body: ours is ErrorOut.
        responses={401: _ERRORS[401], 422: _ERRORS[422]},
        docs_url="/docs" if ctx.docs else None,
        redoc_url="/redoc" if ctx.docs else None,
    )
    app.state.ctx = ctx
    cluster = ctx.runner.live.cluster  # the spec: the same for every live model a replica builds (HA takeovers)

    @app.exception_handler(HttpProblem)
    async def _api_error(_req: Request, exc: HttpProblem) -> JSONResponse:
        return problem_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_req: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [
            {
                "loc": [str(p) for p in e.get("loc", ())],
                "msg": e.get("msg", "invalid"),
                "fix": "see the field in /openapi.json (or docs/specs.md)",
            }
            for e in exc.errors()
        ]
        return JSONResponse({"detail": problems}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_req: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"detail": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)

    read_failed = [-float("inf")]  # when a failed read was last logged (the outage is logged, not each request)

    @app.exception_handler(SQLAlchemyError)
    async def _store_down(_req: Request, exc: SQLAlchemyError) -> JSONResponse:
        """A read of the store failed for a fault of the store (PostgreSQL stopped or unreachable): 503 with
        the cause and the fix, as a write's, never a bare 500 and a traceback per request."""
        down = unavailable(exc)
        if down is None:
            raise exc  # a bug: the server's 500, with its traceback
        if time.monotonic() - read_failed[0] >= READ_LOG_EVERY_S:
            read_failed[0] = time.monotonic()
            log.error("a read of the store failed: %s", down.reason)
        detail = f"the store cannot be read: {down.reason} (fix: {down.fix})"
        return JSONResponse({"detail": detail}, status_code=503, headers={"Retry-After": RETRY_AFTER_S})

    async def principal(authorization: Annotated[str | None, Header()] = None) -> Principal:
        return authenticate(ctx, authorization)  # async: a plain def would hop through the thread pool

    Who = Annotated[Principal, Depends(principal)]

    def visible_job(name: str, who: Principal, run: int | None = None) -> Any:
        """The latest run of ``name`` (or its run ``run``), if the caller may see it; else 404."""
        row = ctx.store.get(name, run=run)
        if row is None or not who.can_use(row.queue):
            if run is not None and (latest := ctx.store.get(name)) is not None and who.can_use(latest.queue):
                raise HttpProblem(404, f"job {name!r} has no run {run} (its latest run is {latest.seq})")
            raise HttpProblem(404, f"no job named {name!r}" + ("" if who.is_admin else " in your queues"))
        return row

    def live_why(row: JobRow) -> Status | None:
        return live_why_of(row.name, row.status)

    def live_why_of(name: str, status: str) -> Status | None:
        # Only the active run (the latest) has a live reason: an earlier run of the name keeps its own.
        return ctx.runner.live.why.get(name) if status in ACTIVE else None  # today's model (HA: rebuilt)

    def job_view(row: Any, now: float, earlier: tuple[int, list[Any]] | None = None) -> JobOut:
        return job_out(cluster, row, why=live_why(row), now=now, earlier=earlier)

    RunQuery = Annotated[
        int | None,
        Query(ge=1, le=2**62, description="one run of the name (its `run`); default: the latest run"),
    ]

    # ------------------------------------------------------------------ health
    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        problem = ctx.runner.problem  # the store cannot write now; clears by itself once a write commits
        if problem:
            return JSONResponse(
                {"status": "failing", "detail": problem}, status_code=503, headers={"Retry-After": RETRY_AFTER_S}
            )
        return JSONResponse({"status": "ready"})

    # ------------------------------------------------------------------ jobs
    @app.post(
        "/v1/jobs",
        status_code=201,
        response_model=JobOut,
        responses=_pick(403, 413, 422, 503)
        | {409: {"model": ErrorOut, "description": "a job of that name is pending or running"}},
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": FlatJobDoc.model_json_schema(by_alias=True)}},
            }
        },
        summary="Submit a job (the same spec as `rackscale submit -f`, as JSON)",
    )
    async def submit(request: Request) -> Response:
        # Requests come here only past ServiceApp's front (its SubmitRoute takes them to submission itself);
        # the route is the OpenAPI document's, and the way for an app without the front.
        return await submission(
            request.headers.get("authorization"), request.headers.get("content-length"), request.receive
        )

    async def submission(authorization: str | None, declared: str | None, receive: Receive) -> Response:
        """A submission's reply (its body read from ``receive``), or HttpProblem: the route's, and the hot
        path's (service/front.py). Auth inline rather than as a dependency, and the reply serialised once by
        pydantic rather than validated again against the response model."""
        who = authenticate(ctx, authorization)
        if problem := ctx.runner.problem:
            raise HttpProblem(503, f"not taking work: {problem}", {"Retry-After": RETRY_AFTER_S})
        body = await read_body(receive, declared, ctx.max_body_bytes)
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise HttpProblem(
                422, [{"loc": ["body"], "msg": f"not valid JSON: {e}", "fix": "send a JSON object"}]
            ) from e
        except RecursionError as e:  # far past the spec's depth limit
            raise HttpProblem(
                422, [{"loc": ["body"], "msg": "JSON nested too deeply", "fix": "send a job document (4 levels)"}]
            ) from e
        if not isinstance(doc, dict):
            raise HttpProblem(
                422,
                [
                    {
                        "loc": ["body"],
                        "msg": "expected a JSON object",
                        "fix": 'e.g. {"name": "train-1", "kind": "training", "gpus": 8}',
                    }
                ],
            )
        # A job without a queue goes to the caller's first queue (in the spec of a Kubernetes-style document).
        body_doc = doc["spec"] if isinstance(doc.get("spec"), dict) else doc
        body_doc.setdefault("queue", who.default_queue)
        try:
            spec = job_from_dict(doc)
        except SpecError as e:
            raise HttpProblem(
                422, [{"loc": ["body", *p.loc], "msg": p.message, "fix": p.fix} for p in e.problems]
            ) from e
        if not who.can_use(spec.queue):
            raise HttpProblem(
                403, f"token {who.name!r} may not submit to queue {spec.queue!r} (its queues: {', '.join(who.queues)})"
            )
        klass = body_doc.get("priorityClassName")
        refusal = who.priority_refusal(priority=spec.priority, priority_class=klass if isinstance(klass, str) else None)
        if refusal is not None:
            raise HttpProblem(403, refusal)
        if spec.llm is not None:  # a model the cluster cannot hold is refused here, not left pending forever
            try:  # a plan search (milliseconds, cached per model and size): off the event loop
                await asyncio.to_thread(check_job, ctx.runner.live.cluster, spec)
            except LlmJobError as e:
                raise HttpProblem(
                    422,
                    [{"loc": ["body", "llm"], "msg": str(e), "fix": "a smaller model, narrower precision, more GPUs"}],
                ) from e
        now = ctx.runner.clock.now()
        spec = replace(spec, submit_time=now)
        try:
            # Group-committed by the store's writer thread; the event loop serves others meanwhile.
            row = await asyncio.wrap_future(
                ctx.store.insert_job_later(
                    name=spec.name,
                    queue=spec.queue,
                    kind=spec.kind.value,
                    gpus=spec.gpu_demand_milli / 1000,
                    priority=spec.priority,
                    doc=doc,
                    submitted=now,
                )
            )
        except DuplicateJob as e:
            raise HttpProblem(409, _taken(ctx.store, spec.name, who)) from e
        except StoreUnavailable as e:  # nothing was stored: the client may send it again
            raise HttpProblem(503, str(e), {"Retry-After": RETRY_AFTER_S}) from e
        except RejectedJob as e:  # the database refused this row (the others of its commit went through)
            raise HttpProblem(
                422, [{"loc": ["body"], "msg": str(e), "fix": "shorten the job's names and values, then send it again"}]
            ) from e
        ctx.runner.submitted(spec, row.seq)
        if ctx.metrics is not None:
            ctx.metrics.submitted(spec.queue)
        return Response(
            job_out(cluster, row, now=now).model_dump_json(), status_code=201, media_type="application/json"
        )

    @app.get("/v1/jobs", response_model=JobList, summary="List jobs (yours only, for a tenant), oldest first")
    async def list_jobs(
        who: Who,
        queue: Annotated[str | None, Query(description="only this queue")] = None,
        status: Annotated[str | None, Query(description=f"comma-separated: {', '.join(STATUSES)}")] = None,
        kind: Annotated[str | None, Query(pattern="^(training|inference|batch)$")] = None,
        after: Annotated[int, Query(ge=0, le=2**62, description="cursor: nextAfter of the previous page")] = 0,
        limit: Annotated[int, Query(ge=1, le=5000)] = 500,
    ) -> Response:
        statuses = None
        if status:
            statuses = [s.strip() for s in status.split(",") if s.strip()]
            bad = [s for s in statuses if s not in STATUSES]
            if bad:
                raise HttpProblem(
                    422,
                    [
                        {
                            "loc": ["query", "status"],
                            "msg": f"unknown status {bad[0]!r}",
                            "fix": f"use any of {', '.join(STATUSES)}",
                        }
                    ],
                )
        queues: list[str] | None = None if who.is_admin else list(who.queues)
        if queue is not None:
            queues = [queue] if queues is None or queue in queues else []

        def page() -> Response:
            rows, strict = ctx.store.job_tuples(queues=queues, status=statuses, kind=kind, after=after, limit=limit)
            now = ctx.runner.clock.now()
            # JobList's JSON from the stored values (job_list.py): neither FastAPI nor a JobOut per row
            # validates the 500 views first, nor is a JobRow made of a sound row, to the same bytes.
            body = job_page_json(
                cluster,
                rows,
                strict=strict,
                why=live_why_of,
                now=now,
                next_after=rows[-1][0] if len(rows) == limit else None,  # (a tuple's first column: seq)
            )
            return Response(body, media_type="application/json")

        # A page is a query and up to 5,000 rows made views (~0.03 ms a row): in a worker thread, so that the
        # submissions behind it on the event loop do not wait for it (docs/benchmarks.md, cluster scale).
        return await asyncio.to_thread(page)

    @app.get(
        "/v1/jobs/{name}",
        response_model=JobOut,
        responses={404: _ERRORS[404]},
        summary="One job: the latest run of the name, with a count of its earlier runs",
    )
    async def get_job(name: str, who: Who, run: RunQuery = None) -> JobOut:
        row = visible_job(name, who, run)
        # A name ended is free for anyone: a tenant's view counts and lists only the runs of its own queues.
        earlier = ctx.store.earlier_runs(name, row.seq, queues=None if who.is_admin else who.queues)
        return job_view(row, ctx.runner.clock.now(), earlier)

    @app.delete(
        "/v1/jobs/{name}",
        response_model=JobOut,
        responses=_pick(404, 503),
        summary="Cancel a job (its active run; a job that has ended is returned as it is)",
    )
    async def cancel_job(name: str, who: Who) -> JobOut:
        visible_job(name, who)
        if problem := ctx.runner.problem:
            raise HttpProblem(503, f"not taking work: {problem}", {"Retry-After": RETRY_AFTER_S})
        now = ctx.runner.clock.now()
        try:
            # Only a run of the caller's queues: the name may have been submitted again by another tenant
            # since visible_job looked. (Waits for its commit, off the event loop.)
            mine = None if who.is_admin else who.queues
            row = await asyncio.to_thread(lambda: ctx.store.cancel(name, now, queues=mine))
        except StoreUnavailable as e:  # nothing changed: the client may send it again
            raise HttpProblem(503, str(e), {"Retry-After": RETRY_AFTER_S}) from e
        if row is None:
            raise HttpProblem(404, f"no job named {name!r}")
        ctx.runner.cancelled(name, row.seq)
        return job_out(cluster, row, now=now)

    @app.get(
        "/v1/jobs/{name}/events",
        response_model=EventList,
        responses={404: _ERRORS[404]},
        summary="A job's events: those of its latest run (or of ?run=), oldest first",
    )
    async def job_events(
        name: str, who: Who, limit: Annotated[int, Query(ge=1, le=5000)] = 200, run: RunQuery = None
    ) -> EventList:
        row = visible_job(name, who, run)
        items = [event_out(e) for e in ctx.store.events(name, limit=limit, run=row.seq)]
        return EventList(job=name, items=items, run=row.seq)

    # ------------------------------------------------------------------ cluster
    # The reads of the live model are plain functions: FastAPI runs them in its thread pool, so a wait for the
    # runner's lock (held through a cycle and its commit: hundreds of ms with 50,000 jobs waiting) does not
    # stall the event loop and every other request with it.
    @app.get("/v1/cluster", response_model=ClusterOut, summary="The cluster and the service")
    def get_cluster(who: Who) -> ClusterOut:
        with ctx.runner.reading() as lv:
            return ClusterOut(
                name=cluster.name,
                backend=ctx.backend,
                regions=len(cluster.regions),
                racks=len(cluster.racks),
                nodes=len(cluster.nodes),
                gpus=cluster.total_gpus,
                gpus_allocated=lv.state.used_milli / 1000,
                pending=len(lv.pending),
                running=len(lv.state.running),
                now=ctx.runner.clock.now(),
                speed=ctx.runner.clock.speed,
                auth=ctx.tokens is not None,
            )

    @app.get("/v1/whoami", response_model=WhoAmIOut, summary="Who the token is: its name, role and queues")
    async def whoami(authorization: Annotated[str | None, Header()] = None) -> WhoAmIOut:
        # Any valid token may learn its own name, a scrape token too: the page shows it, and names the token
        # of a link before it replaces the tab's (login CSRF: a link with another tenant's token).
        who = authenticate(ctx, authorization, metrics=True)
        return WhoAmIOut(name=who.name, role=who.role, queues=list(who.queues), auth=ctx.tokens is not None)

    @app.get("/v1/racks", response_model=RackList, summary="Every rack (NVLink domain) and what it holds")
    def list_racks(who: Who) -> RackList:
        with ctx.runner.reading() as lv:
            vis = visible_to(lv, who)
            return RackList(items=[rack_out(lv, r.index, vis) for r in cluster.racks])

    rack_by_name = {r.name: r.index for r in cluster.racks}
    node_by_name = {n.name: n.index for n in cluster.nodes}

    @app.get(
        "/v1/racks/{name}",
        response_model=RackDetail,
        responses={404: _ERRORS[404]},
        summary="One rack with its nodes and the job on every GPU",
    )
    def get_rack(name: str, who: Who) -> RackDetail:
        if name not in rack_by_name:
            raise HttpProblem(404, f"no rack named {name!r}")
        with ctx.runner.reading() as lv:
            return rack_detail(lv, rack_by_name[name], visible_to(lv, who))

    @app.get("/v1/nodes", response_model=NodeList, responses=_pick(404), summary="Every node (or a rack's)")
    def list_nodes(who: Who, rack: str | None = None) -> NodeList:
        if rack is not None and rack not in rack_by_name:
            raise HttpProblem(404, f"no rack named {rack!r}")
        nodes = cluster.racks[rack_by_name[rack]].nodes if rack is not None else range(len(cluster.nodes))
        with ctx.runner.reading() as lv:
            vis = visible_to(lv, who)
            return NodeList(items=[node_out(lv, n, vis) for n in nodes])

    @app.get(
        "/v1/nodes/{name}",
        response_model=NodeDetail,
        responses={404: _ERRORS[404]},
        summary="One node with the job on every GPU",
    )
    def get_node(name: str, who: Who) -> NodeDetail:
        if name not in node_by_name:
            raise HttpProblem(404, f"no node named {name!r}")
        with ctx.runner.reading() as lv:
            return node_detail(lv, node_by_name[name], visible_to(lv, who))

    @app.get("/v1/queues", response_model=QueueList, summary="Queues: jobs pending and running, GPUs held and wanted")
    def list_queues(who: Who) -> QueueList:
        counts = ctx.store.count_by_queue(ACTIVE)
        with ctx.runner.reading() as lv:
            out = queues_out(lv, counts)
        if not who.is_admin:
            out.items = [q for q in out.items if q.name in who.queues]
        return out

    @app.get("/v1/kpis", response_model=KpisOut, summary="KPIs since the service started (DESIGN section 5)")
    def get_kpis(who: Who) -> KpisOut:
        with ctx.runner.reading() as lv:
            return kpis_out(lv, ctx.runner.clock.now())

    # ------------------------------------------------------------------ metrics and the page
    @app.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        # Series carry queue and service names: with auth on, only an admin or a scrape token reads them.
        who = authenticate(ctx, request.headers.get("authorization"), metrics=True)
        if not who.may_scrape:
            raise HttpProblem(403, f"token {who.name!r} may not read /metrics (use an admin or a scrape token)")
        if ctx.metrics is None:
            raise HttpProblem(404, "metrics are off")
        # In a worker thread: the collector waits for the runner's lock (held through a cycle and its commit)
        # and then reads every rack; on the event loop that wait would stall every other request.
        body, content_type = await asyncio.to_thread(ctx.metrics.exposition)
        return Response(body, media_type=content_type)

    mount_nodes(app, ctx)  # cordon, drain, uncordon (admin)
    mount_schedules(app, ctx)  # scheduled scaling (docs/scheduled-scaling.md)
    mount(app, ctx)  # the web page at / (and whatever it reads besides /v1)

    # In front of FastAPI (service/front.py): the guard for every request, then submissions to their handler.
    front: ASGIApp = SubmitRoute(app.framework, submission)
    if ctx.allowed_hosts is not None:
        front = RequestGuard(front, hosts=ctx.allowed_hosts)
    app.front = front
    return app


def _taken(store: Store, name: str, who: Principal) -> str:
    """The 409's words: what holds the name, and what to do. Another tenant's job is not described."""
    row = store.get(name)
    if row is None or row.status not in ACTIVE:  # it ended between the insert and this read
        return f"a job named {name!r} was pending or running a moment ago: send it again, or pick another name"
    if who.can_use(row.queue):
        return f"a job named {name!r} is {row.status}: cancel it first, or pick another name"
    return f"a job named {name!r} is pending or running in a queue you cannot use: pick another name"


def _pick(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {c: _ERRORS[c] for c in codes}
