"""Against a real Slurm 22.05 (emulated nodes, as tests/slurm/conftest.py): kill the slurmd of one node under
a running gang; Slurm marks the node not responding then DOWN and ends the job NODE_FAIL (it is submitted
``--no-requeue``); rackscale reads the node DOWN from ``sinfo -N``, requeues the gang (a PREEMPTED event with
the node's reason) and starts it on other nodes; the slurmd comes back, the node returns to service
(``ReturnToService=2``) and rackscale's host recovers it.

A cluster of its own (2 racks x 2 nodes x 4 GPUs), with ``SlurmdTimeout`` lowered from the fixture's 60 s to
6 s (slurmctld pings every SlurmdTimeout/3, at least every 2 s), so the node is DOWN some 6-10 s after the
kill::

    r000: r000-n00 [gang] r000-n01 [gang]   <- one slurmd killed
    r001: r001-n00 [....] r001-n01 [....]   <- the gang moves here
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.service.conftest import serve_in_thread, wait_for

from rackscale.model.topology import GPUCluster
from rackscale.service.app import ServiceConfig
from rackscale.slurm import emulated
from rackscale.slurm.commands import INSTALL_HINT, parse_sinfo_health

SPEC = GPUCluster.uniform(name="slurm-fail", racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)
SLURMD_TIMEOUT_S = 6
TIMEOUT = 60.0


@pytest.fixture(scope="module")
def emu() -> Iterator[emulated.EmulatedSlurm]:
    missing = emulated.missing_binaries()
    if missing:
        pytest.fail(f"Slurm binaries missing ({', '.join(missing)}): {INSTALL_HINT}", pytrace=False)
    real = emulated.write_config

    def quick(cluster: GPUCluster, root: Path, **kw: Any) -> Path:
        conf = real(cluster, root, **kw)
        conf.write_text(conf.read_text().replace("SlurmdTimeout=60", f"SlurmdTimeout={SLURMD_TIMEOUT_S}"))
        return conf

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(emulated, "write_config", quick)
        cluster = emulated.start(SPEC)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)


def sinfo_state(e: emulated.EmulatedSlurm, node: str) -> str:
    return e.slurm.run(["sinfo", "-h", "-n", node, "-o", "%T"], check=False).stdout.strip()


def node_failed(c: Any, node: str) -> int:
    got: dict[str, Any] = c.get(f"/v1/nodes/{node}").json()
    return int(got["failed"])


def test_a_killed_slurmd_requeues_the_gang_elsewhere_and_the_node_comes_back(
    emu: emulated.EmulatedSlurm, tmp_path: Path
) -> None:
    opts: dict[str, object] = {"slurm_conf": str(emu.conf), "poll_interval_s": 0.2, "health_interval_s": 0.2}
    cfg = ServiceConfig(data_dir=tmp_path / "data", backend="slurm", backend_options=opts, interval_s=0.05)
    with serve_in_thread(cfg) as live, live.client() as c:
        body = {"name": "g", "kind": "training", "gpus": 8, "gpusPerWorker": 4, "command": ["sleep", "600"]}
        assert c.post("/v1/jobs", json=body).status_code in (200, 201, 202)

        def running_on() -> list[str] | None:
            job: dict[str, Any] = c.get("/v1/jobs/g").json()
            if job["status"] != "running" or not job.get("placement"):
                return None
            return sorted(s["node"] for s in job["placement"]["nodes"])

        first = wait_for(running_on, timeout=TIMEOUT, what="the gang to run")
        assert isinstance(first, list) and len(first) == 2
        wait_for(lambda: "allocated" in sinfo_state(emu, first[0]), timeout=TIMEOUT, what="Slurm to run it")
        victim = first[0]
        pid = int((emu.root / f"slurmd-{victim}.pid").read_text())
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)

        def moved() -> list[str] | None:
            now = running_on()
            return now if now and victim not in now else None

        second = wait_for(moved, timeout=TIMEOUT, what="rackscale to run the gang on other nodes")
        took = time.monotonic() - t0
        assert isinstance(second, list) and not set(second) & {victim}
        assert sinfo_state(emu, victim).startswith("down")
        assert node_failed(c, victim) == 4
        events = c.get("/v1/jobs/g/events").json()
        items = events["items"] if isinstance(events, dict) else events
        [ev] = [e for e in items if e["reason"] == "NodeFailed"]
        assert ev["message"].startswith(f"node {victim} DOWN"), ev
        health = {h.node: h for h in parse_sinfo_health(emu.slurm.run(["sinfo", "-N", "-h", "-o", "%N|%T|%E"]).stdout)}
        assert health[victim].state.stops_jobs

        slurmd = shutil.which("slurmd", path="/usr/sbin:/usr/local/sbin:" + os.environ.get("PATH", ""))
        assert slurmd is not None
        subprocess.run([slurmd, "-f", str(emu.conf), "-N", victim], env=emu.slurm.env(), check=True)
        t1 = time.monotonic()
        wait_for(lambda: node_failed(c, victim) == 0, timeout=TIMEOUT, what="rackscale to recover the node")
        back = time.monotonic() - t1
        print(f"node down and the gang moved {took:.1f}s after the kill; back {back:.1f}s after the restart")
        c.delete("/v1/jobs/g")
