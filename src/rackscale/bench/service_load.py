"""The service benchmark's load: the jobs it submits (:func:`job_doc`), and the client processes that submit
them, each over a few keep-alive HTTP/1.1 connections with a small asyncio client (no HTTP library: on two
cores the client must not be the bottleneck), bounded in count and in time."""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rackscale.bench.service_server import HOST

MIN_DURATION_S = 60  # the mix's shortest job (estimates are log-uniform, 60-3,600 s)


def job_doc(i: int, seed: int = 0, prefix: str = "bench") -> dict[str, Any]:
    """Job ``i`` of the load: mostly small training gangs (1-8 GPUs), some 16-72, a little inference and
    batch; estimated durations 60-3600 s (log-uniform: most short), so with ``--speed 100`` jobs end every
    second and the scheduler keeps placing."""
    rng = random.Random(seed * 1_000_003 + i)
    u = rng.random()
    duration = round(MIN_DURATION_S * 60 ** rng.random())
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


def worker_main(plan: WorkerPlan, acked: Any, results: Any) -> None:
    results.put(asyncio.run(_drive(plan, acked)))
