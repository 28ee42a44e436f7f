"""Planned maintenance in the simulator: a rack is drained (the host's drain, on the virtual clock), its jobs
leave after the grace and run elsewhere, and the rack takes work again after the window.

Two racks of 2 nodes x 4 GPUs; four 4-GPU jobs start at t=0 (one per node), a window drains r000 from
t=100 s (grace 50 s) to t=1100 s::

    t=0      r000: [aaaa][bbbb]  r001: [cccc][dddd]
    t=150    r000: [cccc][cccc]  <- cordoned, empty: a and b wait (no room in r001)
    t=1100   r000: [aaaa][bbbb]  uncordoned: a and b run again
"""

from __future__ import annotations

import pytest

from rackscale.host.drains import DrainError
from rackscale.host.runs import RunStatus
from rackscale.model import GPUCluster, training
from rackscale.sim.maintenance import Window, parse_window
from rackscale.sim.records import SimConfig
from rackscale.sim.simulator import Simulator


def run(windows: tuple[Window, ...]) -> Simulator:
    cluster = GPUCluster.uniform(racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)
    jobs = [training(n, 4, duration_estimate_s=2000.0, checkpoint_interval_s=60.0) for n in "abcd"]
    sim = Simulator(cluster, jobs, SimConfig(maintenance=windows, record_series=False))
    return sim


def test_a_rack_drain_stops_its_jobs_after_the_grace_and_they_come_back() -> None:
    window = Window(rack="r000", start_s=100.0, duration_s=1000.0, grace_s=50.0)
    base = run(()).run()
    sim = run((window,))
    result = sim.run()
    drained = {n for n, r in result.jobs.items() if r.restarts}
    assert len(drained) == 2  # the two jobs of r000, stopped once each
    assert sim.drain_stops == 2
    for name in drained:
        r = result.jobs[name]
        assert r.status is RunStatus.COMPLETED
        assert r.run_start >= 1100.0  # waited for the window to end (r001 was full)
    # Each lost the 30 s since its last checkpoint (150 s run, one every 60 s) on 4 GPUs.
    assert result.kpis.lost_gpu_hours == pytest.approx(2 * 30.0 * 4 / 3600.0)
    assert base.kpis.lost_gpu_hours == 0
    assert result.kpis.makespan_s > base.kpis.makespan_s  # the drain's cost in time
    sim.state.check_invariants()
    assert not sim.holds and not any(sim.state.node_cordoned)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("r000@2h+4h~10m", Window(rack="r000", start_s=7200.0, duration_s=14400.0, grace_s=600.0)),
        ("r001@0+30m", Window(rack="r001", start_s=0.0, duration_s=1800.0)),
    ],
    ids=["with-grace", "no-grace"],
)
def test_parse_window(text: str, want: Window) -> None:
    got = parse_window(text)
    assert (got.rack, got.start_s, got.duration_s, got.grace_s) == (
        want.rack,
        want.start_s,
        want.duration_s,
        want.grace_s,
    )


@pytest.mark.parametrize("text", ["r000", "r000@2h", "@1h+1h", "r000@soon+1h", "r000@1h+1h~-5"], ids=str)
def test_parse_window_refuses(text: str) -> None:
    with pytest.raises(DrainError):
        parse_window(text)


def test_unknown_rack_is_refused() -> None:
    with pytest.raises(DrainError, match="no rack named"):
        run((Window(rack="r999", start_s=0.0, duration_s=1.0),))
