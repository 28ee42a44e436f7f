"""The runner rests after each step in proportion to the step's own time (``max_busy``): under a backlog a
cycle is ~0.2 s of Python holding the GIL, and back-to-back cycles starve the API's event loop. A short
step (an idle cluster, a few jobs) still rests only ``min_gap_s``."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.service.conftest import HandClock, small_cluster

from rackscale.backends.sim import SimBackend
from rackscale.service.live import LiveCluster
from rackscale.service.runner import Runner
from rackscale.service.store import Store


def _runner(tmp_path: Path, **kw: float) -> Runner:
    cluster = small_cluster()
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    return Runner(LiveCluster(cluster), store, SimBackend(cluster), HandClock(), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("max_busy", "step_s", "rest_s"),
    [
        (0.5, 0.2, 0.2),  # half the wall clock at most: rest as long as the step took
        (0.25, 0.2, 0.6),
        (1.0, 0.2, 0.01),  # no pacing: only the gap that lets submissions batch up
        (0.5, 0.001, 0.01),  # a short step: the minimum gap, not less
    ],
    ids=["half", "quarter", "unpaced", "short-step"],
)
def test_rest_after_a_step(tmp_path: Path, max_busy: float, step_s: float, rest_s: float) -> None:
    runner = _runner(tmp_path, max_busy=max_busy, min_gap_s=0.01)
    assert runner.rest_after(step_s) == pytest.approx(rest_s)


def _burn(runner: Runner) -> None:
    """50 ms of the thread's CPU, as a cycle's Python is."""
    cpu0 = time.thread_time()
    while time.thread_time() - cpu0 < 0.05:
        pass


def _gil_bound(runner: Runner) -> None:
    """No CPU of its own but a cycle of 50 ms as the runner measures it (it waited for the GIL it then held)."""
    time.sleep(0.05)
    runner._cycle_seconds = 0.05


def _backend_wait(runner: Runner) -> None:
    """50 ms waiting on a backend (sbatch, a process start): no CPU, no GIL held, no cycle."""
    time.sleep(0.05)


@pytest.mark.parametrize(
    ("work", "paced"),
    [(_burn, True), (_gil_bound, True), (_backend_wait, False)],
    ids=["cpu-bound-step", "cycle-slowed-by-the-gil", "step-waiting-on-the-backend"],
)
def test_the_loop_rests_after_a_steps_work_even_when_woken(
    tmp_path: Path, work: Callable[[Runner], None], paced: bool
) -> None:
    """Steps of 50 ms of work at max_busy 0.25 are 150 ms apart at least, though submissions wake the loop
    all the time; a step that only waited rests the minimum gap."""
    runner = _runner(tmp_path, max_busy=0.25, min_gap_s=0.01, interval_s=0.01)
    spans: list[tuple[float, float]] = []

    def step() -> list[object]:
        t0 = time.monotonic()
        work(runner)
        spans.append((t0, time.monotonic()))
        return []

    runner.step = step  # type: ignore[method-assign]
    stop = threading.Event()

    def wake() -> None:
        while not stop.is_set():
            runner._wake.set()
            time.sleep(0.005)

    waker = threading.Thread(target=wake)
    runner.start()
    waker.start()
    time.sleep(0.8)
    stop.set()
    waker.join()
    runner.stop()
    gaps = [start - end for (_, end), (start, _) in itertools.pairwise(spans)]
    assert gaps
    if paced:
        assert min(gaps) >= 0.9 * 3 * 0.05, f"rested only {min(gaps):.3f} s after 50 ms of work"
        assert len(spans) <= 5  # unpaced, the same 0.8 s holds about 13 steps
    else:
        assert min(gaps) < 0.1, f"rested {min(gaps):.3f} s after a step that only waited"


@pytest.mark.parametrize("value", [0.0, -0.5, 1.5, float("nan")], ids=["zero", "negative", "over-one", "nan"])
def test_serve_refuses_a_max_busy_outside_0_1_naming_the_flag(tmp_path: Path, value: float) -> None:
    from rackscale.service.app import ServiceConfig, ServiceConfigError, build_service

    with pytest.raises(ServiceConfigError, match=r"--cycle-max-busy must be in \(0, 1\]"):
        build_service(ServiceConfig(data_dir=tmp_path, cluster=small_cluster(), max_busy=value), start=False)
    assert not (tmp_path / "rackscale.db").exists()  # refused before the store was opened


def test_serve_passes_max_busy_to_the_runner(tmp_path: Path) -> None:
    from rackscale.service.app import ServiceConfig, build_service

    svc = build_service(ServiceConfig(data_dir=tmp_path, cluster=small_cluster(), max_busy=0.2), start=False)
    try:
        assert svc.ctx.runner.max_busy == 0.2
    finally:
        svc.close()
