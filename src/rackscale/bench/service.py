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
"""

from __future__ import annotations

import asyncio
import json
import math
import multiprocessing as mp
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackscale.bench import Result, machine_info

HOST = "127.0.0.1"
READY_TIMEOUT_S = 60.0
SCHEDULED_RE = re.compile(r'^rackscale_schedule_attempts_total\{result="scheduled"\}\s+([0-9.eE+]+)', re.M)
FINISHED_RE = re.compile(r"^rackscale_jobs_finished_total\{[^}]*\}\s+([0-9.eE+]+)", re.M)
CYCLE_RE = re.compile(r"^rackscale_scheduling_attempt_duration_seconds_(sum|count)\s+([0-9.eE+]+)", re.M)
CYCLE_SLOW_RE = re.compile(r'^rackscale_scheduling_attempt_duration_seconds_bucket\{le="0\.05"\}\s+([0-9.eE+]+)', re.M)


# ------------------------------------------------------------------------------------------ the jobs
def job_doc(i: int, seed: int = 0, prefix: str = "bench") -> dict[str, Any]:
    """Job ``i`` of the load: mostly small training gangs (1-8 GPUs), some 16-72, a little inference and
    batch; estimated durations 60-3600 s (log-uniform: most short), so with ``--speed 100`` jobs end every
    second and the scheduler keeps placing."""
    rng = random.Random(seed * 1_000_003 + i)
    u = rng.random()
    duration = round(60 * 60 ** rng.random())
    doc: dict[str, Any] = {"name": f"{prefix}-{i:07d}", "durationEstimateSeconds": duration}
    if u < 0.80:
        doc |= {"kind": "training", "gpus": rng.choice((1, 1, 2, 2, 4, 4, 8, 8, 8))}
    elif u < 0.90:
        doc |= {"kind": "training", "gpus": rng.choice((16, 24, 32, 48, 64, 72)), "gpusPerWorker": 4}
        doc["gpus"] -= doc["gpus"] % 4
    elif u < 0.95:
        doc |= {"kind": "inference", "replicas": rng.choice((1, 2, 4)), "gpusPerReplica": rng.choice((1, 2))}
    else:
        doc |= {"kind": "batch", "gpus": 1, "tasks": rng.choice((1, 2, 4))}
    return doc


def job_gpus(doc: dict[str, Any]) -> int:
    if doc["kind"] == "inference":
        return int(doc["replicas"]) * int(doc["gpusPerReplica"])
    if doc["kind"] == "batch":
        return int(doc["tasks"]) * int(doc["gpus"])
    return int(doc["gpus"])


# ------------------------------------------------------------------------------------------ the server
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class ServerProcess:
    """``rackscale serve`` in a subprocess on loopback; ``kill9`` and ``restart`` keep the data dir."""

    data_dir: Path
    port: int
    speed: float = 100.0
    racks: int = 4
    durability: str = "normal"
    extra: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.data_dir / 'rackscale.db'}"

    def start(self, *, ready_timeout: float = READY_TIMEOUT_S) -> None:
        cmd = [
            sys.executable,
            "-c",
            "from rackscale.cli.app import main; main()",
            "serve",
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--speed",
            f"{self.speed:g}",
            "--racks",
            str(self.racks),
            "--durability",
            self.durability,
            *self.extra,
        ]
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        self.log_path = self.data_dir.parent / f"server-{self.port}.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.wait_ready(ready_timeout)

    @property
    def token(self) -> str:
        """The admin token the server generated (the default auth, which the load goes through)."""
        path = self.data_dir / "admin.token"
        return path.read_text().strip() if path.exists() else ""  # none with --no-auth or --tokens

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"rackscale serve exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as r:
                    if r.status == 200:
                        _TOKEN[0] = self.token  # the checks' requests carry it too
                        return
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"rackscale serve not ready after {timeout:.0f} s: {self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, n: int = 2000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-n:]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def cpu_s(self) -> float | None:
        """CPU seconds (user + system) the server process has used so far (Linux; None elsewhere)."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)


