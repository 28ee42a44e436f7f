"""The HTTP server's own limits, which the app cannot set: how large and how slow a request's head may be.

uvicorn's httptools protocol buffers a request line and headers for as long as they keep coming: a client
that sends an endless header grows the server's memory without bound, and one that never finishes its
head holds a connection forever. :class:`BoundedHttpToolsProtocol` answers 431 once a head passes
:data:`MAX_HEAD_BYTES` and closes a connection whose head is not complete :data:`HEAD_TIMEOUT_S` after it
began. (uvicorn's h11 protocol has the size bound built in: ``h11_max_incomplete_event_size``; it is used
when httptools is not installed.)
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn

MAX_HEAD_BYTES = 64 * 1024  # request line + headers; browsers send 1-8 KiB
HEAD_TIMEOUT_S = 30.0

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is missing: uvicorn's h11 protocol, bounded by h11_max_incomplete_event_size
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


if HttpToolsProtocol is not None:

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol with a bound on the size and the time of each request's head."""

        max_head_bytes = MAX_HEAD_BYTES
        head_timeout_s = HEAD_TIMEOUT_S

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._head_bytes = 0  # bytes of the current head received so far
            self._tail = b""  # its last 3 bytes, to find a CRLFCRLF split across two reads
            self._in_head = True
            self._head_timer: asyncio.TimerHandle | None = None

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_head_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._in_head:
                # Only the head counts: a read may carry the head and the start of the body.
                seen = self._tail + data if self._tail else data
                end = seen.find(b"\r\n\r\n")
                size = self._head_bytes + (end + 4 - len(self._tail) if end >= 0 else len(data))
                if size > self.max_head_bytes:
                    self._refuse_head()
                    return
                self._head_bytes = size
                self._tail = seen[-3:]
                if end < 0 and self._head_timer is None:
                    # A head that does not come in one read (rare but for attacks) gets a deadline; the
                    # common case, a whole head in one read, costs no timer.
                    self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_too_slow)
            super().data_received(data)

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._stop_head_timer()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._in_head = True  # a keep-alive connection's next request starts its own head
            self._head_bytes = 0
            self._tail = b""

        # -------------------------------------------------------------- internals

        def _stop_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_too_slow(self) -> None:
            self._head_timer = None
            # Only a head that has begun is cut off; an idle keep-alive connection is uvicorn's to time out.
            if self._in_head and self._head_bytes and not self.transport.is_closing():
                self.transport.close()

        def _refuse_head(self) -> None:
            self._in_head = False
            self._stop_head_timer()
            body = f'{{"detail":"request headers over {self.max_head_bytes} bytes"}}'.encode()
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                # The app's replies get these from rackscale.service.reply_headers; this one never reaches it.
                b"x-content-type-options: nosniff\r\ncache-control: no-store\r\n"
                + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                + body
            )
            self.transport.close()

else:  # pragma: no cover - httptools comes with the service extra
    BoundedHttpToolsProtocol = None  # type: ignore[assignment,misc]


def server_config(app: Any, *, host: str, port: int, **kwargs: Any) -> uvicorn.Config:
    """The uvicorn configuration every rackscale server uses (``serve`` and the tests' servers)."""
    if BoundedHttpToolsProtocol is not None:
        kwargs.setdefault("http", BoundedHttpToolsProtocol)
    else:  # pragma: no cover
        kwargs.setdefault("http", "h11")
        kwargs.setdefault("h11_max_incomplete_event_size", MAX_HEAD_BYTES)
    kwargs.setdefault("log_level", "warning")
    kwargs.setdefault("access_log", False)
    kwargs.setdefault("server_header", False)
    return uvicorn.Config(app, host=host, port=port, **kwargs)


__all__ = ["HEAD_TIMEOUT_S", "MAX_HEAD_BYTES", "BoundedHttpToolsProtocol", "server_config"]
