"""The same gang sequence on a live Slurm, placed (a) by Slurm, (b) by rackscale (the service with the slurm
backend, jobs pinned with ``--nodelist``), (c) by rackscale with one rack required. Reports the share of gangs
kept inside one rack (= one block), how many Slurm refused, the mean wait and the mean JCT.

Slurm places with its topology plugin (:class:`Engine`): ``tree`` (Slurm 22.05+): ``sbatch --switches=1
--nodes=k``, which waits for one leaf switch (= rack); ``block`` (Slurm 23.11+, topology/block): plain
``sbatch --nodes=k``: a job of at most the base block size always lands inside one block (``eval_nodes_block``
picks the lowest block level that holds it; SchedMD/slurm src/plugins/topology/block/eval_nodes_block.c), so
it needs no flag; a larger one gets ``--segment=<base block size>`` when that divides it (each segment in one
block, sbatch(1) of 24.11).

Wait = the first time a poll (every 0.1 s) sees the job RUNNING in Slurm, minus the time the job was handed
over (``sbatch`` for (a), ``POST /v1/jobs`` for (b), (c)); JCT = the first poll that sees it ended, minus the
same hand-over time: the same clock and the same resolution for all runs.
"""

from __future__ import annotations

import math
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from rackscale.model.topology import GPUCluster
from rackscale.slurm.commands import Slurm, SlurmError, SlurmJob

SIZES = (4, 8, 12, 16)  # GPUs: a quarter, half, three quarters and all of a 4-node x 4-GPU rack
RACK_SHARES = (0.25, 0.5, 0.75, 1.0)


class Engine(StrEnum):
    tree = "tree"  # topology/tree, Slurm places with --switches=1
    block = "block"  # topology/block, Slurm places by its block rule


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
    refused: int = 0  # handed over, never ran: Slurm refused the placement
    mean_jct_s: float = 0.0
    waits: dict[str, float] = field(default_factory=dict)

    @property
    def one_rack_share(self) -> float:
        return self.one_rack / self.started if self.started else 0.0

    def line(self) -> str:
        return (
            f"{self.label:<30} jobs {self.jobs:>3}  started {self.started:>3}  refused {self.refused:>3}  "
            f"inside one rack {self.one_rack_share:6.1%}  mean wait {self.mean_wait_s:6.2f} s  "
            f"mean JCT {self.mean_jct_s:6.2f} s  makespan {self.makespan_s:6.1f} s"
        )

    def row(self) -> dict[str, object]:
        return {
            "placement": self.label,
            "gangs": self.jobs,
            "started": self.started,
            "refused": self.refused,
            "inside_one_rack": round(self.one_rack_share, 4),
            "mean_wait_s": round(self.mean_wait_s, 3),
            "mean_jct_s": round(self.mean_jct_s, 3),
            "makespan_s": round(self.makespan_s, 2),
        }


def gang_sizes(cluster: GPUCluster) -> tuple[int, ...]:
    """GPUs of a quarter, half, three quarters and all of the smallest rack, in whole nodes (4x4-GPU racks:
    :data:`SIZES`; 18x4 (NVL72): 20, 36, 56, 72)."""
    rack = min(cluster.racks, key=lambda r: len(r.nodes))
    npr, gpn = len(rack.nodes), rack.gpus_per_node
    return tuple(sorted({max(1, math.ceil(q * npr)) * gpn for q in RACK_SHARES}))


def job_mix(
    n: int,
    *,
    seed: int = 0,
    spread_s: float = 4.0,
    sleep_s: tuple[int, int] = (2, 4),
    sizes: tuple[int, ...] = SIZES,
) -> list[Gang]:
    rng = random.Random(seed)
    arrivals = sorted(rng.uniform(0, spread_s) for _ in range(n))
    return [Gang(f"j{i:03d}", rng.choice(sizes), rng.randint(*sleep_s), t) for i, t in enumerate(arrivals)]


@dataclass(slots=True)
class _Seen:
    started: dict[str, float] = field(default_factory=dict)
    ended: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    refused: set[str] = field(default_factory=set)


def _none() -> set[str]:
    return set()


