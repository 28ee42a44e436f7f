"""A real Slurm 22.05 cluster of emulated nodes for the slurm tests: 4 racks x 4 nodes x 4 fake GPUs
(16 slurmd + slurmctld on 127.0.0.1, own ports, in a temporary folder), with topology/tree written by
``rackscale.slurm.topology.tree_conf`` from the rackscale cluster. One cluster per session; each test that
uses it starts with no jobs. Missing Slurm binaries FAIL the tests (with the install hint), never skip."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rackscale.model.topology import GPUCluster
from rackscale.slurm import block, emulated
from rackscale.slurm.commands import INSTALL_HINT, SlurmError

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
    out = idle = "(not read)"
    while time.monotonic() < deadline:
        try:
            out = emu.slurm.run(["squeue", "-h", "-o", "%i"], check=False).stdout.strip()
            idle = emu.slurm.run(["sinfo", "-h", "-t", "idle", "-o", "%D"], check=False).stdout.strip()
        except SlurmError as e:  # a busy controller can hold a query past its timeout: ask again
            out, idle = f"({e})", "?"
        if not out and idle == str(len(emu.cluster.nodes)):
            return
        time.sleep(0.1)
    raise AssertionError(f"Slurm did not drain in {timeout}s: squeue {out!r}, idle nodes {idle!r}")


BLOCK_ROOT_ENV = "RACKSCALE_SLURM_BLOCK_ROOT"


@pytest.fixture(scope="session")
def block_root() -> Iterator[Path]:
    """A Debian 13 root with Slurm 24.11 (topology/block), built once for every test module that starts a
    block cluster in it (~1 min); reused from $RACKSCALE_SLURM_BLOCK_ROOT (built there if it is not yet;
    kept). Skipped only when the machine cannot build or run it, saying what is missing."""
    given = os.environ.get(BLOCK_ROOT_ENV)
    # Not pytest's tmp dir: its clean-up of old runs must never walk into a bind mount of /dev left by a crash.
    root = Path(given) if given else Path(tempfile.mkdtemp(prefix="rs-block-root-", dir="/tmp"))
    why = block.missing(root)
    if why:
        if not given:
            root.rmdir()
        pytest.skip(f"cannot build or run Slurm 24.11 (topology/block) here: missing {', '.join(why)}")
    try:
        block.build_root(root)
        yield root
    finally:
        if not given:
            # A module's cluster may leave munged or a job step behind; nothing of ours runs there now.
            block.release_root(root)
            block.remove_root(root)
