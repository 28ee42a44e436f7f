"""A highly available service on a real PostgreSQL: the lease, the fence, and real ``rackscale serve``
replicas on loopback under a submission load (kill -9 of the leader, SIGSTOP past its lease, a restart).

```
   client thread ──POST /v1/jobs──► replica a ──┐            ┌── leader_lease (holder, generation)
                 └─POST /v1/jobs──► replica b ──┴── PostgreSQL ┤
                                                              └── jobs, events (every leader commit fenced)
```
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.deploy.engines import free_port
from tests.service import postgres
from tests.service.conftest import HandClock, small_cluster, wait_for

from rackscale.backends.sim import SimBackend
from rackscale.host.drains import HoldOrder, NodeHold
from rackscale.host.scaling import ScalingSchedule
from rackscale.host.scaling_docs import parse_schedule
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.workload import JobSpec
from rackscale.service.holds_store import encode_hold, hold_key
from rackscale.service.leader import Elector, HighAvailability, LeaderCollector, LeaseTiming, Role
from rackscale.service.live import SCHEDULED, Change, LiveCluster
from rackscale.service.pickup import StorePickup
from rackscale.service.runner import Runner
from rackscale.service.schedules_store import Record, schedule_key, stored_records
from rackscale.service.store import Store
from rackscale.service.store.lease import Fenced, check_fence, read_lease, take_or_renew

pg_url, pg_store = postgres.pg_url, postgres.pg_store  # the shared fixtures (this module gets its own server)

LEASE_S = 5.0  # the default: the takeover times measured here are the documented ones


class Mono:
    """A replica's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def elector(store: Store, replica: str, mono: Mono, lease_s: float = 1.0) -> Elector:
    return Elector(store.engine, replica=replica, timing=LeaseTiming(lease_s=lease_s, renew_s=0.2), clock=mono)


def _doc(name: str) -> dict[str, Any]:
    return {"name": name, "kind": "training", "gpus": 4, "durationEstimateSeconds": 1e7}


def _scheduled(name: str, run: int) -> Change:
    return Change(
        name, SCHEDULED, 1.0, "Scheduled", "placed", Placement(name, (NodeAlloc(0, (0, 1, 2, 3)),), 1), run=run
    )


# ------------------------------------------------------------------------------------------ the lease
def test_one_leader_a_takeover_bumps_the_generation_and_fences_the_old_one(pg_store: Store) -> None:
    ma, mb = Mono(), Mono()
    a, b = elector(pg_store, "a", ma), elector(pg_store, "b", mb)
    assert a.tick(service_time=1.0) and a.generation == 1
    assert not b.tick(service_time=1.0) and b.generation is None  # held by a live leader
    assert a.tick(service_time=2.0) and a.generation == 1  # a renewal keeps the generation
    row = pg_store.insert_job(name="j", queue="q", kind="training", gpus=1, priority=0, doc={}, submitted=0.0)
    scheduled = _scheduled("j", row.seq)
    time.sleep(1.1)  # a stops renewing (paused): the lease expires on the database's clock
    assert b.tick(service_time=3.0) and b.generation == 2
    ma.t += 10.0  # a wakes up: past its renew deadline on its own clock, it acts no more
    assert not a.acting()
    with pytest.raises(Fenced, match="generation 1, the lease is at generation 2"):
        pg_store.apply([scheduled], generation=1)
    got = pg_store.get("j")
    assert got is not None and got.status == "pending"  # nothing of the fenced write was committed
    assert pg_store.apply([scheduled], generation=2) == set()
    assert not a.tick(service_time=4.0) and a.generation is None
    rec = read_lease(pg_store.engine)
    assert rec is not None and (rec.holder, rec.generation) == ("b", 2)


