"""Service load and crash benchmark: ``rackscale serve`` as a subprocess, driven over loopback HTTP.

The server runs in its own process (``python -m rackscale.cli.app serve`` on 127.0.0.1, a free port, a
temporary data directory); the load comes from ``workers`` client processes, each running ``concurrency /
workers`` keep-alive HTTP/1.1 connections with a small asyncio client (no HTTP library: on two cores the
client must not be the bottleneck). Every loop is bounded in count (``jobs``) and in time
(``duration_limit``) and stops by itself.

Measured: sustained submissions/s (2xx replies / wall time of the load), submit latency p50/p99/max,
non-2xx replies, and whether the scheduler kept placing (``rackscale_schedule_attempts_total{result=
"scheduled"}`` before and after, and samples of ``/v1/cluster`` during the load).

Crash mode (``crash_after=K``): after K acknowledged submissions the server gets SIGKILL while the load
runs, is restarted on the same data directory, the load goes on, and the result is verified: every job
that got a 2xx reply is in the store exactly once, the store is consistent (``Store.check()``), jobs
running before the crash are running or completed, and the GPUs the running jobs hold agree with the
cluster's count and with the racks' GPU grids (no GPU held twice).

This module runs it (:func:`run_service_benchmark`); the server is :mod:`~rackscale.bench.service_server`,
the load :mod:`~rackscale.bench.service_load`, the checks and the verdict :mod:`~rackscale.bench.service_checks`.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rackscale.bench import Result, machine_info
from rackscale.bench.service_checks import (
    all_jobs,
    allocation_problems,
    consistent_allocations,
    cycles_between,
    scrape,
    store_problems,
    verify,
)
from rackscale.bench.service_load import WorkerPlan, job_doc, job_gpus, worker_main
from rackscale.bench.service_server import HOST, READY_TIMEOUT_S, ServerProcess, free_port, http_json
from rackscale.service.phase import JobPhase


def _pct(values: list[int], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))] / 1e6


def run_service_benchmark(
    *,
    jobs: int = 20_000,
    concurrency: int = 32,
    duration_limit: float = 60.0,
    crash_after: int | None = None,
    durability: str = "normal",
    racks: int = 16,
    speed: float = 100.0,
    workers: int = 2,
    seed: int = 0,
    rate: float = 0.0,
    data_dir: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> Result:
    """Run the load (and the crash, with ``crash_after``); the report as a dict (``ok`` False: a loss)."""
    say = log or (lambda _msg: None)
    workers = max(1, min(workers, concurrency))
    tmp = Path(tempfile.mkdtemp(prefix="rackscale-bench-service-")) if data_dir is None else None
    base = tmp if tmp is not None else Path(data_dir or ".")
    server = ServerProcess(base / "data", free_port(), speed=speed, racks=racks, durability=durability)
    port_file = base / "port"
    port_file.write_text(str(server.port))
    t_start = time.monotonic()
    try:
        server.start()
        say(f"server pid {server.pid} on {server.url}, data {server.data_dir}")
        before = scrape(server.url)
        server_cpu0 = server.cpu_s()
        ctx = mp.get_context("spawn")
        acked_count = ctx.Value("q", 0)
        results = ctx.Queue()
        deadline = time.time() + duration_limit
        per = [list(range(w, jobs, workers)) for w in range(workers)]
        conns = [concurrency // workers + (1 if w < concurrency % workers else 0) for w in range(workers)]
        procs = [
            ctx.Process(
                target=worker_main,
                args=(
                    WorkerPlan(str(port_file), per[w], conns[w], deadline, seed, "bench", rate / workers, server.token),
                    acked_count,
                    results,
                ),
                daemon=True,
            )
            for w in range(workers)
        ]
        for p in procs:
            p.start()
        samples: list[dict[str, Any]] = []
        crash: dict[str, Any] | None = None
        running_before: set[str] = set()
        outs: list[dict[str, Any]] = []
        next_sample = time.monotonic()
        hard_stop = time.monotonic() + duration_limit + 60  # the workers stop at the deadline; this bounds waiting
        while len(outs) < workers and time.monotonic() < hard_stop:
            try:
                outs.append(results.get(timeout=0.1))
                continue
            except Exception:  # queue.Empty
                pass
            if crash_after is not None and crash is None and acked_count.value >= crash_after:
                running_before = {j["name"] for j in all_jobs(server.url, JobPhase.RUNNING)}
                at = acked_count.value
                server.kill9()
                t_kill = time.monotonic()
                say(f"kill -9 after {at} acknowledged submissions ({len(running_before)} jobs running)")
                server.start()
                crash = {
                    "acked_at_kill": at,
                    "running_at_kill": len(running_before),
                    "restart_s": round(time.monotonic() - t_kill, 2),
                }
                say(f"restarted (pid {server.pid}) in {crash['restart_s']} s")
            if time.monotonic() >= next_sample:
                try:
                    _, c = http_json(f"{server.url}/v1/cluster", timeout=5)
                    m = scrape(server.url)
                    samples.append(
                        {
                            "t": round(time.monotonic() - t_start, 2),
                            "acked": acked_count.value,
                            "running": c["running"],
                            "pending": c["pending"],
                            "gpus_allocated": c["gpusAllocated"],
                            "scheduled": m.get("scheduled"),
                        }
                    )
                except (OSError, KeyError, TypeError, ValueError):
                    pass
                next_sample = time.monotonic() + 1.0
        server_cpu1 = server.cpu_s() if crash is None else None
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
        after = scrape(server.url)
        acked = [n for o in outs for n in o["acked"]]
        in_doubt = [n for o in outs for n in o["in_doubt"]]
        lat = [x for o in outs for x in o["lat_ns"]]
        rejected: dict[str, int] = {}
        for o in outs:
            for k, v in o["rejected"].items():
                rejected[k] = rejected.get(k, 0) + v
        wall = (max(o["last_reply"] for o in outs) - min(o["first_send"] for o in outs)) if outs else 0.0
        _, cluster = http_json(f"{server.url}/v1/cluster")
        phases = (JobPhase.PENDING, JobPhase.RUNNING, JobPhase.COMPLETED)
        counts = {p.value: len(all_jobs(server.url, p)) for p in phases}  # plain keys: the report is data
        report: Result = {
            "params": {
                "jobs": jobs,
                "concurrency": concurrency,
                "workers": workers,
                "duration_limit_s": duration_limit,
                "crash_after": crash_after,
                "durability": durability,
                "racks": racks,
                "speed": speed,
                "seed": seed,
                "rate": rate,
            },
            "machine": machine_info(),
            "submitted": len(acked) + sum(rejected.values()) + len(in_doubt),
            "accepted": len(acked),
            "non_2xx": rejected,
            "no_reply": len(in_doubt),
            "wall_s": round(wall, 3),
            "submissions_per_s": round(len(acked) / wall, 1) if wall > 0 else None,
            "latency_ms": {
                "p50": _pct(lat, 50),
                "p99": _pct(lat, 99),
                "max": max(lat) / 1e6 if lat else None,
            },
            "cpu_s": {
                "server": round(server_cpu1 - server_cpu0, 2)
                if server_cpu0 is not None and server_cpu1 is not None
                else None,
                "clients": round(sum(o["cpu_s"] for o in outs), 2),
            },
            "scheduled_during_load": (after.get("scheduled", 0) - before.get("scheduled", 0)) if not crash else None,
            "scheduled_counter": {"before": before.get("scheduled"), "after": after.get("scheduled")},
            "finished_during_load": (after.get("finished", 0) - before.get("finished", 0)) if not crash else None,
            "cycles_during_load": cycles_between(before, after) if not crash else None,
            "jobs_by_status": counts,
            "cluster": {k: cluster.get(k) for k in ("gpus", "gpusAllocated", "running", "pending")},
            "samples": samples,
            "crash": crash,
            "ok": True,
        }
        if crash is not None:
            v = verify(server, acked, in_doubt, running_before)
            report["verdict"] = v
            report["ok"] = v["ok"]
        else:
            alloc, info = consistent_allocations(server.url)
            store = store_problems(server.db_url)
            report["verdict"] = {"ok": not alloc and not store, "store_problems": store, "allocation_problems": alloc}
            report["verdict"]["allocation"] = info
            report["ok"] = report["verdict"]["ok"]
        return report
    finally:
        server.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


# What callers (the CLI, the crash test) import from here, from before the split.
__all__ = [
    "HOST",
    "READY_TIMEOUT_S",
    "ServerProcess",
    "all_jobs",
    "allocation_problems",
    "consistent_allocations",
    "free_port",
    "http_json",
    "job_doc",
    "job_gpus",
    "run_service_benchmark",
    "scrape",
    "store_problems",
    "verify",
]
