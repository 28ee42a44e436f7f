"""``GET /v1/jobs``'s page built from plain values (service/job_list.py) is, byte for byte, what the JobOut
models give (``JobList(items=[job_out(...)]).model_dump_json()``), for every kind of row a page can hold.

The cluster: one rack of two 4-GPU nodes::

    rack r0:  n0 [g0 g1 g2 g3]   n1 [g0 g1 g2 g3]
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.topology import GPUCluster
from rackscale.scheduler.status import Code, Reason, Status
from rackscale.service.job_list import job_list_json
from rackscale.service.phase import ACTIVE, JobPhase
from rackscale.service.store import JobRow
from rackscale.service.views import JobList, job_out

CLUSTER = GPUCluster.uniform(regions=1, racks_per_region=1, nodes_per_rack=2, gpus_per_node=4)
NOW = 1_764_900_000.0  # 2025-12-05 02:00 UTC: a service clock in Unix seconds

# A live reason whose time the API says as a clock time ("from 04:00 UTC, in 2 h").
RESERVED = Status(
    Code.WAIT,
    Reason.RESERVATION,
    "holds racks r0 for a gang expected to start in 2 h",
    "backfill",
    at=NOW + 7200,
    when="in 2 h",
)
FULL = Status(Code.UNSCHEDULABLE, Reason.INSUFFICIENT_GPUS, "needs 8 GPUs, 2 whole GPUs free", "topology-pack")


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """A stored row, built fluently: ``Row().running(...)``."""

    seq: int = 1
    name: str = "j1"
    status: str = JobPhase.PENDING.value
    gpus: float = 4.0
    started: float | None = None
    ended: float | None = None
    placement: Placement | None = None
    exit_code: int | None = None
    doc: dict[str, Any] = field(default_factory=lambda: {"name": "j1", "kind": "training", "gpus": 4})
    corrupt: str | None = None

    def running(self, *allocs: NodeAlloc) -> Row:
        return replace(
            self,
            status=JobPhase.RUNNING.value,
            started=NOW - 60,
            placement=Placement(self.name, allocs, len(allocs)),
        )

    def row(self) -> JobRow:
        return JobRow(
            seq=self.seq,
            name=self.name,
            queue="team-a",
            kind="training",
            gpus=self.gpus,
            priority=1_000_000,
            status=self.status,
            reason="Queued",
            message="waiting for the next scheduling cycle",
            doc=self.doc,
            submitted=NOW - 3600,
            started=self.started,
            ended=self.ended,
            placement=self.placement,
            exit_code=self.exit_code,
            restarts=0,
            corrupt=self.corrupt,
        )


WHOLE = NodeAlloc(0, (0, 1, 2, 3), 1000, 0, 0)
TWO_MORE = NodeAlloc(1, (1, 3), 1000, 0, 0)
SHARES = (NodeAlloc(1, (2,), 250, 100, 64), NodeAlloc(1, (2,), 250, 100, 64), NodeAlloc(1, (0,), 500, 0, 0))

CASES = {
    "pending, live reason with a time": (Row(), RESERVED),
    "pending, live reason": (Row(), FULL),
    "pending, no live reason yet": (Row(), None),
    "running over two nodes (a live reason is not shown)": (Row().running(WHOLE, TWO_MORE), FULL),
    "running on shares of GPUs": (Row(gpus=1.0).running(*SHARES), None),
    "ended, with whole-number times and GPUs": (
        replace(Row(gpus=4).running(WHOLE), status=JobPhase.FAILED.value, started=NOW - 9, ended=int(NOW), exit_code=3),
        None,
    ),
    "corrupt record": (
        Row(doc={}, corrupt="doc does not decode", status=JobPhase.PENDING.value),
        FULL,
    ),
    "spec with nesting, big numbers and non-ASCII": (
        Row(doc={"name": "j1", "labels": {"team": "équipe", "n": 2**70}, "args": [1.5e-7, None, True, ["x"]]}),
        None,
    ),
}


def _expected(rows: list[JobRow], whys: dict[str, Status | None], next_after: int | None) -> bytes:
    def why(r: JobRow) -> Status | None:
        return whys.get(r.name) if r.status in ACTIVE else None

    items = [job_out(CLUSTER, r, why=why(r), now=NOW) for r in rows]
    return JobList(items=items, next_after=next_after).model_dump_json().encode()


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_a_row_reads_as_its_jobout(case: str) -> None:
    built, live = CASES[case]
    row = built.row()
    got = job_list_json(CLUSTER, [row], why=lambda r: live if r.status in ACTIVE else None, now=NOW, next_after=None)
    assert got == _expected([row], {row.name: live}, None)


def test_a_page_of_every_kind_reads_as_its_joblist() -> None:
    rows, whys = [], {}
    for i, (built, live) in enumerate(CASES.values()):
        row = replace(built, seq=i + 1, name=f"j{i}").row()
        rows.append(row)
        whys[row.name] = live
    got = job_list_json(
        CLUSTER, rows, why=lambda r: whys.get(r.name) if r.status in ACTIVE else None, now=NOW, next_after=8
    )
    assert got == _expected(rows, whys, 8)
    page = json.loads(got)
    assert page["nextAfter"] == 8 and len(page["items"]) == len(CASES)
    # The live reason's time is said as a clock time, as the single job's view says it.
    assert page["items"][0]["message"] == "holds racks r0 for a gang expected to start from 04:00 UTC, in 2 h"