@pytest.mark.parametrize("bounded", [True, False], ids=["bounded-session-freed", "unbounded-blocks-the-take"])
def test_a_leader_frozen_mid_commit_does_not_block_the_takeover(pg_store: Store, bounded: bool) -> None:
    """A leader stopped inside a fenced commit holds the share lock its fence took on the lease row; a
    standby's take of the expired lease waits on that lock. With the replicas' bound
    (idle_in_transaction_s) PostgreSQL ends the frozen session and the take goes through."""
    assert take_or_renew(pg_store.engine, me="a", generation=None, ttl_s=0.2, service_time=0.0) == 1
    # 1.5 s, not the replicas' 2.5 s, to keep the test short; not shorter: the store's own start-up (schema
    # reflection) runs under the bound too, and a loaded CI machine paused it past 0.5 s once
    frozen = Store(pg_store.url, idle_in_transaction_s=1.5 if bounded else None)
    conn = frozen.engine.connect()
    try:
        conn.begin()
        check_fence(conn, 1)  # ... and the leader is SIGSTOPped here, before its commit
        time.sleep(0.3)  # the lease expires
        got: list[int | None] = []
        t = threading.Thread(
            target=lambda: got.append(
                take_or_renew(pg_store.engine, me="b", generation=None, ttl_s=5.0, service_time=0.0)
            ),
            daemon=True,
        )
        t0 = time.monotonic()
        t.start()
        t.join(timeout=4.0)
        if bounded:
            assert got == [2], "the standby did not take the lease"
            assert time.monotonic() - t0 < 3.0
        else:
            assert got == [] and t.is_alive()  # what the bound is for: the take waits on the frozen session
    finally:
        with contextlib.suppress(Exception):
            conn.close()
        if not bounded:  # end the frozen session so the blocked take can finish
            frozen.engine.dispose()
            t.join(timeout=10)
        frozen.close()


@pytest.mark.parametrize(
    ("released", "takes"),
    [(False, False), (True, True)],
    ids=["same-id-restart-waits-for-the-expiry", "a-released-lease-is-taken-at-once"],
)
def test_a_new_candidate_takes_only_a_free_lease(pg_store: Store, released: bool, takes: bool) -> None:
    old = elector(pg_store, "a", Mono(), lease_s=30.0)
    assert old.tick(service_time=0.0)
    if released:
        old.resign()
    again = elector(pg_store, "a", Mono(), lease_s=30.0)  # a restarted process of the same replica id
    assert again.tick(service_time=0.0) is takes
    assert again.generation == (2 if takes else None)


def test_a_standby_that_takes_over_keeps_the_fires_the_old_leader_recorded_and_fires_none_again(
    pg_store: Store,
) -> None:
    """A standby read the schedules' rows at its start; the leader fired a step since. On taking over, the
    new leader starts from the rows as they are then: the step in force is applied again on its new live
    cluster, not recorded as a fire (it kept its start-up copy of the history: it wrote that over the row,
    losing the old leader's fire, and recorded the step in force a second time)."""
    t0 = 1_800_000_000.0  # a whole ten minutes: every-10-minutes fires at t0, t0 + 600, ...
    tens = parse_schedule(
        {
            "apiVersion": "rackscale.io/v1",
            "kind": "ScalingSchedule",
            "metadata": {"name": "tens"},
            "spec": {"target": {"queue": "batch"}, "steps": [{"cron": "*/10 * * * *", "quotaGpus": 8}]},
        },
        source="test",
    )
    assert elector(pg_store, "a", Mono()).tick(service_time=t0)  # generation 1, a 1 s lease
    leader, _ = _runner(pg_store, Guard(generation=1, acting=True))
    leader.clock.t = t0 + 30  # type: ignore[attr-defined]
    pg_store.set_meta(schedule_key("tens"), Record(tens).encode())  # put through any replica's API
    leader.step()
    cluster = small_cluster(1)
    standby = Runner(LiveCluster(cluster), pg_store, Recording(cluster), HandClock(), interval_s=0.01)  # type: ignore[arg-type]
    standby.schedules.restore()  # its start-up, as mount_schedules does
    leader.clock.t = t0 + 630  # type: ignore[attr-defined]
    leader.step()
    before = leader.schedules.get("tens")
    assert before is not None and [(f.at, f.step) for f in before.history] == [(t0, 0), (t0 + 600, 0)]

    time.sleep(1.1)  # the leader stops; its lease expires
    assert elector(pg_store, "b", Mono()).tick(service_time=t0 + 640)  # generation 2
    standby.guard = Guard(generation=2, acting=True)
    standby.pickup = StorePickup(pg_store, every_s=0.0, node_names=[n.name for n in cluster.nodes])
    clock = HandClock()
    clock.t = t0 + 640
    standby.take_over(LiveCluster(cluster), clock)  # type: ignore[arg-type]
    standby.step()
    assert standby.live.schedules["tens"].schedule == tens  # on the new live cluster, in force
    after = stored_records(pg_store)["tens"]
    assert after.history == before.history  # the row as the old leader left it
    assert standby.schedules.get("tens") == before  # and the new leader's GET /v1/schedules shows it
    assert standby.schedules.fired["tens"] == 0