@dataclass(slots=True)
class _Run:
    """One run's bookkeeping, shared by the submitting thread and the watcher."""

    slurm: Slurm
    names: dict[str, str]  # Slurm job name -> gang
    timeout_s: float
    t0: float = field(default_factory=time.monotonic)
    submitted: dict[str, float] = field(default_factory=dict)
    done: bool = False
    earlier: set[str] = field(default_factory=set)
    failed: Callable[[], set[str]] = _none  # gangs that ended without a Slurm job (refused)
    seen: _Seen = field(default_factory=_Seen)
    error: str = ""

    def watch(self) -> None:
        """Poll until everything is submitted and every gang ran and ended (or was refused): first RUNNING
        and first ended time, and nodes, by gang. Jobs Slurm already knew when the run began (an earlier
        run's, kept for MinJobAge under the same names) are not this run's."""
        s = self.seen
        deadline = self.t0 + self.timeout_s
        while True:
            now = time.monotonic()
            jobs: dict[str, SlurmJob] = self.slurm.jobs()
            live = 0
            for j in jobs.values():
                gang = self.names.get(j.name)
                if j.id in self.earlier or gang is None or gang not in self.submitted:
                    continue
                if gang not in s.started and (j.state == "RUNNING" or (j.terminal and j.nodes)):
                    s.started[gang], s.nodes[gang] = now - self.t0, j.nodes  # a short job may end between polls
                if not j.terminal:
                    live += 1
                elif gang in s.started:
                    s.ended.setdefault(gang, now - self.t0)
            s.refused = self.failed() - set(s.started)
            if self.done and live == 0 and len(s.started) + len(s.refused) >= len(self.submitted):
                return
            if now > deadline:
                self.error = f"the run did not end in {self.timeout_s:g} s ({live} Slurm jobs still live)"
                return
            time.sleep(0.1)

    def result(self, label: str, gangs: list[Gang], cluster: GPUCluster) -> RunResult:
        if self.error:
            raise SlurmError(f"{label}: {self.error}")
        s = self.seen
        rack_of = {n.name: n.rack for n in cluster.nodes}
        waits = {g: max(0.0, t - self.submitted[g]) for g, t in s.started.items() if g in self.submitted}
        jcts = [max(0.0, t - self.submitted[g]) for g, t in s.ended.items() if g in self.submitted]
        one = sum(1 for g in s.started if len({rack_of.get(n) for n in s.nodes.get(g, ())}) == 1)
        mean = sum(waits.values()) / len(waits) if waits else 0.0
        jct = sum(jcts) / len(jcts) if jcts else 0.0
        makespan = time.monotonic() - self.t0
        return RunResult(label, len(gangs), len(s.started), one, mean, makespan, len(s.refused), jct, waits)


def _timeout(gangs: list[Gang]) -> float:
    """Generous: every gang one after the other, plus start-up; only a stuck run reaches it."""
    return 120.0 + sum(g.sleep_s + 5 for g in gangs)


def slurm_flags(engine: Engine, nodes: int, base_block: int) -> list[str]:
    """How (a) asks Slurm to keep a gang of ``nodes`` nodes together."""
    if engine is Engine.tree:
        return ["--switches=1"]
    if nodes > base_block and nodes % base_block == 0:
        return [f"--segment={base_block}"]
    return []


