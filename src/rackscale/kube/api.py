"""Calling the ``kubernetes`` client as plain HTTP + JSON.

Every call goes out with ``_preload_content=False`` and the JSON body is parsed here, not by the client's
generated models. Two reasons:

- ``create_namespaced_pod_binding`` / ``create_namespaced_binding``: the API server answers a ``v1.Status``,
  which the client tries to read as a ``V1Binding`` and fails (``ValueError``: ``target`` must not be None;
  kubernetes-client/python issue #547). With ``_preload_content=False`` the client does not deserialise.
- The scheduler keeps objects as the API server's JSON (dicts), cheaper to cache than the models, and exact
  about what the server sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

from rackscale.model.errors import RackscaleError


class KubeApiError(RackscaleError):
    """A non-2xx answer: ``status`` is the HTTP code, ``reason`` the Status reason, ``message`` its message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


def _error(status: int, body: bytes | str | None) -> KubeApiError:
    reason, message = "", ""
    try:
        st = json.loads(body or b"{}")
        reason, message = str(st.get("reason", "")), str(st.get("message", ""))
    except (ValueError, AttributeError):
        message = (body.decode(errors="replace") if isinstance(body, bytes) else str(body or ""))[:500]
    return KubeApiError(status, reason, message)


def call_raw(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` without deserialising; returns the open urllib3 response. Raises :class:`KubeApiError`."""
    try:
        resp = fn(*args, _preload_content=False, **kwargs)
    except ApiException as e:
        raise _error(int(e.status or 0), e.body) from e
    status = int(getattr(resp, "status", 200))
    if not 200 <= status <= 299:
        try:
            body = resp.data
        finally:
            resp.release_conn()
        raise _error(status, body)
    return resp


def call_json(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Call ``fn`` and return the response body as JSON. Raises :class:`KubeApiError` on a non-2xx answer."""
    resp = call_raw(fn, *args, **kwargs)
    try:
        data = resp.data
    finally:
        resp.release_conn()
    out = json.loads(data or b"{}")
    if not isinstance(out, dict):
        raise KubeApiError(int(resp.status), "BadResponse", f"expected a JSON object, got {type(out).__name__}")
    return out
