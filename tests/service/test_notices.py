"""NOTICE changes in the service: the store logs each as an event of the job's run and leaves the row alone
(phase, placement, reason, message); the runner commits the drain's notices and the autoscaler's holds,
once each, and acts on none of them (no backend call)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.service.conftest import HandClock

from rackscale.backends.sim import SimBackend
from rackscale.host.autoscale import Load, NoLoad, Reading
from rackscale.host.drains import HoldOrder, NodeHold
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import LoadMetric
from rackscale.service.live import COMPLETED, NOTICE, PREEMPTED, SCHEDULED, Change, LiveCluster
from rackscale.service.load_signal import LiveAutoscaler
from rackscale.service.runner import Runner, spec_of
from rackscale.service.store import Store

# 2 racks x 2 nodes x 4 GPUs.
CLUSTER = GPUCluster.uniform(name="notices", racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)
P = Placement("j", (NodeAlloc(0, (0, 1, 2, 3)),), 1)


def add(s: Store, name: str) -> None:
    s.insert_job(name=name, queue="q", kind="training", gpus=4, priority=0, doc={"name": name}, submitted=0.0)


def row_view(s: Store, name: str) -> tuple[Any, ...]:
    r = s.get(name)
    assert r is not None
    return (r.status, r.reason, r.message, r.placement, r.restarts, r.started, r.ended)


# Each case: the job's history before the notice, whether the notice is logged.
HISTORIES = [
    ([], True),
    ([Change("j", SCHEDULED, 1.0, "Scheduled", "on r000-n00", P)], True),
    (
        [Change("j", SCHEDULED, 1.0, "Scheduled", "on r000-n00", P), Change("j", COMPLETED, 2.0, "Completed", "ok")],
        False,
    ),
    (["cancel"], False),
]
HISTORY_IDS = ["pending", "running", "completed", "cancelled"]


def check_notice(s: Store, history: list[Change | str], logged: bool) -> None:
    """A notice after ``history``: logged as an event of the run (or dropped, the run over), never
    rejected, and the row as it was."""
    add(s, "j")
    for h in history:
        if h == "cancel":
            s.cancel("j", 1.5)
        else:
            assert isinstance(h, Change) and s.apply([h]) == set()
    before = row_view(s, "j")
    why = "draining node r000-n00 (firmware): stopped and requeued in 10 min unless it ends first"
    assert s.apply([Change("j", NOTICE, 5.0, "Draining", why)]) == set()  # nothing for the caller to undo
    assert row_view(s, "j") == before
    last = s.events("j")[-1]
    if logged:
        assert (last.type, last.reason, last.message, last.time) == ("notice", "Draining", why, 5.0)
    else:
        assert last.type != "notice"


@pytest.mark.parametrize(("history", "logged"), HISTORIES, ids=HISTORY_IDS)
def test_a_notice_is_an_event_of_the_run_only(tmp_path: Path, history: list[Change | str], logged: bool) -> None:
    s = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        check_notice(s, history, logged)
    finally:
        s.close()


def check_batch(s: Store) -> None:
    """Notices keep their place among a batch's other changes of the same job; a long reason is cut to the
    column's 64 characters (PostgreSQL refuses a longer one)."""
    add(s, "j")
    batch = [
        Change("j", SCHEDULED, 1.0, "Scheduled", "placed", P),
        Change("j", NOTICE, 1.0, "N" * 100, "first"),
        Change("j", PREEMPTED, 1.0, "Drained", "drained: fw; requeued"),
        Change("j", NOTICE, 1.0, "After", "second"),
    ]
    assert s.apply(batch) == set()
    got = [(e.type, e.reason, e.message) for e in s.events("j")][1:]
    assert got == [
        ("scheduled", "Scheduled", "placed"),
        ("notice", "N" * 64, "first"),
        ("preempted", "Drained", "drained: fw; requeued"),
        ("notice", "After", "second"),
    ]
    r = s.get("j")
    assert r is not None and (r.status, r.reason, r.restarts, r.placement) == ("pending", "Drained", 1, None)


def test_notices_keep_their_order_in_a_batch(tmp_path: Path) -> None:
    s = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        check_batch(s)
    finally:
        s.close()


class Recording(SimBackend):
    """The simulated backend, recording every stop and start it is asked for."""

    def __init__(self, cluster: GPUCluster) -> None:
        super().__init__(cluster)
        self.calls: list[tuple[str, str]] = []

    def start(self, spec: Any, placement: Placement, *, now: float) -> None:
        self.calls.append(("start", spec.name))
        super().start(spec, placement, now=now)

    def stop(self, job: str, *, now: float) -> None:
        self.calls.append(("stop", job))
        super().stop(job, now=now)