def run_slurm(
    slurm: Slurm, cluster: GPUCluster, gangs: list[Gang], out_dir: Path, *, engine: Engine = Engine.tree
) -> RunResult:
    gpn = cluster.racks[0].gpus_per_node
    base = min(len(r.nodes) for r in cluster.racks)
    run = _Run(slurm, {f"sb-{g.name}": g.name for g in gangs}, _timeout(gangs), earlier=set(slurm.jobs()))
    run.t0 = time.monotonic()
    watcher = threading.Thread(target=run.watch)
    watcher.start()
    try:
        for g in gangs:
            time.sleep(max(0.0, g.arrive_s - (time.monotonic() - run.t0)))
            k = -(-g.gpus // gpn)
            run.submitted[g.name] = time.monotonic() - run.t0
            _submit(
                slurm,
                f"sb-{g.name}",
                [
                    f"--job-name=sb-{g.name}",
                    *slurm_flags(engine, k, base),
                    f"--nodes={k}",
                    f"--gres=gpu:{min(gpn, g.gpus)}",
                    "--ntasks-per-node=1",
                    f"--output={slurm.path(out_dir)}/sb-{g.name}.out",
                    f"--chdir={slurm.path(out_dir)}",
                    "--wrap",
                    f"sleep {g.sleep_s}",
                ],
            )
    finally:
        run.done = True
        watcher.join()
    label = "slurm --switches=1" if engine is Engine.tree else "slurm topology/block"
    return run.result(label, gangs, cluster)


def _submit(slurm: Slurm, name: str, args: list[str]) -> None:
    """sbatch; one that timed out counts when Slurm lists the job anyway (a busy controller queues it but
    answers late): submitting again would run it twice."""
    try:
        slurm.sbatch(args)
    except SlurmError as e:
        if "timed out" not in str(e) or not slurm.queue_by_name(name):
            raise


def run_slurm_switches(slurm: Slurm, cluster: GPUCluster, gangs: list[Gang], out_dir: Path) -> RunResult:
    return run_slurm(slurm, cluster, gangs, out_dir, engine=Engine.tree)


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
    if slurm.root is not None:
        opts["slurm_root"] = str(slurm.root)
    svc = build_service(ServiceConfig(data_dir=data_dir, backend="slurm", backend_options=opts, interval_s=0.02))
    cluster = svc.ctx.runner.live.cluster
    server = uvicorn.Server(server_config(svc.app, host="127.0.0.1", port=0, lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    run = _Run(slurm, {f"rs-{g.name}": g.name for g in gangs}, _timeout(gangs))
    try:
        deadline = time.monotonic() + 15
        while not server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the service did not start in 15 s")
            time.sleep(0.02)
        url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        auth = {"Authorization": f"Bearer {svc.admin_token}"} if svc.admin_token else {}
        with (
            httpx.Client(base_url=url, timeout=10, headers=auth) as c,
            httpx.Client(base_url=url, timeout=10, headers=auth) as watch_client,  # one client per thread
        ):

            def failed() -> set[str]:
                r = watch_client.get("/v1/jobs", params={"status": "failed", "limit": 5000})
                return {j["name"] for j in r.json()["items"]} if r.status_code == 200 else set()

            run.failed = failed
            run.earlier = set(slurm.jobs())  # an earlier run's jobs, still listed (MinJobAge)
            run.t0 = time.monotonic()
            watcher = threading.Thread(target=run.watch)
            watcher.start()
            try:
                for g in gangs:
                    time.sleep(max(0.0, g.arrive_s - (time.monotonic() - run.t0)))
                    body: dict[str, object] = {
                        "name": g.name,
                        "kind": "training",
                        "gpus": g.gpus,
                        "gpusPerWorker": min(4, g.gpus),
                        "command": ["sleep", str(g.sleep_s)],
                    }
                    if require_rack:
                        body["topology"] = {"required": "rack"}
                    at = time.monotonic() - run.t0
                    c.post("/v1/jobs", json=body).raise_for_status()
                    run.submitted[g.name] = at  # only what was accepted is waited for (a refusal must not hang)
            finally:
                run.done = True
                watcher.join()
            label = "rackscale, one rack required" if require_rack else "rackscale (slurm backend)"
            return run.result(label, gangs, cluster)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        svc.close()


def compare(
    slurm: Slurm,
    cluster: GPUCluster,
    n: int,
    *,
    seed: int = 0,
    spread_s: float = 4.0,
    require_rack: bool = True,
    engine: Engine = Engine.tree,
    sizes: tuple[int, ...] | None = None,
) -> list[RunResult]:
    """Slurm's own placement, then rackscale with its default (one rack preferred), then (``require_rack``)
    with one rack required: the same gang sequence each time (``sizes``: :func:`gang_sizes` by default)."""
    gangs = job_mix(n, seed=seed, spread_s=spread_s, sizes=sizes or gang_sizes(cluster))
    # Inside Slurm's root when it runs in one: a chrooted sbatch and slurmd see only what is in there.
    base = slurm.root / "tmp" if slurm.root is not None else None
    work = Path(tempfile.mkdtemp(prefix="rs-compare-", dir=base))
    try:
        out = [run_slurm(slurm, cluster, gangs, work, engine=engine), run_rackscale(slurm, gangs, work / "service")]
        if require_rack:
            out.append(run_rackscale(slurm, gangs, work / "service-required", require_rack=True))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out
