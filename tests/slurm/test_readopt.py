"""A replica that led, stood by and leads again in the same process (docs/high-availability.md): its Slurm
backend is adopted a second time, with what it submitted in its first term still in memory. Against the real
Slurm of the fixture."""

from __future__ import annotations

import time
from pathlib import Path

from tests.service.conftest import wait_for
from tests.slurm.conftest import SPEC

from rackscale.backends.base import RunningJobRecord
from rackscale.backends.slurm import SlurmBackend
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.workload import batch
from rackscale.slurm.emulated import EmulatedSlurm

TIMEOUT = 30.0


def test_a_second_adopt_in_the_same_process_acts_as_a_new_process_would(slurm: EmulatedSlurm, tmp_path: Path) -> None:
    """'ended' ends while the replica stands by, 'kept' runs on, 'stray' runs though the store no longer says
    so, 'refused' failed in Slurm (no node has 5 GPUs) and its failure was not polled yet; the store says the
    others run. Each end is reported once, 'kept' is watched once, 'stray' is cancelled."""
    b = SlurmBackend(slurm.slurm, SPEC, tmp_path, poll_interval_s=0)
    assert b.adopt({}, 0.0) == []  # first term
    jobs = {
        "ended": (batch("ended", gpus=4, command=("true",)), 0, 4),
        "kept": (batch("kept", gpus=4, command=("sleep", "60")), 4, 4),
        "stray": (batch("stray", gpus=4, command=("sleep", "60")), 8, 4),
        "refused": (batch("refused", gpus=5, command=("true",)), 12, 5),  # no node has 5 GPUs
    }
    placements = {n: Placement(n, (NodeAlloc(node, tuple(range(g))),), 1) for n, (_, node, g) in jobs.items()}
    for name, (spec, _, _) in jobs.items():
        b.start(spec, placements[name], now=0.0)
    ids = {n: b._jobs[n] for n in ("ended", "kept", "stray")}
    wait_for(lambda: (j := slurm.slurm.job(ids["ended"])) is not None and j.terminal, timeout=TIMEOUT, what="end")
    # Demoted (no poll, no close), then leads again: what the store says runs.
    running = {n: RunningJobRecord(jobs[n][0], placements[n], 0.0) for n in ("ended", "kept", "refused")}
    exits = b.adopt(running, 1.0)
    exits += b.poll(2.0)
    time.sleep(1.0)
    exits += b.poll(3.0)
    assert [(e.job, e.ok) for e in sorted(exits, key=lambda e: e.job)] == [("ended", True), ("refused", False)], exits
    assert sorted(b._jobs.items()) == [("kept", ids["kept"])]  # watched once, not submitted again
    stray = wait_for(lambda: (j := slurm.slurm.job(ids["stray"])) is not None and j.terminal and j, timeout=TIMEOUT)
    assert getattr(stray, "state", None) == "CANCELLED"
    kept = slurm.slurm.job(ids["kept"])
    assert kept is not None and not kept.terminal
    assert [i for i, _ in slurm.slurm.queue_by_name("rs-kept")] == [ids["kept"]]
