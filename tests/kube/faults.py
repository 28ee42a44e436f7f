"""Faults the fake API server can be told to inject, at the HTTP boundary, for the next matching requests.

A fault is matched on the request's method and URL path (the query left out), and hits ``times`` requests.
``before(fake, body)`` runs first (``body``: the request's JSON, ``{}`` if none), holding the fake's store
lock: the test's stand-in for what else happens at that very moment (another scheduler binds the pod, its
controller deletes it, the bind goes through but its answer is lost). Then, with ``status`` set, the request
is answered with that error instead of being served; without it, the request is served as usual, and meets
whatever ``before`` did (a 409 because the pod is bound now, a 404 because it is gone).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.kube.fake_apiserver import FakeAPIServer


@dataclass(kw_only=True)  # not frozen: it counts its hits
class Fault:
    method: str
    path: str
    status: int | None = None
    reason: str = "InternalError"
    message: str = "injected fault"
    before: Callable[[FakeAPIServer, dict[str, Any]], None] | None = None
    times: int = 1
    hits: int = 0

    @property
    def spent(self) -> bool:
        return self.hits >= self.times


def pod_path(name: str, namespace: str = "default") -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def binding_path(name: str, namespace: str = "default") -> str:
    return pod_path(name, namespace) + "/binding"
