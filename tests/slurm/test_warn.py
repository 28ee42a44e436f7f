"""A drain's stop signal on a real Slurm 22.05 (the session's emulated cluster, tests/slurm/conftest.py): the
backend's ``warn`` is ``scancel --signal=TERM --full`` (scancel(1): without ``--full`` a signal other than
KILL never reaches the batch script), so the job's own script gets SIGTERM and may checkpoint; the job goes on
running until the runner's ``stop`` at the drain's deadline cancels it."""

from __future__ import annotations

import time
from pathlib import Path

from tests.service.conftest import wait_for
from tests.slurm.conftest import SPEC

from rackscale.backends.slurm import SlurmBackend
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.workload import batch
from rackscale.slurm.emulated import EmulatedSlurm

TIMEOUT = 30.0

# Traps TERM (writes `termed` in its working directory) and keeps running; sleeps short, so the shell runs
# the trap soon after (--full also signals the sleep).
TRAPS = 'trap "echo yes > termed" TERM; while :; do sleep 0.1; done'


def test_warn_signals_the_batch_script_and_the_job_keeps_running(slurm: EmulatedSlurm, tmp_path: Path) -> None:
    backend = SlurmBackend(slurm.slurm, SPEC, tmp_path, poll_interval_s=0)
    spec = batch("warned", gpus=4, command=("sh", "-c", TRAPS))
    backend.start(spec, Placement("warned", (NodeAlloc(0, (0, 1, 2, 3)),), 1), now=0.0)
    job_id = (tmp_path / "slurm" / "warned.id").read_text().strip()
    wait_for(lambda: (j := slurm.slurm.job(job_id)) is not None and j.state == "RUNNING", timeout=TIMEOUT)
    time.sleep(0.5)  # the script has set its trap
    backend.warn("warned", now=1.0, grace_s=60.0)
    termed = tmp_path / "slurm" / "termed"  # the job's --chdir is the backend's slurm/ folder
    wait_for(termed.exists, timeout=TIMEOUT, what="the batch script to get SIGTERM")
    assert backend.poll(2.0) == []
    got = slurm.slurm.job(job_id)
    assert got is not None and got.state == "RUNNING", got
    backend.stop("warned", now=3.0)
    wait_for(lambda: (j := slurm.slurm.job(job_id)) is None or j.terminal, timeout=TIMEOUT, what="the cancel")
    backend.warn("gone", now=4.0, grace_s=1.0)  # a job it does not run: nothing to signal
