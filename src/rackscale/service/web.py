"""The web page at ``/`` (placeholder until the dashboard lands)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

if TYPE_CHECKING:
    from rackscale.service.api import ServiceContext


def mount(app: FastAPI, ctx: ServiceContext) -> None:
    @app.get("/", include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse("<!doctype html><title>rackscale</title><h1>rackscale</h1>")
