"""A page of ``GET /v1/jobs`` as JSON, built from plain values.

``JobList(items=[job_out(...) for each row], next_after=...).model_dump_json()`` first validates every row as
a :class:`~rackscale.service.views.JobOut` (a page holds up to 5,000 rows), and that was most of a page's CPU
after the store's read. Here each row becomes a dict with ``JobOut``'s keys in its order, serialised by the
same pydantic-core serialiser (``to_json``), so the bytes are the same: tests/service/test_job_list.py
compares them row by row (pending with a live reason, running, ended, corrupt, shared GPUs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic_core import to_json

from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.scheduler.status import Status
from rackscale.service.store import JobRow
from rackscale.service.views import merged_slices, shown_reason


def job_list_json(
    cluster: GPUCluster,
    rows: Sequence[JobRow],
    *,
    why: Callable[[JobRow], Status | None],
    now: float,
    next_after: int | None,
) -> bytes:
    """``JobList(items=[job_out(cluster, r, why=why(r), now=now) for r in rows], next_after=...)`` as JSON."""
    items = []
    for row in rows:
        reason, message = shown_reason(row, why(row), now)
        items.append(
            {
                "name": row.name,
                "queue": row.queue,
                "kind": row.kind,
                "gpus": _float(row.gpus),
                "priority": row.priority,
                "status": row.status,
                "reason": reason,
                "message": message,
                "submitted": _float(row.submitted),
                "started": _float(row.started),
                "ended": _float(row.ended),
                "exitCode": row.exit_code,
                "restarts": row.restarts,
                "placement": _placement(cluster, row),
                "spec": row.doc,
                "run": row.seq,
                "earlierRunCount": None,
                "earlierRuns": None,
            }
        )
    return to_json({"items": items, "nextAfter": next_after})


def _float(v: Any) -> Any:
    """As a ``float`` field of ``JobOut`` validates it: an int becomes a float (``4`` is said ``4.0``)."""
    return float(v) if type(v) is int else v


def _placement(cluster: GPUCluster, row: JobRow) -> dict[str, Any] | None:
    p = row.placement
    if p is None:
        return None
    racks, nodes = merged_slices(cluster, p)
    return {
        "racks": racks,
        "nodes": [{"node": n, "rack": r, "gpus": gpus, "milliPerGpu": milli} for n, r, gpus, milli in nodes],
        "gpus": p.gpu_milli / MILLI_PER_GPU,
    }
