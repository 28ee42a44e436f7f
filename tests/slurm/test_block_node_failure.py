"""Against a REAL Slurm 24.11 with topology/block (the Debian 13 root of rackscale.slurm.block, as
test_block.py): the node-failure test of test_node_failure.py on the block recipe. Kill the slurmd of one
node (inside the chroot) under a running gang; Slurm marks it DOWN and ends the job NODE_FAIL; rackscale
requeues the gang, which must stay in one block (the backend's ``admit``: topology required rack), so it
moves to the other block; the slurmd comes back (``ReturnToService=2``) and the host recovers the node::

    block r000: r000-n00 r000-n01 [gang: 2 nodes]    <- one slurmd killed
    block r001: r001-n00 r001-n01 [....]              <- the gang moves here (or the other way round)

2 blocks x 2 nodes x 4 fake GPUs, ``SlurmdTimeout`` 6 s (the fixture's is 60 s), in the session's root
(conftest.py ``block_root``: built once for test_block.py too). Skipped only when the machine cannot do it
(not root, no debootstrap/chroot/mount), as test_block.py."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.service.conftest import serve_in_thread, wait_for

from rackscale.model.topology import GPUCluster
from rackscale.service.app import ServiceConfig
from rackscale.slurm import block
from rackscale.slurm.block import BlockSlurm

SPEC = GPUCluster.uniform(name="slurm-block-fail", racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)
SLURMD_TIMEOUT_S = 6
TIMEOUT = 90.0


@pytest.fixture(scope="module")
def emu(block_root: Path) -> Iterator[BlockSlurm]:
    real = block.write_config

    def quick(cluster: GPUCluster, folder: Path, **kw: Any) -> Path:
        conf = real(cluster, folder, **kw)
        conf.write_text(conf.read_text().replace("SlurmdTimeout=60", f"SlurmdTimeout={SLURMD_TIMEOUT_S}"))
        return conf

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(block, "write_config", quick)
        cluster = block.start(SPEC, block_root)
    try:
        yield cluster
    finally:
        cluster.stop()


def node_failed(c: Any, node: str) -> int:
    got: dict[str, Any] = c.get(f"/v1/nodes/{node}").json()
    return int(got["failed"])


def test_a_killed_slurmd_moves_the_gang_to_the_other_block_and_the_node_comes_back(emu: BlockSlurm) -> None:
    assert f"SlurmdTimeout={SLURMD_TIMEOUT_S}" in emu.conf.read_text()
    rack_of = {n.name: SPEC.racks[n.rack].name for n in SPEC.nodes}
    data = Path(tempfile.mkdtemp(prefix="rs-data-", dir=emu.chroot / "tmp"))  # inside the root: sbatch reads it
    opts: dict[str, object] = {
        "slurm_conf": emu.seen_conf,
        "slurm_root": str(emu.chroot),
        "poll_interval_s": 0.2,
        "health_interval_s": 0.2,
    }
    cfg = ServiceConfig(data_dir=data, backend="slurm", backend_options=opts, interval_s=0.05)
    try:
        run_the_failure(cfg, emu, rack_of)
    finally:
        shutil.rmtree(data, ignore_errors=True)


def run_the_failure(cfg: ServiceConfig, emu: BlockSlurm, rack_of: dict[str, str]) -> None:
    with serve_in_thread(cfg) as live, live.client() as c:
        body = {"name": "g", "kind": "training", "gpus": 8, "gpusPerWorker": 4, "command": ["sleep", "600"]}
        assert c.post("/v1/jobs", json=body).status_code in (200, 201, 202)

        def running_on() -> list[str] | None:
            job: dict[str, Any] = c.get("/v1/jobs/g").json()
            if job["status"] != "running" or not job.get("placement"):
                return None
            return sorted(s["node"] for s in job["placement"]["nodes"])

        first = wait_for(running_on, timeout=TIMEOUT, what="the gang to run")
        assert isinstance(first, list) and len({rack_of[n] for n in first}) == 1, first
        state = lambda n: emu.slurm.run(["sinfo", "-h", "-n", n, "-o", "%T"], check=False).stdout.strip()  # noqa: E731
        # allocated, or mixed when the job leaves some of the node's CPUs free: either way it runs there.
        runs_there = lambda: state(first[0]).startswith(("allocated", "mixed"))  # noqa: E731
        try:
            wait_for(runs_there, timeout=TIMEOUT, what="Slurm to run it")
        except AssertionError:  # say what Slurm says of it
            squeue = emu.slurm.run(["squeue", "-h", "-o", "%i %T %r %N"], check=False).stdout.strip()
            raise AssertionError(f"Slurm did not run the gang: sinfo {state(first[0])!r}, squeue {squeue!r}") from None
        victim = first[0]
        t0 = time.monotonic()
        os.kill(int((emu.root / f"slurmd-{victim}.pid").read_text()), signal.SIGKILL)

        def moved() -> list[str] | None:
            now = running_on()
            return now if now and victim not in now else None

        second = wait_for(moved, timeout=TIMEOUT, what="rackscale to run the gang on the other block")
        took = time.monotonic() - t0
        assert isinstance(second, list) and len({rack_of[n] for n in second}) == 1, second
        assert rack_of[second[0]] != rack_of[victim], (first, second)
        assert state(victim).startswith("down") and node_failed(c, victim) == 4
        events = c.get("/v1/jobs/g/events").json()
        items = events["items"] if isinstance(events, dict) else events
        [ev] = [e for e in items if e["reason"] == "NodeFailed"]
        assert ev["message"].startswith(f"node {victim} DOWN"), ev

        block._daemon(
            ["chroot", str(emu.chroot), "/usr/sbin/slurmd", "-f", emu.seen_conf, "-N", victim], emu.slurm.env()
        )
        t1 = time.monotonic()
        wait_for(lambda: node_failed(c, victim) == 0, timeout=TIMEOUT, what="rackscale to recover the node")
        print(f"24.11: the gang moved {took:.1f}s after the kill; the node back {time.monotonic() - t1:.1f}s after")
        c.delete("/v1/jobs/g")
