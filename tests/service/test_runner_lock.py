"""The runner never holds the state lock across a backend call: while ``poll`` or ``start`` blocks, API reads
(``runner.reading()``, which /metrics and the live parts of GETs take) go through. The store's commit, on the
other hand, is made under the lock, so a reader never sees the memory ahead of the store (a job running in
/v1/cluster but pending in /v1/jobs).

Each case blocks one I/O call of a step on an event, then checks from another thread whether the lock can be
taken while the step waits.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from tests.service.conftest import HandClock, small_cluster

from rackscale.backends.sim import SimBackend
from rackscale.service.live import LiveCluster
from rackscale.service.runner import Runner, spec_of
from rackscale.service.store import Store


@pytest.mark.parametrize(
    ("blocked", "readable"),
    [("backend.start", True), ("backend.poll", True), ("store.apply", False)],
    ids=["backend.start", "backend.poll", "store.apply"],
)
def test_reads_wait_on_the_commit_but_never_on_the_backend(tmp_path: Path, blocked: str, readable: bool) -> None:
    cluster = small_cluster()
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    backend = SimBackend(cluster)
    runner = Runner(LiveCluster(cluster), store, backend, HandClock())  # type: ignore[arg-type]
    runner.recover()
    doc = {"name": "j", "kind": "training", "gpus": 8, "durationEstimateSeconds": 100}
    row = store.insert_job(name="j", queue="q", kind="training", gpus=8, priority=0, doc=doc, submitted=0.0)
    runner.submitted(spec_of(row), row.seq)

    owner, attr = blocked.split(".")
    target: Any = backend if owner == "backend" else store
    real = getattr(target, attr)
    entered, release = threading.Event(), threading.Event()

    def slow(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert release.wait(10), "the test never released the call"
        return real(*args, **kwargs)

    setattr(target, attr, slow)
    step = threading.Thread(target=runner.step)
    step.start()
    try:
        assert entered.wait(10), f"the step never called {blocked}"
        got = runner.lock.acquire(timeout=2 if readable else 0.3)
        if got:
            runner.lock.release()
        if readable:
            assert got, f"the state lock is held while {blocked} blocks: readers would wait on it"
        else:
            assert not got, f"the lock is free while {blocked} blocks: readers see memory ahead of the store"
    finally:
        release.set()
        step.join(10)
    assert not step.is_alive()
    runner.step()
    assert [(r.name, r.status) for r in store.jobs()] == [("j", "running")]
    store.close()