# ------------------------------------------------------------------------------------------ the runner
class Recording(SimBackend):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.starts: list[str] = []

    def start(self, spec: JobSpec, placement: Placement, *, now: float) -> None:
        self.starts.append(spec.name)
        super().start(spec, placement, now=now)


class Guard:
    def __init__(self, generation: int, acting: bool) -> None:
        self.generation, self._acting = generation, acting

    def acting(self) -> bool:
        return self._acting


def _runner(store: Store, guard: Guard) -> tuple[Runner, Recording]:
    cluster = small_cluster(1)
    backend = Recording(cluster)
    runner = Runner(LiveCluster(cluster), store, backend, HandClock(), interval_s=0.01)  # type: ignore[arg-type]
    runner.guard = guard
    runner.pickup = StorePickup(store, every_s=0.0, node_names=[n.name for n in cluster.nodes])
    return runner, backend


@pytest.mark.parametrize(
    ("generation", "acting", "started", "fenced"),
    [(1, True, ["p"], False), (0, True, [], True), (1, False, [], False)],
    ids=["the-leader-starts-a-job-only-the-store-had", "a-stale-generation-is-fenced", "past-the-deadline-no-step"],
)
def test_the_runner_picks_up_and_is_fenced(
    pg_store: Store, generation: int, acting: bool, started: list[str], fenced: bool
) -> None:
    assert elector(pg_store, "x", Mono()).tick(service_time=0.0)  # the lease at generation 1
    runner, backend = _runner(pg_store, Guard(generation=generation, acting=acting))
    # Committed by another replica's API: never in this runner's inbox.
    pg_store.insert_job(name="p", queue="q", kind="training", gpus=4, priority=0, doc=_doc("p"), submitted=0.0)
    runner.step()
    assert backend.starts == started
    assert (runner.fenced is not None) is fenced
    row = pg_store.get("p")
    assert row is not None and row.status == ("running" if started else "pending")


def test_a_cancel_through_another_replica_stops_the_running_job(pg_store: Store) -> None:
    e = elector(pg_store, "x", Mono())
    assert e.tick(service_time=0.0)
    runner, backend = _runner(pg_store, Guard(generation=1, acting=True))
    pg_store.insert_job(name="c", queue="q", kind="training", gpus=4, priority=0, doc=_doc("c"), submitted=0.0)
    runner.step()
    assert backend.running() == {"c"}
    pg_store.cancel("c", 1.0)  # the other replica's API: the store only
    runner.step()
    assert backend.running() == frozenset()


def test_a_drain_through_another_replica_stops_the_job_and_its_uncordon_frees_the_node(pg_store: Store) -> None:
    """The hold rows are the truth: what another replica's API committed reaches the leader's host."""
    assert elector(pg_store, "x", Mono()).tick(service_time=0.0)
    runner, backend = _runner(pg_store, Guard(generation=1, acting=True))
    pg_store.insert_job(name="d", queue="q", kind="training", gpus=4, priority=0, doc=_doc("d"), submitted=0.0)
    runner.step()
    (node,) = set(runner.live.state.running["d"].placement.nodes)
    name = runner.live.cluster.nodes[node].name
    pg_store.set_meta(hold_key(name), encode_hold(NodeHold(reason="firmware", since=0.0, deadline=0.0)))
    runner.step()
    assert runner.live.holds == {node: NodeHold(reason="firmware", since=0.0, deadline=0.0)}
    # Stopped, requeued and placed again in the same step, on another node of the rack.
    assert backend.starts == ["d", "d"]
    assert node not in runner.live.state.running["d"].placement.nodes
    pg_store.delete_meta(hold_key(name))
    runner.step()
    assert runner.live.holds == {}
    assert runner.live.state.node_cordoned[node] is False


def test_a_leaders_stale_hold_order_is_not_applied_over_the_store(pg_store: Store) -> None:
    """An order still on its way (a drain, since uncordoned in the store) must not stop the job: with
    replicas, the runner applies the stored holds only."""
    assert elector(pg_store, "x", Mono()).tick(service_time=0.0)
    runner, backend = _runner(pg_store, Guard(generation=1, acting=True))
    pg_store.insert_job(name="s", queue="q", kind="training", gpus=4, priority=0, doc=_doc("s"), submitted=0.0)
    runner.step()
    (node,) = set(runner.live.state.running["s"].placement.nodes)
    runner.held(HoldOrder(((node, NodeHold(reason="old", since=0.0, deadline=0.0)),)))  # no row: uncordoned since
    runner.step()
    assert runner.live.holds == {} and backend.running() == {"s"}


