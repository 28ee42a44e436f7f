"""The web dashboard at ``/``: one static page (``static/``: plain HTML, CSS and JS, no build step, nothing
fetched from the internet) that polls the REST API, plus one compact JSON route the API lacks.

``GET /v1/ui/overview?rack=r000&rack=r001`` (or ``detail=r000,r001``) returns every rack's utilisation in
one request (for the aggregate view of a cluster with 100+ racks) and, for the racks named (the ones the
page shows), the occupied GPUs of their grids as sparse cells. The cost is O(racks + allocated GPUs + detail
nodes), never a scan of every GPU. Auth is the API's: with a token file, a valid bearer token or 401.

The page and its assets carry :data:`PAGE_HEADERS`: a Content-Security-Policy under which only the page's own
script and style run and it talks only to its own origin (were a value ever written as markup, its inline
script or handler would not run), no MIME sniffing, no framing (clickjacking), no referrer.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import Scope

from rackscale.model.topology import MILLI_PER_GPU
from rackscale.service.context import ServiceContext, authenticate
from rackscale.service.views import Visible, everyone, visible_to

if TYPE_CHECKING:
    from rackscale.service.live import LiveCluster

STATIC_DIR = Path(__file__).with_name("static")
MAX_DETAIL_RACKS = 64  # racks whose grid one overview request may carry (the page shows 16 at a time)
_NO_CACHE = {"Cache-Control": "no-cache"}
# The page's script (app.js) sets styles through the CSSOM (element.style), which style-src does not govern;
# its favicon is a data: URL. The login form is handled by the script, never submitted (form-action).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",  # frame-ancestors' older spelling
    "Referrer-Policy": "no-referrer",
}


class _Assets(StaticFiles):
    """The page's assets, each with :data:`PAGE_HEADERS` (``/static/index.html`` is the page too)."""

    def file_response(
        self, full_path: str | os.PathLike[str], stat_result: os.stat_result, scope: Scope, status_code: int = 200
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers.update(PAGE_HEADERS)
        return response


def mount(app: FastAPI, ctx: ServiceContext) -> None:
    """Serve the page at ``/``, its assets under ``/static/`` and the overview under ``/v1/ui/``."""
    static = Path(ctx.web_dir) if ctx.web_dir else STATIC_DIR
    cluster = ctx.runner.live.cluster
    rack_by_name = {r.name: r.index for r in cluster.racks}

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(static / "index.html", media_type="text/html", headers=_NO_CACHE | PAGE_HEADERS)

    app.mount("/static", _Assets(directory=static), name="static")

    @app.get("/v1/ui/overview", include_in_schema=False)
    async def overview(
        request: Request, detail: str = "", rack: Annotated[list[str] | None, Query()] = None
    ) -> JSONResponse:
        who = authenticate(ctx, request.headers.get("authorization"))  # the API's rule; HttpProblem -> 401
        wanted: list[int] = []
        # ``rack=NAME`` (repeated) names a rack exactly: a rack name may hold a comma (its pool's name is
        # plain text), which ``detail=`` (comma-separated, kept for scripts) cannot say.
        for name in [*(n.strip() for n in detail.split(",")), *(rack or [])]:
            r = rack_by_name.get(name)
            if r is not None and r not in wanted:
                wanted.append(r)
        if len(wanted) > MAX_DETAIL_RACKS:
            return JSONResponse(
                {"detail": f"at most {MAX_DETAIL_RACKS} racks in detail (got {len(wanted)}); page through them"},
                status_code=422,
            )

        def read() -> dict[str, Any]:
            with ctx.runner.reading() as lv:
                return overview_doc(lv, wanted, visible_to(lv, who))

        # In a worker thread: the runner's lock is held through a cycle and its commit (hundreds of ms with
        # 50,000 jobs waiting); waiting for it on the event loop would stall every other request meanwhile.
        # (Cache-Control: no-store, as every API reply: rackscale.service.reply_headers.)
        return JSONResponse(await asyncio.to_thread(read))


OTHER_TENANT = "(another tenant)"  # not a valid job name: it cannot collide with one


def overview_doc(lv: LiveCluster, detail: list[int], visible: Visible = everyone) -> dict[str, Any]:
    """Every rack's allocation and failures, and the sparse grids of the ``detail`` racks.

    ``racks[i]``: name, region, gpus, allocated (GPUs, fractional when shared), failed, jobs (a count).
    ``detail[i]``: name, nodes [{name, gpus, down}], cells [[node, gpu, job, milli]] (node: its position in
    the rack; job: an index into ``jobs``; one cell per job on a GPU, so a shared GPU has several) and
    failed [[node, gpu]] (GPUs failed on nodes that are up; a down node's GPUs are all failed).
    """
    c = lv.cluster
    st = lv.state
    used = [0] * len(c.racks)
    failed = [0] * len(c.racks)
    node_pos: dict[int, tuple[int, int]] = {}  # node index -> (slot in detail, position in its rack)
    for slot, r in enumerate(detail):
        for pos, n in enumerate(c.racks[r].nodes):
            node_pos[n] = (slot, pos)
    grids: list[dict[str, Any]] = [
        {
            "name": c.racks[r].name,
            "nodes": [
                # "hold": an operator's cordon or drain (cordoned, draining, drained), shown apart from failures
                {"name": c.nodes[n].name, "gpus": c.nodes[n].gpus, "down": st.node_failed[n], "hold": lv.node_mode(n)}
                for n in c.racks[r].nodes
            ],
            "cells": [],
            "failed": [],
        }
        for r in detail
    ]
    jobs: list[str] = []
    job_ix: dict[str, int] = {}
    for name, run in st.running.items():
        for a in run.placement.allocs:
            rack = c.nodes[a.node].rack
            used[rack] += a.milli * len(a.gpus)
            where = node_pos.get(a.node)
            if where is None:
                continue
            shown = name if visible(name) else OTHER_TENANT  # a tenant sees others' GPUs used, not whose
            if shown not in job_ix:
                job_ix[shown] = len(jobs)
                jobs.append(shown)
            cells = grids[where[0]]["cells"]
            for g in a.gpus:
                cells.append([where[1], g, job_ix[shown], a.milli])
    for rk in c.racks if st.failed_gpus_count else ():
        for n in rk.nodes:
            if st.node_failed[n]:
                failed[rk.index] += c.nodes[n].gpus
            elif st.gpu_failed[n]:
                failed[rk.index] += len(st.gpu_failed[n])
                if n in node_pos:
                    slot, pos = node_pos[n]
                    grids[slot]["failed"].extend([pos, g] for g in sorted(st.gpu_failed[n]))
    racks = [
        {
            "name": rk.name,
            "region": c.regions[rk.region].name,
            "gpus": rk.gpus,
            "allocated": used[rk.index] / MILLI_PER_GPU,
            "failed": failed[rk.index],
            "jobs": len(st.rack_jobs[rk.index]),  # a count: no names
        }
        for rk in c.racks
    ]
    return {
        "cluster": c.name,
        "gpus": c.total_gpus,
        "gpusAllocated": st.used_milli / MILLI_PER_GPU,
        "racks": racks,
        "detail": grids,
        "jobs": jobs,
    }
