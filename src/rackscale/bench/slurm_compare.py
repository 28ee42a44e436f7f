"""The same gang sequence on a live Slurm twice: (a) Slurm's own placement (``sbatch --switches=1
--gres=gpu:<per node> --nodes=k``, topology/tree), (b) rackscale's (the service with the slurm backend,
jobs pinned with ``--nodelist``). Reports the share of gangs kept inside one rack and the mean wait.

Wait = the first time a poll (every ``poll_s``) sees the job RUNNING in Slurm, minus the time the job was
handed over (``sbatch`` for (a), ``POST /v1/jobs`` for (b)): the same clock and the same resolution for both.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rackscale.model.topology import GPUCluster
from rackscale.slurm.commands import Slurm, SlurmJob

SIZES = (4, 8, 12, 16)


@dataclass(frozen=True, slots=True)
class Gang:
    name: str
    gpus: int
    sleep_s: int
    arrive_s: float


@dataclass(slots=True)
class RunResult:
    label: str
    jobs: int
    started: int
    one_rack: int
    mean_wait_s: float
    makespan_s: float
    waits: dict[str, float] = field(default_factory=dict)

    @property
    def one_rack_share(self) -> float:
        return self.one_rack / self.started if self.started else 0.0

    def line(self) -> str:
        return (
            f"{self.label:<28} jobs {self.jobs:>3}  started {self.started:>3}  inside one rack "
            f"{self.one_rack_share:6.1%}  mean wait {self.mean_wait_s:6.2f} s  makespan {self.makespan_s:6.1f} s"
        )


def job_mix(n: int, *, seed: int = 0, spread_s: float = 4.0, sleep_s: tuple[int, int] = (2, 4)) -> list[Gang]:
    rng = random.Random(seed)
    arrivals = sorted(rng.uniform(0, spread_s) for _ in range(n))
    return [Gang(f"j{i:03d}", rng.choice(SIZES), rng.randint(*sleep_s), t) for i, t in enumerate(arrivals)]


def _watch(
    slurm: Slurm,
    names: dict[str, str],
    cluster: GPUCluster,
    t0: float,
    submitted: dict[str, float],
    done: list[bool],
    earlier: set[str],
) -> tuple[dict[str, float], dict[str, tuple[str, ...]]]:
    """Poll until ``done[0]`` and every submitted job has ended: first RUNNING time and nodes, by gang.
    Jobs Slurm already knew when the run began (an earlier run's, kept for MinJobAge under the same names)
    are not this run's."""
    started: dict[str, float] = {}
    nodes: dict[str, tuple[str, ...]] = {}
    while True:
        now = time.monotonic()
        jobs: dict[str, SlurmJob] = slurm.jobs()
        live = 0
        for j in jobs.values():
            if j.id in earlier:
                continue
            gang = names.get(j.name)
            if gang is None or gang not in submitted:
                continue
            if j.state == "RUNNING" and gang not in started:
                started[gang] = now - t0
                nodes[gang] = j.nodes
            if not j.terminal:
                live += 1
            elif gang not in started and j.nodes:
                started[gang], nodes[gang] = now - t0, j.nodes  # ran between two polls
        if done[0] and live == 0 and len(started) >= len(submitted):
            return started, nodes
        time.sleep(0.1)


def _result(
    label: str,
    gangs: list[Gang],
    cluster: GPUCluster,
    submitted: dict[str, float],
    started: dict[str, float],
    nodes: dict[str, tuple[str, ...]],
    makespan: float,
) -> RunResult:
    rack_of = {n.name: n.rack for n in cluster.nodes}
    waits = {g: max(0.0, started[g] - submitted[g]) for g in started if g in submitted}
    one = sum(1 for g in started if len({rack_of.get(n) for n in nodes.get(g, ())}) == 1)
    mean = sum(waits.values()) / len(waits) if waits else 0.0
    return RunResult(label, len(gangs), len(started), one, mean, makespan, waits)


def run_slurm_switches(slurm: Slurm, cluster: GPUCluster, gangs: list[Gang], out_dir: Path) -> RunResult:
    gpn = cluster.racks[0].gpus_per_node
    names = {f"sb-{g.name}": g.name for g in gangs}
    submitted: dict[str, float] = {}
    done = [False]
    earlier = set(slurm.jobs())  # an earlier run's jobs, still listed (MinJobAge)
    t0 = time.monotonic()
    result: list[tuple[dict[str, float], dict[str, tuple[str, ...]]]] = []
    watcher = threading.Thread(
        target=lambda: result.append(_watch(slurm, names, cluster, t0, submitted, done, earlier))
    )
    watcher.start()
    try:
        for g in gangs:
            time.sleep(max(0.0, g.arrive_s - (time.monotonic() - t0)))
            k = -(-g.gpus // gpn)
            submitted[g.name] = time.monotonic() - t0
            slurm.sbatch(
                [
                    f"--job-name=sb-{g.name}",
                    "--switches=1",
                    f"--nodes={k}",
                    f"--gres=gpu:{min(gpn, g.gpus)}",
                    "--ntasks-per-node=1",
                    f"--output={out_dir}/sb-{g.name}.out",
                    f"--chdir={out_dir}",
                    "--wrap",
                    f"sleep {g.sleep_s}",
                ]
            )
    finally:
        done[0] = True
        watcher.join()
    started, nodes = result[0]
    return _result("slurm --switches=1", gangs, cluster, submitted, started, nodes, time.monotonic() - t0)


def run_rackscale(slurm: Slurm, gangs: list[Gang], data_dir: Path, *, require_rack: bool = False) -> RunResult:
    """The gangs through `serve --backend slurm`; with ``require_rack`` each asks for one rack as a required
    topology constraint (it waits, like --switches=1), else as a preference (the default: it may split)."""
    import httpx
    import uvicorn

    from rackscale.service.app import ServiceConfig, build_service
    from rackscale.service.http import server_config

    opts: dict[str, object] = {"poll_interval_s": 0.2}
    if slurm.conf is not None:
        opts["slurm_conf"] = str(slurm.conf)
    svc = build_service(ServiceConfig(data_dir=data_dir, backend="slurm", backend_options=opts, interval_s=0.02))
    cluster = svc.ctx.runner.live.cluster
    server = uvicorn.Server(server_config(svc.app, host="127.0.0.1", port=0, lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    names = {f"rs-{g.name}": g.name for g in gangs}
    submitted: dict[str, float] = {}
    done = [False]
    result: list[tuple[dict[str, float], dict[str, tuple[str, ...]]]] = []
    try:
        deadline = time.monotonic() + 15
        while not server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the service did not start in 15 s")
            time.sleep(0.02)
        url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        earlier = set(slurm.jobs())  # an earlier run's jobs, still listed (MinJobAge)
        t0 = time.monotonic()
        watcher = threading.Thread(
            target=lambda: result.append(_watch(slurm, names, cluster, t0, submitted, done, earlier))
        )
        watcher.start()
        try:
            auth = {"Authorization": f"Bearer {svc.admin_token}"} if svc.admin_token else {}
            with httpx.Client(base_url=url, timeout=10, headers=auth) as c:
                for g in gangs:
                    time.sleep(max(0.0, g.arrive_s - (time.monotonic() - t0)))
                    body = {
                        "name": g.name,
                        "kind": "training",
                        "gpus": g.gpus,
                        "gpusPerWorker": min(4, g.gpus),
                        "command": ["sleep", str(g.sleep_s)],
                    }
                    if require_rack:
                        body["topology"] = {"required": "rack"}
                    at = time.monotonic() - t0
                    r = c.post("/v1/jobs", json=body)
                    r.raise_for_status()
                    submitted[g.name] = at  # only what was accepted is waited for (a refusal must not hang)
        finally:
            done[0] = True
            watcher.join()
        makespan = time.monotonic() - t0
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        svc.close()
    started, nodes = result[0]
    label = "rackscale, one rack required" if require_rack else "rackscale (slurm backend)"
    return _result(label, gangs, cluster, submitted, started, nodes, makespan)


def compare(
    slurm: Slurm, cluster: GPUCluster, n: int, *, seed: int = 0, spread_s: float = 4.0, require_rack: bool = True
) -> list[RunResult]:
    """Slurm --switches=1, then rackscale with its default (one rack preferred), then (``require_rack``) with
    one rack required: the same gang sequence each time."""
    gangs = job_mix(n, seed=seed, spread_s=spread_s)
    work = Path(tempfile.mkdtemp(prefix="rs-compare-"))
    try:
        out = [run_slurm_switches(slurm, cluster, gangs, work), run_rackscale(slurm, gangs, work / "service")]
        if require_rack:
            out.append(run_rackscale(slurm, gangs, work / "service-required", require_rack=True))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out
