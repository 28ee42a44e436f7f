"""The local backend's health and a drain's stop signal through the Runner, the SQLite store and real
processes (the service clock is the test's: ``HandClock``).

One node, 2 GPUs; a job on one of them::

    node hc-node: [GPU 0: job] [GPU 1: free]

- Health: the operator's command says the node failed -> the job is stopped and requeued (PREEMPTED
  NodeFailed, with the command's first line), nothing can place it (the node is down); the command says
  healthy again -> the node recovers, the job is placed and its process runs again.
- Drain: the runner sends the job SIGTERM at the drain's start (backend ``warn``, once); a job that exits 0
  on it is done; one that exits otherwise is held running until the deadline, then requeued (Drained).
"""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.service.conftest import HandClock, wait_for

from rackscale.backends.local import HealthCommand, LocalBackend, local_cluster
from rackscale.host.drains import HoldOrder, NodeHold
from rackscale.service.live import LiveCluster
from rackscale.service.runner import Runner, spec_of
from rackscale.service.store import Store

ME = pwd.getpwuid(os.geteuid()).pw_name
CLUSTER = local_cluster(2, "H200", host="hc-node")
TIMEOUT = 20.0


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[tuple[Runner, LocalBackend, HandClock, Path]]:
    state = tmp_path / "state"
    state.write_text("ok")
    check = tmp_path / "check.sh"
    check.write_text(f'#!/bin/sh\ns=$(cat {state})\n[ "$s" = ok ] && exit 0\necho "$s"\nexit 1\n')
    check.chmod(0o755)
    health = HealthCommand([str(check)], node="hc-node", gpus=2, interval_s=0, timeout_s=5)
    backend = LocalBackend(tmp_path / "data", [0, 1], grace_s=5.0, run_as=ME, allow_root_jobs=True, health=[health])
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    clock = HandClock()
    runner = Runner(LiveCluster(CLUSTER), store, backend, clock)  # type: ignore[arg-type]
    runner.recover()
    yield runner, backend, clock, state
    for name in list(backend.running()):
        backend.stop(name, now=0.0)
    wait_for(lambda: (backend.poll(0.0), not backend._stopping)[1], timeout=TIMEOUT, what="processes gone")
    backend.close()
    store.close()


def submit(runner: Runner, name: str, command: list[str]) -> None:
    doc = {"name": name, "kind": "batch", "gpus": 1, "durationEstimateSeconds": 600, "command": command}
    row = runner.store.insert_job(name=name, queue="q", kind="batch", gpus=1, priority=0, doc=doc, submitted=0.0)
    runner.submitted(spec_of(row), row.seq)


def status(runner: Runner, name: str) -> str:
    row = runner.store.get(name)
    assert row is not None
    return row.status


def step_until(runner: Runner, pred: object, what: str) -> None:
    assert callable(pred)
    wait_for(lambda: (runner.step(), pred())[1], timeout=TIMEOUT, what=what)


def test_a_failed_health_command_requeues_the_job_and_its_recovery_places_it_again(
    rig: tuple[Runner, LocalBackend, HandClock, Path],
) -> None:
    runner, backend, clock, state = rig
    submit(runner, "j", [sys.executable, "-c", "import time; time.sleep(600)"])
    step_until(runner, lambda: status(runner, "j") == "running" and "j" in backend.running(), "j to run")
    first = backend._runs["j"].pid

    clock.t = 10.0
    state.write_text("PSU 2 lost power")
    step_until(runner, lambda: status(runner, "j") == "pending", "j to be requeued")
    assert "j" not in backend.running() and runner.live.state.failed_gpus_count == 2
    [msg] = [e.message for e in runner.store.events("j") if e.reason == "NodeFailed"]
    assert msg.startswith("node hc-node DOWN (health command: PSU 2 lost power); requeued"), msg
    for _ in range(3):  # the node stays down: nothing places it
        runner.step()
    assert status(runner, "j") == "pending"

    clock.t = 20.0
    state.write_text("ok")
    step_until(runner, lambda: status(runner, "j") == "running" and "j" in backend.running(), "j to run again")
    assert runner.live.state.failed_gpus_count == 0 and backend._runs["j"].pid != first
    assert runner.errors == 0


# The job: traps TERM, writes `termed`, and exits with argv[1] after a beat (or, with "stay", keeps running).
TRAP = """
import os, signal, sys, time
def on_term(*_):
    open("termed", "w").write("yes")
    if sys.argv[1] != "stay":
        sys.exit(int(sys.argv[1]))
signal.signal(signal.SIGTERM, on_term)
open("ready", "w").write("yes")
while True:
    time.sleep(0.05)
"""


@pytest.mark.parametrize(
    ("code", "after_signal", "at_deadline"),
    [
        ("0", "completed", "completed"),
        ("143", "running", "pending"),
        ("stay", "running", "pending"),
    ],
    ids=["exit-0-on-the-signal-is-done", "a-failure-on-the-signal-is-requeued-at-the-deadline", "ignores-it"],
)
def test_a_drain_sends_sigterm_at_its_start_and_requeues_at_its_deadline(
    rig: tuple[Runner, LocalBackend, HandClock, Path], code: str, after_signal: str, at_deadline: str
) -> None:
    runner, backend, clock, _ = rig
    submit(runner, "d", [sys.executable, "-c", TRAP, code])
    work = backend.work_dir / "d"
    step_until(runner, lambda: (work / "ready").exists(), "d to run")
    clock.t = 100.0
    runner.held(HoldOrder(((0, NodeHold(reason="firmware", since=100.0, deadline=160.0)),)))
    step_until(runner, lambda: (work / "termed").exists(), "the drain's SIGTERM")
    if code == "0":
        step_until(runner, lambda: status(runner, "d") == "completed", "d to complete")
    else:
        for _ in range(10):  # its exit (if any) is held: the store says running through the grace
            runner.step()
    assert status(runner, "d") == after_signal
    (work / "termed").unlink()
    clock.t = 161.0
    runner.step()
    assert status(runner, "d") == at_deadline
    assert not (work / "termed").exists() or code == "0"  # told once: stop SIGKILLs, no second SIGTERM
    if at_deadline == "pending":
        [msg] = [e.message for e in runner.store.events("d") if e.reason == "Drained"]
        assert msg == "drained: firmware; requeued"
        wait_for(lambda: (backend.poll(0.0), not backend._stopping)[1], timeout=TIMEOUT, what="d gone")
    assert runner.errors == 0