def test_a_standby_shows_the_leaders_committed_state_not_an_empty_model(pg_store: Store) -> None:
    """The standby's picture (service/mirror.py): the leader's running job on its GPUs, a pending one, a
    drained node; and it never acted (no backend call, no store write)."""
    assert elector(pg_store, "a", Mono()).tick(service_time=0.0)
    leader, _ = _runner(pg_store, Guard(generation=1, acting=True))
    for name in ("m", "w"):
        doc = {**_doc(name), "gpus": 4 * len(leader.live.cluster.nodes)} if name == "w" else _doc(name)
        pg_store.insert_job(name=name, queue="q", kind="training", gpus=doc["gpus"], priority=0, doc=doc, submitted=0.0)
    leader.step()
    placed = leader.live.state.running["m"].placement
    pg_store.set_meta(hold_key(leader.live.cluster.nodes[-1].name), encode_hold(NodeHold(reason="fw", since=0.0)))
    events = len(pg_store.events("m"))

    cluster = small_cluster(1)
    backend = Recording(cluster)
    standby = Runner(LiveCluster(cluster), pg_store, backend, HandClock(), interval_s=0.01)  # type: ignore[arg-type]
    ha = HighAvailability(
        store=pg_store,
        runner=standby,
        elector=elector(pg_store, "b", Mono()),
        speed=1.0,
        new_live=lambda: LiveCluster(cluster),
    )
    ha.tick()  # a holds the lease: b stands by, and builds its picture (on a thread of its own)
    assert ha.role is Role.STANDBY
    wait_for(lambda: ha.mirrored is not None, what="the standby's picture")
    assert ha.mirrored is not None
    with standby.reading() as live:
        assert live.state.running["m"].placement == placed
        assert "w" in live.specs and "w" not in live.state.running  # waiting, as on the leader
        assert live.state.node_cordoned[len(cluster.nodes) - 1]
    assert (ha.mirrored.running, ha.mirrored.pending) == (1, 1)
    assert backend.starts == [] and len(pg_store.events("m")) == events

    # A build that finishes after this replica started leading is not swapped in over its live cluster.
    before = standby.live
    stale = ha._epoch
    ha._epoch += 1  # what _promote does first
    ha._build_mirror(stale)
    assert standby.live is before


@pytest.mark.parametrize(
    ("holder", "renews", "duplicate"),
    [("a", True, True), ("a", False, False), ("b", True, False)],
    ids=["a-twin-renews-under-our-id", "a-killed-predecessors-lease-runs-out", "another-id-leads"],
)
def test_a_standby_tells_a_twin_with_its_replica_id_from_its_own_past_lease(
    pg_store: Store, caplog: pytest.LogCaptureFixture, holder: str, renews: bool, duplicate: bool
) -> None:
    """Two replicas started with one id: the other one's lease looks like this one's own. A lease under our
    id that is renewed while this process does not hold it is a twin; one that only runs out is what this
    process's killed predecessor left (a restart within the lease), and says nothing."""
    other = elector(pg_store, holder, Mono(), lease_s=30.0)
    assert other.tick(service_time=0.0)
    cluster = small_cluster(1)
    runner = Runner(LiveCluster(cluster), pg_store, Recording(cluster), HandClock(), interval_s=0.01)  # type: ignore[arg-type]
    ha = HighAvailability(
        store=pg_store,
        runner=runner,
        elector=elector(pg_store, "a", Mono(), lease_s=30.0),
        speed=1.0,
        new_live=lambda: LiveCluster(cluster),
    )
    with caplog.at_level("ERROR", logger="rackscale.service.leader"):
        for _ in range(3):
            ha.tick()
            assert ha.role is Role.STANDBY  # a live lease, whoever holds it, is never taken
            time.sleep(0.01)
            if renews:
                assert other.tick(service_time=0.0)
    assert ha.duplicate_id is duplicate
    assert ha.status()["duplicateReplicaId"] is duplicate
    gauge = {m.name: m.samples[0].value for m in LeaderCollector(ha).collect()}
    assert gauge["rackscale_leader_duplicate_replica_id"] == (1.0 if duplicate else 0.0)
    told = [r.getMessage() for r in caplog.records if "--replica-id" in r.getMessage()]
    assert len(told) == (1 if duplicate else 0), told  # once, not at every tick
    wait_for(lambda: not ha._mirroring, what="the standby's picture")