# ------------------------------------------------------------------------------------------ a small HTTP client
_TOKEN: list[str] = [""]  # the running server's admin token, once it is ready


def http_json(url: str, method: str = "GET", body: object = None, timeout: float = 30.0) -> tuple[int, Any]:
    """One request with the standard library (for checks, not for load), with the server's token."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if _TOKEN[0]:
        headers["Authorization"] = f"Bearer {_TOKEN[0]}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    ctype_json = raw[:1] in (b"{", b"[")
    return status, json.loads(raw) if ctype_json else raw.decode(errors="replace")


class _Conn:
    """One keep-alive HTTP/1.1 connection (requests in turn, no pipelining)."""

    def __init__(self, port: int, token: str = "") -> None:
        self.port = port
        self.auth = f"Authorization: Bearer {token}\r\n" if token else ""
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(HOST, self.port)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            await self.open()
        assert self.reader is not None and self.writer is not None
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\nContent-Type: application/json\r\n"
            f"{self.auth}Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.writer.write(head + body)
        await self.writer.drain()
        status_line = await self.reader.readuntil(b"\r\n")
        status = int(status_line.split(b" ", 2)[1])
        length = 0
        chunked = False
        close = False
        while True:
            line = await self.reader.readuntil(b"\r\n")
            if line == b"\r\n":
                break
            key, _, value = line.partition(b":")
            k = key.strip().lower()
            if k == b"content-length":
                length = int(value.strip())
            elif k == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif k == b"connection" and value.strip().lower() == b"close":
                close = True
        if chunked:
            parts = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                parts.append(await self.reader.readexactly(size + 2))
                if size == 0:
                    break
            payload = b"".join(p[:-2] for p in parts)
        else:
            payload = await self.reader.readexactly(length)
        if close:
            self.close()
        return status, payload


@dataclass(frozen=True)
class WorkerPlan:
    port_file: str  # the server's current port, re-read after a connection fails (the restart may move it)
    indices: list[int]
    connections: int
    deadline: float  # time.time() by which the worker stops sending
    seed: int
    prefix: str
    rate: float = 0.0  # submissions/s this worker offers (0: as fast as replies come back)
    token: str = ""  # the server's admin token


def _read_port(port_file: str) -> int:
    return int(Path(port_file).read_text().strip())


async def _drive(plan: WorkerPlan, acked: Any) -> dict[str, Any]:
    docs = iter(plan.indices)
    out: dict[str, Any] = {"acked": [], "rejected": {}, "in_doubt": [], "lat_ns": [], "conn_errors": 0}

    start = time.perf_counter_ns()
    slots = iter(range(10**12))

    async def one_connection() -> None:
        conn = _Conn(_read_port(plan.port_file), plan.token)
        for i in docs:
            if time.time() >= plan.deadline:
                return
            doc = job_doc(i, plan.seed, plan.prefix)
            body = json.dumps(doc, separators=(",", ":")).encode()
            t0 = time.perf_counter_ns()
            if plan.rate > 0:
                # Paced: each submission has its send time; latency counts from it, so a slow reply also
                # delays the submissions behind it (no coordinated omission).
                t0 = start + int(next(slots) * 1e9 / plan.rate)
                await asyncio.sleep(max(0.0, (t0 - time.perf_counter_ns()) / 1e9))
            try:
                status, _ = await asyncio.wait_for(conn.post("/v1/jobs", body), timeout=30)
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                # No reply: the job may or may not have been committed. Reconnect (bounded by the deadline).
                out["in_doubt"].append(doc["name"])
                out["conn_errors"] += 1
                conn.close()
                while time.time() < plan.deadline:
                    await asyncio.sleep(0.05)
                    conn = _Conn(_read_port(plan.port_file), plan.token)
                    try:
                        await conn.open()
                        break
                    except OSError:
                        conn.close()
                continue
            out["lat_ns"].append(time.perf_counter_ns() - t0)
            if 200 <= status < 300:
                out["acked"].append(doc["name"])
                with acked.get_lock():
                    acked.value += 1
            else:
                out["rejected"][str(status)] = out["rejected"].get(str(status), 0) + 1
        conn.close()

    t0 = time.time()
    await asyncio.gather(*(one_connection() for _ in range(plan.connections)))
    out["first_send"], out["last_reply"] = t0, time.time()
    out["cpu_s"] = time.process_time()
    return out


def _worker_main(plan: WorkerPlan, acked: Any, results: Any) -> None:
    results.put(asyncio.run(_drive(plan, acked)))


# ------------------------------------------------------------------------------------------ checks
def scrape(url: str) -> dict[str, float]:
    status, text = http_json(f"{url}/metrics")
    if status != 200 or not isinstance(text, str):
        return {}
    m = SCHEDULED_RE.search(text)
    cycles = {k: float(v) for k, v in CYCLE_RE.findall(text)}
    fast = CYCLE_SLOW_RE.search(text)
    return {
        "scheduled": float(m.group(1)) if m else 0.0,
        "finished": sum(float(x) for x in FINISHED_RE.findall(text)),
        "cycles": cycles.get("count", 0.0),
        "cycle_s": cycles.get("sum", 0.0),
        "cycles_under_50ms": float(fast.group(1)) if fast else 0.0,
    }


def _cycles(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Scheduling cycles the server ran between two scrapes: how many, mean and share over 50 ms."""
    n = after.get("cycles", 0.0) - before.get("cycles", 0.0)
    slow = n - (after.get("cycles_under_50ms", 0.0) - before.get("cycles_under_50ms", 0.0))
    mean_ms = 1000 * (after.get("cycle_s", 0.0) - before.get("cycle_s", 0.0)) / n if n else 0.0
    return {"count": n, "mean_ms": mean_ms, "over_50ms": slow}


