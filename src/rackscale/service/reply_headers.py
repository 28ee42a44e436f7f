"""The headers every reply of the service carries, added at one place: :meth:`ServiceApp.__call__
<rackscale.service.front.ServiceApp.__call__>` wraps each request's ``send`` with :func:`with_reply_headers`,
so the API's answers, its errors (the request guard's 403/415/421, a route's 401/404/422, a 500) and
``/metrics`` get them whichever layer wrote the reply.

- ``X-Content-Type-Options: nosniff`` on every reply: a reply is only what its type says (a JSON error that
  quotes a hostile name is never sniffed as HTML).
- On the API's replies (everything but the page, its assets and the interactive docs): ``Cache-Control:
  no-store`` (a reply holds what a token may see: no browser or proxy cache keeps it for the next user of
  the machine), and a Content-Security-Policy, ``X-Frame-Options`` and ``Referrer-Policy`` that let nothing
  run, load or frame should a reply ever be shown as a document.

The page (``/``, ``/static/...``) carries its own headers (``rackscale.service.web.PAGE_HEADERS``: its CSP
lets its own script run, and its assets may be cached); a header a reply already has is never replaced.
"""

from __future__ import annotations

from starlette.types import Message, Scope, Send

NOSNIFF = (b"x-content-type-options", b"nosniff")
API_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    NOSNIFF,
    (b"cache-control", b"no-store"),
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)
PAGE_ONLY: tuple[tuple[bytes, bytes], ...] = (NOSNIFF,)
# Served as documents for a browser: the page and its assets (their own headers), and the interactive docs
# when --docs turns them on (their scripts come from a CDN, which the API's CSP would block).
_DOCUMENT_PATHS = frozenset({"/", "/static", "/docs", "/docs/oauth2-redirect", "/redoc"})


def headers_for(path: str) -> tuple[tuple[bytes, bytes], ...]:
    """The headers a reply to ``path`` (without the root path) gets where it does not set them itself."""
    return PAGE_ONLY if path in _DOCUMENT_PATHS or path.startswith("/static/") else API_HEADERS


def with_reply_headers(scope: Scope, send: Send) -> Send:
    """``send`` that adds :func:`headers_for` the request's path to the reply's start, each unless present."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :] or "/"
    extra = headers_for(path)

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", ()))
            present = {bytes(k).lower() for k, _ in headers}
            headers += [h for h in extra if h[0] not in present]
            message = {**message, "headers": headers}
        await send(message)

    return sending


__all__ = ["API_HEADERS", "PAGE_ONLY", "headers_for", "with_reply_headers"]
