"""The store: conditional status changes (a cancel and a placement racing for one job: the first commit
wins), the event log, and the integrity check."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackscale.model.placement import NodeAlloc, Placement
from rackscale.service.live import COMPLETED, FAILED, PREEMPTED, SCHEDULED, WAITING, Change
from rackscale.service.store import DuplicateJob, Store


def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'db.sqlite'}")


def add(s: Store, name: str, t: float = 0.0) -> None:
    s.insert_job(name=name, queue="q", kind="training", gpus=4, priority=0, doc={"name": name}, submitted=t)


def place(name: str, node: int = 0) -> Placement:
    return Placement(name, (NodeAlloc(node, (0, 1, 2, 3)),), 1)


@pytest.mark.parametrize(
    ("history", "change", "applies", "status"),
    [
        pytest.param([], SCHEDULED, True, "running", id="pending->running"),
        pytest.param([SCHEDULED], SCHEDULED, False, "running", id="scheduled-twice"),
        pytest.param([SCHEDULED], PREEMPTED, True, "pending", id="running->pending"),
        pytest.param([], PREEMPTED, False, "pending", id="preempt-a-queued-job"),
        pytest.param([SCHEDULED], COMPLETED, True, "completed", id="running->completed"),
        pytest.param([], COMPLETED, False, "pending", id="complete-a-queued-job"),
        pytest.param([], FAILED, True, "failed", id="pending->failed"),
        pytest.param([SCHEDULED, COMPLETED], FAILED, False, "completed", id="fail-after-the-end"),
        pytest.param([], WAITING, True, "pending", id="waiting-keeps-pending"),
        pytest.param(["cancel"], SCHEDULED, False, "cancelled", id="cancelled-first-wins"),
    ],
)
def test_transitions(tmp_path: Path, history: list[str], change: str, applies: bool, status: str) -> None:
    s = store(tmp_path)
    add(s, "j")
    for i, h in enumerate(history):
        if h == "cancel":
            s.cancel("j", float(i + 1))
        else:
            s.apply([Change("j", h, float(i + 1), h, h, place("j") if h == SCHEDULED else None)])
    rejected = s.apply([Change("j", change, 10.0, "R", "m", place("j") if change == SCHEDULED else None)])
    assert (rejected == set()) is applies
    row = s.get("j")
    assert row is not None and row.status == status
    if applies:
        assert s.events("j")[-1].type == change


def test_preemption_counts_a_restart_and_drops_the_placement(tmp_path: Path) -> None:
    s = store(tmp_path)
    add(s, "j")
    s.apply([Change("j", SCHEDULED, 1.0, "", "", place("j"))])
    assert (row := s.get("j")) is not None and row.placement == place("j")
    s.apply([Change("j", PREEMPTED, 2.0, "Preempted", "by x")])
    row = s.get("j")
    assert row is not None and row.restarts == 1 and row.placement is None and row.status == "pending"


def test_duplicates_are_refused_and_nothing_is_half_written(tmp_path: Path) -> None:
    s = store(tmp_path)
    add(s, "j")
    with pytest.raises(DuplicateJob):
        add(s, "j", 5.0)
    assert [e.type for e in s.events("j")] == ["submitted"]
    assert s.count_by_status() == {"pending": 1}


def test_check_finds_a_gpu_held_twice(tmp_path: Path) -> None:
    s = store(tmp_path)
    add(s, "a")
    add(s, "b")
    s.apply([Change("a", SCHEDULED, 1.0, "", "", place("a")), Change("b", SCHEDULED, 1.0, "", "", place("b", 1))])
    assert s.check() == []
    c = store(tmp_path)  # a second handle on the same file sees the same rows
    assert {r.name for r in c.jobs(status=["running"])} == {"a", "b"}
    add(s, "c")
    s.apply([Change("c", SCHEDULED, 2.0, "", "", place("c", 1))])
    assert any("held by both" in p for p in s.check())


def test_paging_and_filters(tmp_path: Path) -> None:
    s = store(tmp_path)
    for i in range(7):
        add(s, f"j{i}")
    s.cancel("j3", 1.0)
    first = s.jobs(limit=3)
    assert [r.name for r in first] == ["j0", "j1", "j2"]
    assert [r.name for r in s.jobs(after=first[-1].seq, limit=3)] == ["j3", "j4", "j5"]
    assert [r.name for r in s.jobs(status=["cancelled"])] == ["j3"]
    assert s.latest_time() == 1.0
    assert s.count_by_queue(["pending", "cancelled"]) == {"q": {"pending": 6, "cancelled": 1}}