def all_jobs(url: str, status: str | None = None) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    after = 0
    for _ in range(100_000):  # bounded: at most 5,000 jobs a page
        q = f"{url}/v1/jobs?limit=5000&after={after}" + (f"&status={status}" if status else "")
        code, page = http_json(q, timeout=60)
        if code != 200:
            raise RuntimeError(f"GET /v1/jobs: {code} {page}")
        items += page["items"]
        if page.get("nextAfter") is None:
            break
        after = page["nextAfter"]
    return items


def allocation_problems(url: str) -> tuple[list[str], dict[str, Any]]:
    """Problems (empty: none) between running jobs' placements, /v1/cluster and the racks' GPU grids."""
    _, c1 = http_json(f"{url}/v1/cluster")
    running = all_jobs(url, "running")
    _, racks = http_json(f"{url}/v1/racks")
    grids = {r["name"]: http_json(f"{url}/v1/racks/{r['name']}")[1] for r in racks["items"]}
    _, c2 = http_json(f"{url}/v1/cluster")
    stable = all(c1[k] == c2[k] for k in ("running", "pending", "gpusAllocated"))
    problems: list[str] = []
    held: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for j in running:
        p = j.get("placement")
        if p is None:
            problems.append(f"{j['name']}: running without a placement")
            continue
        for s in p["nodes"]:
            for g in s["gpus"]:
                held.setdefault((s["node"], g), []).append((j["name"], s["milliPerGpu"]))
    for (node, g), owners in held.items():
        if sum(m for _, m in owners) > 1000:
            problems.append(f"GPU {g} of {node} held by {', '.join(n for n, _ in owners)}")
    grid_used = 0.0
    for rack in grids.values():
        for node in rack["nodes"]:
            for cell in node["gpuGrid"]:
                grid_used += cell["usedMilli"] / 1000
                owners = held.get((node["name"], cell["index"]), [])
                expect = sum(m for _, m in owners)
                if cell["usedMilli"] != expect:
                    problems.append(
                        f"GPU {cell['index']} of {node['name']}: grid says {cell['usedMilli']} milli "
                        f"({cell['job']}), running jobs hold {expect} ({', '.join(n for n, _ in owners) or 'none'})"
                    )
                elif owners and cell["job"] not in {n for n, _ in owners}:
                    problems.append(f"GPU {cell['index']} of {node['name']}: grid owner {cell['job']} not in {owners}")
    job_gpus_sum = sum(j["gpus"] for j in running)
    if abs(job_gpus_sum - c2["gpusAllocated"]) > 1e-6:
        problems.append(f"running jobs hold {job_gpus_sum} GPUs, /v1/cluster says {c2['gpusAllocated']}")
    if abs(grid_used - c2["gpusAllocated"]) > 1e-6:
        problems.append(f"the racks' GPU grids use {grid_used} GPUs, /v1/cluster says {c2['gpusAllocated']}")
    if len(running) != c2["running"]:
        problems.append(f"{len(running)} jobs listed running, /v1/cluster says {c2['running']}")
    info = {"stable": stable, "running": len(running), "gpus_allocated": c2["gpusAllocated"], "pending": c2["pending"]}
    return problems, info