def _schedule(cron: str) -> ScalingSchedule:
    return parse_schedule(
        {
            "apiVersion": "rackscale.io/v1",
            "kind": "ScalingSchedule",
            "metadata": {"name": "nights"},
            "spec": {"target": {"queue": "batch"}, "steps": [{"cron": cron, "quotaGpus": 8}]},
        },
        source="test",
    )


def test_a_schedule_through_another_replica_reaches_the_leaders_host_and_its_delete_too(pg_store: Store) -> None:
    assert elector(pg_store, "x", Mono()).tick(service_time=0.0)
    runner, _ = _runner(pg_store, Guard(generation=1, acting=True))
    first, second = _schedule("0 22 * * *"), _schedule("0 23 * * *")
    for s in (first, second):  # a put, then a replacing put, by the other replica's API: rows only
        pg_store.set_meta(schedule_key("nights"), Record(s).encode())
        runner.step()
        assert runner.live.schedules["nights"].schedule == s
        rec = runner.schedules.get("nights")
        assert rec is not None and rec.schedule == s  # the leader's GET /v1/schedules shows it too
    pg_store.delete_meta(schedule_key("nights"))
    runner.step()
    assert "nights" not in runner.live.schedules and runner.schedules.get("nights") is None


# ------------------------------------------------------------------------------------------ real replicas
class Replica:
    """``rackscale serve --replica-id NAME`` in a subprocess on loopback (sim backend, clock 1000x)."""

    def __init__(self, name: str, db_url: str, root: Path) -> None:
        self.name, self.db_url, self.port = name, db_url, free_port()
        self.data_dir, self.log = root / name, root / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        argv = [sys.executable, "-c", "from rackscale.cli.app import main; main()", "serve", "--no-auth"]
        argv += ["--port", str(self.port), "--data-dir", str(self.data_dir), "--db-url", self.db_url]
        argv += ["--replica-id", self.name, "--lease-seconds", f"{LEASE_S:g}", "--speed", "1000", "--racks", "2"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            self.proc.wait(timeout=10)

    def leader(self) -> dict[str, Any] | None:
        try:
            got: dict[str, Any] = httpx.get(f"{self.url}/v1/leader", timeout=1.0).json()
        except (httpx.HTTPError, ValueError):
            return None
        return got

    def wait_role(self, role: str, timeout: float = 30.0) -> float:
        t0 = time.monotonic()
        wait_for(
            lambda: (s := self.leader()) is not None and s["role"] == role, timeout=timeout, what=f"{self.name} {role}"
        )
        return time.monotonic() - t0


class Load:
    """One client thread per replica, submitting small training jobs; ``acked``: the names answered 2xx."""

    def __init__(self, replicas: list[Replica]) -> None:
        self.acked: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(r,), daemon=True) for r in replicas]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)

    def _run(self, r: Replica) -> None:
        i = 0
        with httpx.Client(timeout=2.0) as c:
            while not self._stop.is_set():
                name = f"{r.name}-{i:05d}"
                i += 1
                doc = {"name": name, "kind": "training", "gpus": 4, "durationEstimateSeconds": 400}
                try:
                    if c.post(f"{r.url}/v1/jobs", json=doc).status_code // 100 == 2:
                        self.acked.append(name)
                except httpx.HTTPError:
                    pass  # a dead or paused replica: not acknowledged
                time.sleep(0.02)


