"""What every request must pass before a route sees it: the browser-facing defences of a service that runs
commands (an ASGI middleware, so it costs a few microseconds and no extra task per request).

- **Host allow-list** (against DNS rebinding: a page on ``evil.example`` whose name is made to resolve to
  127.0.0.1 sends ``Host: evil.example``). Accepted: loopback names, any IP literal (a page can only send
  one as its own origin, so it is no rebinding), the machine's names when the service listens beyond
  loopback, and ``--allowed-host`` names. Else 421 (misdirected request).
- **Origin check** (against cross-site requests): a browser's ``Origin`` must be the service itself (the
  same host and port as the ``Host`` header) or an allowed host. ``Origin: null`` (sandboxed frames,
  ``file://``) and any other origin get 403. Clients that are not browsers send no Origin.
- **No encoded "/"** in the path (``%2F``): no name holds one, and decoded it would route elsewhere. 404.
- **JSON only**: a request that changes something (POST, PUT, PATCH, DELETE) with a body must say
  ``Content-Type: application/json``, else 415. ``text/plain`` is what a cross-site ``fetch(..., {mode:
  "no-cors"})`` may send without a CORS preflight, so it never reaches a route.

Header size and header time are bounded by the HTTP protocol (:mod:`rackscale.service.http`); body size and
JSON depth by the routes.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def machine_names() -> set[str]:
    """This machine's own names (for a service listening on all interfaces)."""
    names = {socket.gethostname()}
    with contextlib.suppress(OSError):
        names.add(socket.getfqdn())
    return {n.lower() for n in names if n}


def allowed_hosts(bind_host: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The Host names (without port, lower case) a service bound to ``bind_host`` accepts."""
    names = set(LOOPBACK_NAMES) | {h.strip().lower().strip("[]") for h in extra if h.strip()}
    host = bind_host.strip().lower().strip("[]")
    if not is_loopback(host):
        names |= machine_names()
        if host not in ("0.0.0.0", "::", ""):
            names.add(host)
    return frozenset(names)


def is_loopback(host: str) -> bool:
    """A loopback name or address (the only places a service without a token file may listen)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _split_host(value: str) -> tuple[str, str]:
    """``Host`` header -> (name lower-cased without brackets, port or '')."""
    value = value.strip().lower()
    if value.startswith("["):  # [::1]:8080
        name, _, rest = value[1:].partition("]")
        return name, rest.removeprefix(":")
    name, sep, port = value.rpartition(":")
    if not sep or ":" in name:  # no port, or a bare IPv6 literal
        return value, ""
    return name, port


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class RequestGuard:
    """The checks above, in front of the whole app (the page, its assets and the API alike)."""

    def __init__(self, app: ASGIApp, *, hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts
        self._seen: dict[str, bool] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope["method"], scope["headers"])
        if refusal is None and b"%2f" in scope.get("raw_path", b"").lower():
            # An encoded "/" is in no name rackscale serves. Decoded, it is a "/" of the path: the router would
            # match another route, or redirect a trailing one to one (DELETE /v1/jobs/%2F answered 405 from
            # POST /v1/jobs).
            refusal = 404, "no such resource: names never hold '/' (the path has an encoded one, %2F)"
        if refusal is not None:
            status, detail = refusal
            await _reply(send, status, detail)
            return
        await self.app(scope, receive, send)

    def _refusal(self, method: str, raw_headers: Iterable[tuple[bytes, bytes]]) -> tuple[int, str] | None:
        host_value = origin = ctype = length = None
        chunked = False
        for k, v in raw_headers:  # the parser lower-cases names; the first of a repeated header counts
            if k == b"host":
                host_value = v if host_value is None else host_value
            elif k == b"origin":
                origin = v if origin is None else origin
            elif k == b"content-type":
                ctype = v if ctype is None else ctype
            elif k == b"content-length":
                length = v if length is None else length
            elif k == b"transfer-encoding":
                chunked = True
        raw_host = host_value.decode("latin-1") if host_value is not None else ""
        host, port = _split_host(raw_host)
        if raw_host and not self._host_ok(host):
            return 421, (
                f"this service does not answer to the host name {host[:100]!r} (fix: use its address, or start "
                "it with --allowed-host NAME)"
            )
        if origin is not None:
            text = origin.decode("latin-1").strip()
            parts = urlsplit(text) if text != "null" else None
            o_host = (parts.hostname or "") if parts is not None else ""
            o_port = str(parts.port or "") if parts is not None and _port_ok(parts) else "?"
            same = parts is not None and o_host == host and _same_port(o_port, port, parts.scheme)
            if not same and o_host not in self.hosts - LOOPBACK_NAMES:
                return 403, f"cross-origin request refused (Origin {text[:100]!r}); use the page this service serves"
        has_body = length.strip() not in (b"", b"0") if length is not None else chunked
        if method in _CHANGING and has_body:
            media = (ctype or b"").split(b";", 1)[0].strip().lower()
            if media != b"application/json":
                shown = media.decode("latin-1")[:60] or "none"
                return 415, f"send the body as JSON with 'Content-Type: application/json' (got {shown})"
        return None

    def _host_ok(self, host: str) -> bool:
        ok = self._seen.get(host)
        if ok is None:  # parsed once per distinct name (bounded: a flood of names only refills the cache)
            ok = host in self.hosts or _is_ip(host)
            if len(self._seen) > 1024:
                self._seen.clear()
            self._seen[host] = ok
        return ok


def _port_ok(parts: Any) -> bool:
    try:
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError:
        return False
    return True


def _same_port(origin_port: str, host_port: str, scheme: str) -> bool:
    default = {"http": "80", "https": "443"}.get(scheme, "")
    return (origin_port or default) == (host_port or default)


async def _reply(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


__all__ = ["LOOPBACK_NAMES", "RequestGuard", "allowed_hosts", "is_loopback", "machine_names"]