def consistent_allocations(url: str, tries: int = 20) -> tuple[list[str], dict[str, Any]]:
    """``allocation_problems`` on a snapshot during which the cluster did not move (retried, bounded)."""
    problems: list[str] = []
    info: dict[str, Any] = {}
    for attempt in range(tries):
        problems, info = allocation_problems(url)
        info["attempts"] = attempt + 1
        if info["stable"] and not problems:
            return problems, info
        if info["stable"]:  # problems seen on a still cluster: real
            return problems, info
        time.sleep(0.05)
    return problems, info


def store_problems(db_url: str) -> list[str]:
    from rackscale.service.store import Store

    store = Store(db_url)
    try:
        return store.check()
    finally:
        store.close()


def verify(server: ServerProcess, acked: list[str], in_doubt: list[str], running_before: set[str]) -> dict[str, Any]:
    """The crash verdict: every acked job present once, the store consistent, allocations agree."""
    jobs = all_jobs(server.url)
    names = [j["name"] for j in jobs]
    present = set(names)
    status = {j["name"]: j["status"] for j in jobs}
    dupes = len(names) - len(present)
    lost = sorted(set(acked) - present)
    landed = sum(1 for n in in_doubt if n in present)
    bad_running = sorted(n for n in running_before if status.get(n) not in ("running", "completed"))
    store = store_problems(server.db_url)
    alloc, alloc_info = consistent_allocations(server.url)
    ok = not lost and not dupes and not store and not alloc and not bad_running
    return {
        "ok": ok,
        "jobs_in_store": len(present),
        "acked": len(acked),
        "lost": len(lost),
        "lost_sample": lost[:10],
        "duplicates": dupes,
        "in_doubt": len(in_doubt),
        "in_doubt_committed": landed,
        "running_before_crash": len(running_before),
        "running_before_not_running_or_completed": bad_running[:10],
        "store_problems": store[:10],
        "allocation_problems": alloc[:10],
        "allocation": alloc_info,
    }


# ------------------------------------------------------------------------------------------ the benchmark
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
                target=_worker_main,
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
                running_before = {j["name"] for j in all_jobs(server.url, "running")}
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
        counts = {s: len(all_jobs(server.url, s)) for s in ("pending", "running", "completed")}
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
            "cycles_during_load": _cycles(before, after) if not crash else None,
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


__all__ = [
    "ServerProcess",
    "all_jobs",
    "allocation_problems",
    "consistent_allocations",
    "free_port",
    "http_json",
    "job_doc",
    "run_service_benchmark",
    "store_problems",
    "verify",
]