def test_two_replicas_kill9_sigstop_restart_under_load(pg_store: Store, tmp_path: Path) -> None:
    a, b = Replica("a", pg_store.url, tmp_path), Replica("b", pg_store.url, tmp_path)
    try:
        a.start()
        a.wait_role("leader")
        b.start()
        b.wait_role("standby")
        with Load([a, b]) as load:
            time.sleep(2.0)
            a.signal(signal.SIGKILL)
            kill9 = b.wait_role("leader", timeout=15)
            a.start()  # the same replica id: a standby (b holds the lease)
            a.wait_role("standby")
            time.sleep(1.0)
            b.signal(signal.SIGSTOP)
            stopped = a.wait_role("leader", timeout=15)
            woke = time.time()
            b.signal(signal.SIGCONT)
            b.wait_role("standby", timeout=10)
            time.sleep(1.0)
            old = b.leader()
        print(f"takeover after kill -9: {kill9:.2f} s; after SIGSTOP: {stopped:.2f} s (lease {LEASE_S:g} s)")
        assert kill9 <= 10.0 and stopped <= 10.0
        # The old leader, awake again, sent nothing to its backend (and its fenced writes, if any, failed).
        assert old is not None and old["generation"] is None
        assert old["lastAction"] is None or old["lastAction"] < woke
        # Every acknowledged job reached the leader, whichever replica took it, and ran to its end.
        acked = set(load.acked)
        assert len(acked) > 100 and {n[0] for n in acked} == {"a", "b"}

        def done() -> bool:
            rows = {r.name: r.status for r in pg_store.jobs(limit=10**9)}
            return all(rows.get(n) == "completed" for n in acked)

        wait_for(done, timeout=30, what="every acknowledged job completed")
    finally:
        for r in (a, b):
            if r.proc is not None and r.proc.poll() is None:
                r.proc.send_signal(signal.SIGCONT)
                r.proc.kill()
                r.proc.wait(timeout=10)
    assert pg_store.check() == []  # no GPU held by two running jobs, no name with two active runs
    starts: dict[int, int] = {}
    for row in pg_store.jobs(limit=10**9):
        kinds = [e.type for e in pg_store.events(row.name, run=row.seq)]
        starts[row.seq] = kinds.count("scheduled") - kinds.count("preempted")
    assert set(starts.values()) <= {1}, "a job started twice (or never, though completed)"


@pytest.mark.parametrize("names", [("a",), ("a", "b")], ids=["one-replica-leads-again", "leader-and-standby"])
def test_a_database_restart_under_load_needs_no_restart_of_the_replicas(tmp_path: Path, names: tuple[str, ...]) -> None:
    """PostgreSQL stopped (fast shutdown: its sessions ended) for longer than the lease under submissions to
    every replica, then started again: the leader steps down, and afterwards one replica leads again (the one
    that led before included: alone, it must), every replica takes work again (a standby's API refused it for
    ever: nothing on a standby retried the store), no acknowledged job is lost or started twice, and the outage
    is told in a line when it begins and one when it ends, not a traceback a second."""
    root = Path(tempfile.mkdtemp(prefix="rackscale-pg-"))  # as root the server runs as `postgres`: not tmp_path
    server = postgres.PostgresServer(root)
    replicas = [Replica(n, server.url, tmp_path) for n in names]
    try:
        server.start()
        replicas[0].start()
        replicas[0].wait_role("leader")
        for r in replicas[1:]:
            r.start()
            r.wait_role("standby")
        with Load(replicas) as load:
            time.sleep(2.0)
            server.stop()
            time.sleep(LEASE_S + 2.0)  # past the renew deadline and the lease: nobody leads
            assert all(s is not None and s["role"] == "standby" for s in (r.leader() for r in replicas))
            reads = {r.name: httpx.get(f"{r.url}/v1/jobs", timeout=5.0).status_code for r in replicas}
            server.start()

            def recovered() -> bool:
                roles = [s["role"] if (s := r.leader()) is not None else None for r in replicas]
                ready = [httpx.get(f"{r.url}/readyz", timeout=2.0).status_code for r in replicas]
                return roles.count("leader") == 1 and ready == [200] * len(replicas)

            wait_for(recovered, timeout=20, what="one leader again, every replica ready")
            time.sleep(1.0)
        assert reads == dict.fromkeys(names, 503)  # the cause and the fix, not a bare 500
        took = {r.name: httpx.post(f"{r.url}/v1/jobs", json=_doc(f"after-{r.name}")).status_code for r in replicas}
        assert took == dict.fromkeys(names, 201)
        acked = set(load.acked)
        assert len(acked) > 20
        store = Store(server.url)
        try:
            wait_for(
                lambda: all((row := store.get(n)) is not None and row.status == "completed" for n in acked),
                timeout=30,
                what="every acknowledged job completed",
            )
            assert store.check() == []
            for name in acked:
                kinds = [e.type for e in store.events(name)]
                assert kinds.count("scheduled") - kinds.count("preempted") == 1, f"{name} started twice: {kinds}"
        finally:
            store.close()
    finally:
        for r in replicas:
            if r.proc is not None and r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait(timeout=10)
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    logs = {r.name: r.log.read_text(errors="replace") for r in replicas}
    assert {n: text.count("Traceback") for n, text in logs.items()} == dict.fromkeys(names, 0)
    assert all(text.count("lease: cannot reach the database") == 1 for text in logs.values())


