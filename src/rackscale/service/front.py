"""The service's ASGI entry: the request guard, then job submissions straight to their handler, then FastAPI.

``POST /v1/jobs`` is the route a cluster's clients call at 1,000/s (docs/benchmarks.md, "Service at cluster
scale"). Through FastAPI it passes eight layers before its handler (Starlette's error and exception
middlewares, FastAPI's telemetry, body-limit and exit-stack ones, the router's scan of every route, the
request-response wrapper and the dependency solver), about as much CPU of the event loop as the handler
itself. :class:`ServiceApp` is the FastAPI app with a front in :meth:`~ServiceApp.__call__`: the guard
(:class:`~rackscale.service.guard.RequestGuard`, for every request, as before) and :class:`SubmitRoute`,
which hands a submission to the same handler the FastAPI route calls and renders its answers as
FastAPI would: the handler's response, an :class:`~rackscale.service.context.HttpProblem` as the app's
exception handler renders it (:func:`problem_response`), and any other exception as Starlette's
``ServerErrorMiddleware`` does (a plain 500, then the exception raised on to the server, which logs it).

Everything else (other methods and paths, a root path, the OpenAPI document, which still describes the
route) is FastAPI's. tests/service/test_front.py holds both ways to the same answers, byte for byte.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rackscale.service.context import HttpProblem
from rackscale.service.reply_headers import with_reply_headers

# (the Authorization header, the Content-Length header, the request's receive) -> the reply; raises
# HttpProblem for an error reply.
SubmitHandler = Callable[[str | None, str | None, Receive], Awaitable[Response]]

SUBMIT_PATH = "/v1/jobs"


def problem_response(exc: HttpProblem) -> JSONResponse:
    """An :class:`HttpProblem` as the client gets it: ``{"detail": ...}`` with its status and headers."""
    return JSONResponse({"detail": exc.detail}, status_code=exc.status, headers=exc.headers)


async def read_body(receive: Receive, declared: str | None, limit: int) -> bytes:
    """The request's body, at most ``limit`` bytes (413 past it, before reading when Content-Length says
    so); ClientDisconnect if the client goes away first (as Starlette's ``Request.stream``)."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HttpProblem(413, f"body of {declared} bytes is over the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise HttpProblem(413, f"body is over the limit of {limit} bytes")
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        elif message["type"] == "http.disconnect":
            raise ClientDisconnect()
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class SubmitRoute:
    """``POST /v1/jobs`` to ``handler``, everything else to ``app``."""

    def __init__(self, app: ASGIApp, handler: SubmitHandler) -> None:
        self.app = app
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] != SUBMIT_PATH
            or scope["method"] != "POST"
            or scope.get("root_path")  # mounted under a prefix: FastAPI's routing knows what it means
        ):
            await self.app(scope, receive, send)
            return
        authorization = declared = None
        for k, v in scope["headers"]:  # lower-cased names; the first of a repeated header counts
            if k == b"authorization":
                authorization = v.decode("latin-1") if authorization is None else authorization
            elif k == b"content-length":
                declared = v.decode("latin-1") if declared is None else declared
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            try:
                response = await self.handler(authorization, declared, receive)
            except HttpProblem as e:
                response = problem_response(e)
            await response(scope, receive, sending)
        except Exception:
            if not started:  # Starlette's ServerErrorMiddleware (debug off, no 500 handler): the same reply
                await PlainTextResponse("Internal Server Error", status_code=500)(scope, receive, send)
            raise  # for the server to log (and a test client to raise)


class ServiceApp(FastAPI):
    """The service's FastAPI app; ``front`` (set by :func:`~rackscale.service.api.create_app`) takes each
    request first and passes it on to :meth:`framework`, FastAPI's own handling. Every reply, whoever writes
    it, gets :mod:`rackscale.service.reply_headers`' headers (``nosniff``, ``no-store`` on the API)."""

    front: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":  # every reply's headers at one place, whichever layer writes it
            send = with_reply_headers(scope, send)
        front = self.front
        if front is None:
            await super().__call__(scope, receive, send)
        else:
            await front(scope, receive, send)

    async def framework(self, scope: Scope, receive: Receive, send: Send) -> None:
        await super().__call__(scope, receive, send)


__all__ = ["SUBMIT_PATH", "ServiceApp", "SubmitHandler", "SubmitRoute", "problem_response", "read_body"]
