"""A page of ``GET /v1/jobs`` as JSON, built from plain values.

``JobList(items=[job_out(...) for each row], next_after=...).model_dump_json()`` first validates every row as
a :class:`~rackscale.service.views.JobOut` (a page holds up to 5,000 rows), and that was most of a page's CPU
after the store's read. Here each row becomes a dict with ``JobOut``'s keys in its order, serialised by the
same pydantic-core serialiser (``to_json``), so the bytes are the same: tests/service/test_job_list.py
compares them row by row (pending with a live reason, running, ended, corrupt, shared GPUs).

:func:`job_page_json` goes one step further for the API's page: it reads the store's rows as tuples
(``Store.job_tuples``) and makes no :class:`JobRow` of a sound one (a ``JobRow`` and the reading of its
columns by name were ~40 % of a 500-row page's CPU). A row whose spec or placement does not decode, or a
page with a text that is not UTF-8, goes through ``job_row`` as before, so a corrupt record reads as it did.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic_core import to_json

from rackscale.model.placement import Placement
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.scheduler.status import Status
from rackscale.service.store import (
    COLUMN_TYPES,
    JOB_COLUMNS,
    SOUND_TYPES,
    JobRow,
    decode_placement,
    job_row,
    stored_doc,
)
from rackscale.service.views import merged_slices, shown_reason_of

# A row read as a tuple has the table's columns in order; its types are looked up in ``SOUND_TYPES``, whose
# order is ``COLUMN_TYPES``'. Any other row goes through ``job_row``, which says which column is wrong.
if tuple(COLUMN_TYPES) != JOB_COLUMNS:  # pragma: no cover (the schema and the row's reader disagree)
    raise ImportError(f"the jobs table's columns {JOB_COLUMNS} are not those rows.COLUMN_TYPES checks")


def job_list_json(
    cluster: GPUCluster,
    rows: Sequence[JobRow],
    *,
    why: Callable[[JobRow], Status | None],
    now: float,
    next_after: int | None,
) -> bytes:
    """``JobList(items=[job_out(cluster, r, why=why(r), now=now) for r in rows], next_after=...)`` as JSON."""
    items = [_row_item(cluster, row, why(row), now) for row in rows]
    return to_json({"items": items, "nextAfter": next_after})


def job_page_json(
    cluster: GPUCluster,
    rows: Sequence[Sequence[Any]],
    *,
    strict: bool,
    why: Callable[[str, str], Status | None],
    now: float,
    next_after: int | None,
) -> bytes:
    """:func:`job_list_json` of ``Store.job_tuples``' rows (``strict``: its flag), with ``why(name, status)``
    the live reason: the same bytes as ``job_list_json([job_row(...) for each], ...)``."""
    items = []
    for t in rows:
        item = _sound_item(cluster, t, why, now) if strict else None
        if item is None:  # a text that is not UTF-8 on the page, or this row does not decode: job_row says why
            row = job_row(dict(zip(JOB_COLUMNS, t, strict=True)), decoded=strict)
            item = _row_item(cluster, row, why(row.name, row.status), now)
        items.append(item)
    return to_json({"items": items, "nextAfter": next_after})


def _sound_item(
    cluster: GPUCluster, t: Sequence[Any], why: Callable[[str, str], Status | None], now: float
) -> dict[str, Any] | None:
    """The item of a stored row read strictly, as ``job_row`` would make it; None when a value is not of its
    column's type, or its spec or placement does not decode (``job_row`` marks it corrupt)."""
    if tuple(map(type, t)) not in SOUND_TYPES:
        return None
    (seq, name, queue, kind, gpus, priority, status, reason, message, text, submitted, started, ended, where, exit_code,
     restarts) = t  # fmt: skip
    try:
        doc = stored_doc(text)
    except (ValueError, TypeError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    placement = None
    if where:
        try:
            placement = decode_placement(name, where)
        except (ValueError, TypeError, KeyError, IndexError, RecursionError):
            return None
    reason, message = shown_reason_of(status, reason, message, why(name, status), now)
    return _item(cluster, seq, name, queue, kind, gpus, priority, status, reason, message, doc, submitted, started,
                 ended, placement, exit_code, restarts)  # fmt: skip


def _row_item(cluster: GPUCluster, row: JobRow, why: Status | None, now: float) -> dict[str, Any]:
    reason, message = shown_reason_of(row.status, row.reason, row.message, why, now)
    return _item(cluster, row.seq, row.name, row.queue, row.kind, row.gpus, row.priority, row.status, reason,
                 message, row.doc, row.submitted, row.started, row.ended, row.placement, row.exit_code,
                 row.restarts)  # fmt: skip


def _item(
    cluster: GPUCluster,
    seq: int,
    name: str,
    queue: str,
    kind: str,
    gpus: Any,
    priority: int,
    status: str,
    reason: str,
    message: str,
    doc: dict[str, Any],
    submitted: Any,
    started: Any,
    ended: Any,
    placement: Placement | None,
    exit_code: int | None,
    restarts: int,
) -> dict[str, Any]:
    """``JobOut``'s keys, in its order, with its values as its fields validate them."""
    return {
        "name": name,
        "queue": queue,
        "kind": kind,
        "gpus": _float(gpus),
        "priority": priority,
        "status": status,
        "reason": reason,
        "message": message,
        "submitted": _float(submitted),
        "started": _float(started),
        "ended": _float(ended),
        "exitCode": exit_code,
        "restarts": restarts,
        "placement": _placement(cluster, placement),
        "spec": doc,
        "run": seq,
        "earlierRunCount": None,
        "earlierRuns": None,
    }


def _float(v: Any) -> Any:
    """As a ``float`` field of ``JobOut`` validates it: an int becomes a float (``4`` is said ``4.0``)."""
    return float(v) if type(v) is int else v


def _placement(cluster: GPUCluster, p: Placement | None) -> dict[str, Any] | None:
    if p is None:
        return None
    racks, nodes = merged_slices(cluster, p)
    return {
        "racks": racks,
        "nodes": [{"node": n, "rack": r, "gpus": gpus, "milliPerGpu": milli} for n, r, gpus, milli in nodes],
        "gpus": p.gpu_milli / MILLI_PER_GPU,
    }
