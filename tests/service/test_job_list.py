"""``GET /v1/jobs``'s page built from plain values (service/job_list.py) is, byte for byte, what the JobOut
models give (``JobList(items=[job_out(...)]).model_dump_json()``), for every kind of row a page can hold.

The cluster: one rack of two 4-GPU nodes::

    rack r0:  n0 [g0 g1 g2 g3]   n1 [g0 g1 g2 g3]
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from rackscale.host.changes import Change, ChangeKind
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.topology import GPUCluster
from rackscale.scheduler.status import Code, Reason, Status
from rackscale.service.job_list import job_list_json, job_page_json
from rackscale.service.phase import ACTIVE, JobPhase
from rackscale.service.store import JobRow, Store
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


# ---------------------------------------------------------------------------------------------- from a store
def _store_of_every_kind(path: Path) -> Store:
    """A real store holding each kind of row a page meets, sound and corrupt: pending, running over two nodes
    and on shares of GPUs, ended with an exit code, a spec with nesting, big numbers and non-ASCII text, and
    rows whose spec is broken JSON, a JSON array, nested past what a reply can carry (json.loads reads it),
    whose placement does not decode, or with a value not of its column's type (text for a number, a BLOB for
    a text)."""
    s = Store(f"sqlite:///{path}")
    docs: dict[str, dict[str, Any]] = {
        "p-reserved": {},
        "p-full": {},
        "p-quiet": {},
        "r-two-nodes": {},
        "r-shares": {},
        "ended": {},
        "rich": {"labels": {"team": "équipe", "n": 2**70}, "args": [1.5e-7, None, True, ["x"]]},
        "bad-doc": {},
        "array-doc": {},
        "deep-doc": {},
        "bad-placement": {},
        "text-gpus": {},
        "text-started": {},
        "blob-queue": {},
    }
    for i, (name, extra) in enumerate(docs.items()):
        doc = {"name": name, "kind": "training", "gpus": 4} | extra
        s.insert_job_later(
            name=name, queue="team-a", kind="training", gpus=4, priority=0, doc=doc, submitted=NOW - 3600 + i
        ).result()

    def placed(name: str, *allocs: NodeAlloc, at: float) -> Change:
        return Change(name, ChangeKind.SCHEDULED, at, "Scheduled", "placed", Placement(name, allocs, len(allocs)))

    s.apply(
        [
            placed("r-two-nodes", WHOLE, TWO_MORE, at=NOW - 60),
            placed("r-shares", *SHARES, at=NOW - 60),
            placed("ended", WHOLE, at=NOW - 9),
            placed("bad-placement", WHOLE, at=NOW - 9),
            placed("text-started", WHOLE, at=NOW - 9),
        ]
    )
    s.apply([Change("ended", ChangeKind.FAILED, float(int(NOW)), "Failed", "exit 3", exit_code=3)])
    s.close()
    con = sqlite3.connect(path)
    con.execute("""UPDATE jobs SET doc = '{"name": "bad-doc", ' WHERE name = 'bad-doc'""")
    con.execute("UPDATE jobs SET doc = '[1, 2]' WHERE name = 'array-doc'")
    con.execute("UPDATE jobs SET doc = ? WHERE name = 'deep-doc'", ('{"a": ' + "[" * 300 + "]" * 300 + "}",))
    con.execute("UPDATE jobs SET placement = '[[' WHERE name = 'bad-placement'")
    # SQLite keeps a value of any type in any column: text where a number belongs, a BLOB for a text.
    con.execute("UPDATE jobs SET gpus = 'four' WHERE name = 'text-gpus'")
    con.execute("UPDATE jobs SET started = 'soon' WHERE name = 'text-started'")
    con.execute("UPDATE jobs SET queue = X'7465616dff' WHERE name = 'blob-queue'")
    con.commit()
    con.close()
    return Store(f"sqlite:///{path}")


def _page_both_ways(s: Store, whys: dict[str, Status], *, limit: int) -> tuple[bytes, bytes]:
    def why(r: JobRow) -> Status | None:
        return whys.get(r.name) if r.status in ACTIVE else None

    rows = s.jobs(limit=limit)
    want = job_list_json(CLUSTER, rows, why=why, now=NOW, next_after=rows[-1].seq)
    got_rows, strict = s.job_tuples(limit=limit)
    got = job_page_json(
        CLUSTER,
        got_rows,
        strict=strict,
        why=lambda name, status: whys.get(name) if status in ACTIVE else None,
        now=NOW,
        next_after=got_rows[-1][0],
    )
    return got, want


def test_a_page_read_as_tuples_is_the_page_read_as_rows(tmp_path: Path) -> None:
    """``GET /v1/jobs``' page from ``Store.job_tuples`` (no JobRow made of a sound row) is byte for byte the
    page made of ``Store.jobs``' rows, corrupt records included; then again once a text that is not UTF-8
    makes the whole page read leniently."""
    s = _store_of_every_kind(tmp_path / "s.db")
    whys = {"p-reserved": RESERVED, "p-full": FULL, "r-two-nodes": FULL}
    try:
        got, want = _page_both_ways(s, whys, limit=100)
        assert got == want
        items = {i["name"]: i for i in json.loads(got)["items"]}
        assert len(items) == 14 and items["p-full"]["message"] == FULL.message
        assert items["rich"]["spec"]["labels"] == {"team": "équipe", "n": 2**70}
        for bad in ("bad-doc", "array-doc", "deep-doc", "bad-placement", "text-gpus", "text-started", "blob-queue"):
            assert items[bad]["message"].startswith("the stored record is corrupt"), items[bad]
        assert items["text-gpus"]["gpus"] == 0.0 and items["text-started"]["started"] is None
        assert (
            items["blob-queue"]["queue"] == "team\ufffd"
            and "queue not of the column's type" in items["blob-queue"]["message"]
        )
        assert items["r-shares"]["placement"]["gpus"] == 1.0 and items["ended"]["exitCode"] == 3
        assert _page_both_ways(s, whys, limit=4)[0] == _page_both_ways(s, whys, limit=4)[1]  # (nextAfter)

        con = sqlite3.connect(tmp_path / "s.db")
        con.execute("UPDATE jobs SET message = CAST(X'646f6e65ff' AS TEXT) WHERE name = 'ended'")
        con.commit()
        con.close()
        assert s.job_tuples(limit=100)[1] is False  # the page reads leniently now
        got, want = _page_both_ways(s, whys, limit=100)
        assert got == want
        assert json.loads(got)["items"][5]["message"] == "the stored record is corrupt: message not valid UTF-8"
    finally:
        s.close()
