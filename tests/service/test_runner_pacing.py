"""The runner rests after each step in proportion to the step's own time (``max_busy``): under a backlog a
cycle is ~0.2 s of Python holding the GIL, and back-to-back cycles starve the API's event loop. A short
step (an idle cluster, a few jobs) still rests only ``min_gap_s``."""

from __future__ import annotations

import itertools
import threading
import time
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


def test_the_loop_rests_after_slow_steps_even_when_woken(tmp_path: Path) -> None:
    """Steps of 50 ms of CPU at max_busy 0.25 are 150 ms apart at least, though a submission wakes the loop at once
    (it is woken here all the time)."""
    runner = _runner(tmp_path, max_busy=0.25, min_gap_s=0.01, interval_s=0.01)
    spans: list[tuple[float, float]] = []

    def slow_step() -> list[object]:
        t0, cpu0 = time.monotonic(), time.thread_time()
        while time.thread_time() - cpu0 < 0.05:  # CPU, as a cycle is: a wait is not paced (next test)
            pass
        spans.append((t0, time.monotonic()))
        return []

    runner.step = slow_step  # type: ignore[method-assign]
    stop = threading.Event()

    def wake() -> None:
        while not stop.is_set():
            runner._wake.set()
            time.sleep(0.005)

    waker = threading.Thread(target=wake)
    runner.start()
    waker.start()
    time.sleep(1.0)
    stop.set()
    waker.join()
    runner.stop()
    assert len(spans) >= 2
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start - end >= 0.9 * 3 * 0.05, f"rested only {start - end:.3f} s after a 50 ms step"
    assert len(spans) <= 6  # unpaced, the same second holds about 16 steps


def test_a_cycle_slowed_by_the_gil_is_paced_by_its_wall_time(tmp_path: Path) -> None:
    """A cycle waits for the GIL between its slices (the API holds it meanwhile): its thread's CPU is less
    than its time, and the cycle's own measured time (``_cycle_seconds``) is what paces it."""
    runner = _runner(tmp_path, max_busy=0.25, min_gap_s=0.01, interval_s=0.01)
    spans: list[tuple[float, float]] = []

    def gil_bound_step() -> list[object]:
        t0 = time.monotonic()
        time.sleep(0.05)  # no CPU of its own, but a cycle of 50 ms as the runner measures it
        runner._cycle_seconds = 0.05
        spans.append((t0, time.monotonic()))
        return []

    runner.step = gil_bound_step  # type: ignore[method-assign]
    runner.start()
    time.sleep(0.8)
    runner.stop()
    assert len(spans) >= 2
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start - end >= 0.9 * 3 * 0.05, f"rested only {start - end:.3f} s after a 50 ms cycle"


def test_a_step_that_waits_on_the_backend_is_not_paced(tmp_path: Path) -> None:
    """A step that spends 50 ms waiting (sbatch, a process start: no CPU, no GIL held) rests only the gap."""
    runner = _runner(tmp_path, max_busy=0.25, min_gap_s=0.01, interval_s=0.01)
    spans: list[tuple[float, float]] = []

    def waiting_step() -> list[object]:
        t0 = time.monotonic()
        time.sleep(0.05)
        spans.append((t0, time.monotonic()))
        return []

    runner.step = waiting_step  # type: ignore[method-assign]
    runner.start()
    time.sleep(0.6)
    runner.stop()
    assert len(spans) >= 2
    gaps = [start - end for (_, end), (start, _) in itertools.pairwise(spans)]
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