def test_a_leader_cut_off_by_a_frozen_database_says_it_does_not_lead(tmp_path: Path) -> None:
    """PostgreSQL frozen (every process SIGSTOPped: its sessions stay open, nothing answers): the leader's
    election statement waits, and past its renew deadline it acts no more; `/v1/leader` and
    `rackscale_leader` must say so, not `leader` for as long as the statement hangs. Once the database
    answers again it leads again."""
    root = Path(tempfile.mkdtemp(prefix="rackscale-pg-"))  # as root the server runs as `postgres`: not tmp_path
    server = postgres.PostgresServer(root)
    a = Replica("a", server.url, tmp_path)
    try:
        server.start()
        a.start()
        a.wait_role("leader")
        server.freeze()
        try:
            time.sleep(LEASE_S)  # past the renew deadline (2/3 of the lease)
            shown = a.leader()
            metrics = httpx.get(f"{a.url}/metrics", timeout=5.0).text
        finally:
            server.thaw()
        assert shown is not None and shown["role"] == "standby", shown
        assert 'rackscale_leader{replica="a"} 0.0' in metrics
        a.wait_role("leader", timeout=30)
    finally:
        if a.proc is not None and a.proc.poll() is None:
            a.proc.kill()
            a.proc.wait(timeout=10)
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("server", ["refuses", "never-answers"])
def test_a_replica_started_while_the_database_is_unreachable_says_so_in_one_line(tmp_path: Path, server: str) -> None:
    """Nothing listening: refused at once. A server that accepts the connection and never answers (stopped,
    a half-open path): the connect waited for ever, `serve` hung without a word; now connect_timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    if server == "refuses":
        listener.close()
    else:
        listener.listen(16)  # the kernel completes the handshake; nobody ever reads or answers
    argv = [sys.executable, "-c", "from rackscale.cli.app import main; main()", "serve", "--no-auth", "--port", "0"]
    argv += ["--data-dir", str(tmp_path), "--db-url", f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"]
    try:
        t0 = time.monotonic()
        done = subprocess.run([*argv, "--replica-id", "a"], capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
    finally:
        listener.close()
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: cannot open the store at 127.0.0.1:{port}/postgres: ")
    assert "(fix: check that the database server runs" in lines[0]
    assert took < 30


@pytest.mark.parametrize(
    ("replica", "ok"),
    [
        ("rackscale-0", True),
        ("ä-ü-日本", True),  # any printable text: the column is text
        ("x" * 253, True),
        ("", False),  # was the host name, silently
        ("   ", False),
        (" a", False),
        ("a\nb leads at generation 9", False),  # a newline forged a log line of the election
        ("a\tb", False),
        ("x" * 254, False),
    ],
    ids=["plain", "non-ascii", "longest", "empty", "blank", "leading-blank", "newline", "tab", "too-long"],
)
def test_a_hostile_replica_id_is_refused_with_the_fix(pg_url: str, tmp_path: Path, replica: str, ok: bool) -> None:
    from rackscale.service.app import ServiceConfig, ServiceConfigError, build_service

    config = ServiceConfig(data_dir=tmp_path, no_auth=True, db_url=pg_url, replica_id=replica)
    if not ok:
        with pytest.raises(ServiceConfigError, match=r"--replica-id must be 1 to 253 printable characters"):
            build_service(config, start=False)
        return
    service = build_service(config, start=False)
    try:
        assert service.ha is not None and service.ha.elector.replica == replica
    finally:
        service.close()


def test_ha_on_sqlite_is_refused_with_the_fix(tmp_path: Path) -> None:
    from rackscale.service.app import ServiceConfig, ServiceConfigError, build_service

    with pytest.raises(ServiceConfigError, match=r"--ha needs a PostgreSQL store \(--db-url"):
        build_service(ServiceConfig(data_dir=tmp_path, no_auth=True, replica_id="a"), start=False)
