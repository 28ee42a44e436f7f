"""A real Slurm 22.05 cluster of emulated nodes for the slurm tests: 4 racks x 4 nodes x 4 fake GPUs
(16 slurmd + slurmctld on 127.0.0.1, own ports, in a temporary folder), with topology/tree written by
``rackscale.slurm.topology.tree_conf`` from the rackscale cluster. One cluster per session; each test that
uses it starts with no jobs. Missing Slurm binaries FAIL the tests (with the install hint), never skip."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator

import pytest

from rackscale.model.topology import GPUCluster
from rackscale.slurm import emulated
from rackscale.slurm.commands import INSTALL_HINT

SPEC = GPUCluster.uniform(name="slurm-test", racks_per_region=4, nodes_per_rack=4, gpus_per_node=4)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[emulated.EmulatedSlurm]:
    missing = emulated.missing_binaries()
    if missing:
        pytest.fail(f"Slurm binaries missing ({', '.join(missing)}): {INSTALL_HINT}", pytrace=False)
    emu = emulated.start(SPEC)
    try:
        yield emu
    finally:
        emu.stop()
        shutil.rmtree(emu.root, ignore_errors=True)


@pytest.fixture
def slurm(slurm_cluster: emulated.EmulatedSlurm) -> Iterator[emulated.EmulatedSlurm]:
    """The session's cluster, with no job left from an earlier test (before and after)."""
    _drain(slurm_cluster)
    yield slurm_cluster
    _drain(slurm_cluster)


def _drain(emu: emulated.EmulatedSlurm, timeout: float = 20.0) -> None:
    emu.cancel_all()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = emu.slurm.run(["squeue", "-h", "-o", "%i"], check=False).stdout.strip()
        idle = emu.slurm.run(["sinfo", "-h", "-t", "idle", "-o", "%D"], check=False).stdout.strip()
        if not out and idle == str(len(emu.cluster.nodes)):
            return
        time.sleep(0.1)
    raise AssertionError(f"Slurm did not drain in {timeout}s: squeue {out!r}, idle nodes {idle!r}")