def runner_with(tmp_path: Path, **kw: Any) -> tuple[Runner, Store, Recording, HandClock]:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    backend, clock = Recording(CLUSTER), HandClock()
    runner = Runner(LiveCluster(CLUSTER), store, backend, clock, **kw)  # type: ignore[arg-type]
    runner.recover()
    return runner, store, backend, clock


def submit(runner: Runner, store: Store, doc: dict[str, Any]) -> None:
    name, kind = doc["name"], doc["kind"]
    gpus = doc.get("gpus", doc.get("replicas", 1))
    row = store.insert_job(name=name, queue="q", kind=kind, gpus=gpus, priority=0, doc=doc, submitted=0.0)
    runner.submitted(spec_of(row), row.seq)


def test_the_runner_commits_a_drains_notice_and_stops_the_job_only_at_the_deadline(tmp_path: Path) -> None:
    runner, store, backend, clock = runner_with(tmp_path)
    try:
        submit(runner, store, {"name": "a", "kind": "training", "gpus": 4, "durationEstimateSeconds": 1e6})
        runner.step()
        (node,) = runner.live.state.running["a"].placement.nodes
        placed = row_view(store, "a")
        clock.t = 100.0
        runner.held(HoldOrder(((node, NodeHold(reason="firmware", since=100.0, deadline=160.0)),)))
        [told] = runner.step()
        run = store.get("a")
        assert run is not None and (told.job, told.type, told.reason, told.run) == ("a", NOTICE, "Draining", run.seq)
        assert row_view(store, "a") == placed  # still running where it was, its row untouched
        assert backend.calls == [("start", "a")]  # a notice is not acted on
        clock.t = 160.0
        assert [(c.type, c.reason) for c in runner.step()] == [(PREEMPTED, "Drained"), (SCHEDULED, "Scheduled")]
        assert backend.calls == [("start", "a"), ("stop", "a"), ("start", "a")]
        name = CLUSTER.nodes[node].name
        assert [(e.type, e.reason) for e in store.events("a")] == [
            ("submitted", "Submitted"),
            ("scheduled", "Scheduled"),
            ("notice", "Draining"),
            ("preempted", "Drained"),
            ("scheduled", "Scheduled"),
        ]
        assert (
            store.events("a")[2].message
            == f"draining node {name} (firmware): stopped and requeued in 1 min unless it ends first"
        )
    finally:
        runner.stop()
        store.close()


LOAD = Load(value=3900.0, metric=LoadMetric.TOKENS_PER_SECOND, source="test")


class Scripted:
    """A load source whose answer the test sets (``reading``), counting the reads."""

    def __init__(self) -> None:
        self.reading: Reading = LOAD
        self.reads = 0

    def read(self, query: str, *, metric: LoadMetric, now: float) -> Reading:
        self.reads += 1
        return self.reading


def test_the_autoscalers_hold_is_a_notice_when_it_starts_and_when_it_ends(tmp_path: Path) -> None:
    source = Scripted()
    runner, store, backend, clock = runner_with(tmp_path, autoscaler=LiveAutoscaler(source=source))
    try:
        doc = {
            "name": "chat",
            "kind": "inference",
            "replicas": 2,
            "minReplicas": 1,
            "maxReplicas": 4,
            "autoscale": {"query": "sum(rate(tokens[1m]))", "target": 2000, "metric": "tokens_per_second"},
        }
        submit(runner, store, doc)
        runner.step()  # placed (2 replicas carry 3,900 tokens/s)
        gone = "Prometheus at http://prom:9090 unreachable: ConnectError"
        for t, why in [(15.0, ""), (30.0, gone), (45.0, gone), (60.0, gone), (75.0, ""), (90.0, "")]:
            source.reading = NoLoad(why=why) if why else LOAD
            clock.t = t
            runner.step()
        assert source.reads == 6  # a pass every 15 s from 15 s (at 0 the service did not run yet)
        notices = [(e.time, e.reason, e.message) for e in store.events("chat") if e.type == "notice"]
        assert notices == [
            (30.0, "AutoscaleHeld", f"holding 2 replicas: no load from its query ({gone})"),
            (75.0, "AutoscaleResumed", "reads its load again: the autoscaler follows it (the hold is over)"),
        ]
        r = store.get("chat")
        assert r is not None and (r.status, r.reason) == ("running", "Scheduled")
        assert runner.autoscaler.held == {}
        assert backend.calls == [("start", "chat")]  # held, then 2 replicas still: nothing to act on
    finally:
        runner.stop()
        store.close()
