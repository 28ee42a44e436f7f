"""What a backend says of its nodes' health, in one backend-neutral form: a :class:`NodeHealth` per node that is
not fully healthy (a node absent from a report is healthy). The types are the host's
(:mod:`rackscale.host.parts`, a layer below the backends); this module is where backends find them.

A backend may offer an optional ``health(now) -> list[NodeHealth]`` (optional as ``admit`` is in
:mod:`rackscale.backends.base`); :func:`health_of` asks it and answers ``None`` for a backend without it, so
the runner can tell "no health source" (leave the host alone) from "every node is healthy" (recover all).
The runner hands each report to the host (:meth:`rackscale.host.parts.PartsMixin.apply_health`).
"""

from __future__ import annotations

from rackscale.host.parts import NodeHealth, NodeState, merged


def health_of(backend: object, now: float) -> list[NodeHealth] | None:
    """The backend's report (an optional method ``health(now) -> list[NodeHealth]``), None for a backend
    without one. Whatever the method raises goes to the caller (the runner counts and logs it)."""
    fn = getattr(backend, "health", None)
    if not callable(fn):
        return None
    out = list(fn(now))
    assert all(isinstance(h, NodeHealth) for h in out), f"{type(backend).__name__}.health must return NodeHealth"
    return out


__all__ = ["NodeHealth", "NodeState", "health_of", "merged"]
