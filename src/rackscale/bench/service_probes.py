"""What the scale mode of the service benchmark measures while the submission load runs: paged ``GET
/v1/jobs`` and ``/metrics`` scrapes on a keep-alive connection of their own (:class:`Probes`, a thread),
the server's memory (``/proc/PID/status``), the scheduling-cycle histogram between two scrapes
(:func:`cycle_histogram`), and the web page's load time in a real headless Chromium (:func:`page_loads`).
"""

from __future__ import annotations

import http.client
import json
import math
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackscale.bench.service_server import HOST

CYCLE_BUCKET_RE = re.compile(
    r'^rackscale_scheduling_attempt_duration_seconds_bucket\{le="([^"]+)"\}\s+([0-9.eE+]+)', re.M
)
CYCLE_SUM_RE = re.compile(r"^rackscale_scheduling_attempt_duration_seconds_(sum|count)\s+([0-9.eE+]+)", re.M)
# The browser flags of the web tests (tests/service/test_web.py): Debian's chromium, no sandbox, no GPU.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking"]


def pct_ms(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile of seconds, in milliseconds."""
    if not values:
        return None
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))], 2)


def summary_ms(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50": pct_ms(values, 50),
        "p99": pct_ms(values, 99),
        "max": pct_ms(values, 100),
    }


def rss_mb(pid: int) -> dict[str, float | None]:
    """Resident and peak resident memory of ``pid`` in MiB (Linux; None elsewhere)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {"rss": None, "peak": None}

    def kib(key: str) -> float | None:
        m = re.search(rf"^{key}:\s+(\d+) kB", text, re.M)
        return round(int(m.group(1)) / 1024, 1) if m else None

    return {"rss": kib("VmRSS"), "peak": kib("VmHWM")}


def cycle_histogram(before: str, after: str) -> dict[str, Any]:
    """The scheduling cycles between two ``/metrics`` texts: count, mean, and from the cumulative buckets
    the share at or under each bound and upper bounds of p50/p99 (a histogram knows no more than that)."""

    def parse(text: str) -> tuple[dict[float, float], dict[str, float]]:
        buckets = {float(le): float(v) for le, v in CYCLE_BUCKET_RE.findall(text)}
        return buckets, {k: float(v) for k, v in CYCLE_SUM_RE.findall(text)}

    b0, s0 = parse(before)
    b1, s1 = parse(after)
    n = s1.get("count", 0.0) - s0.get("count", 0.0)
    total = s1.get("sum", 0.0) - s0.get("sum", 0.0)
    delta = {le: b1.get(le, 0.0) - b0.get(le, 0.0) for le in sorted(b1)}

    def bound(q: float) -> float | None:
        for le, c in delta.items():
            if n and c >= q * n:
                return le
        return None

    return {
        "count": n,
        "mean_ms": round(1000 * total / n, 2) if n else None,
        "p50_le_s": bound(0.50),
        "p99_le_s": bound(0.99),
        "over_1s": n - delta.get(1.0, 0.0) if n else 0.0,
        "buckets": {f"{le:g}": c for le, c in delta.items()},
    }


class _Keepalive:
    """One keep-alive HTTP/1.1 connection with the bearer token (reopened after an error)."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.conn: http.client.HTTPConnection | None = None

    def get(self, path: str, timeout: float = 30.0) -> tuple[int, bytes]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            self.conn.request("GET", path, headers=self.headers)
            r = self.conn.getresponse()
            return r.status, r.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise


@dataclass
class Probes:
    """Reads while the load runs: a page of ``GET /v1/jobs?status=pending`` every ``list_every`` s, walking
    the queue with the ``after`` cursor (``rackscale get jobs --all``'s way, ``limit`` rows a page), a
    ``/metrics`` scrape every ``scrape_every`` s, and the server's RSS every second."""

    port: int
    token: str
    pid: int
    deadline: float  # time.monotonic() at which the probes stop
    limit: int = 500
    list_every: float = 0.1
    scrape_every: float = 2.0
    lists: list[float] = field(default_factory=list)
    list_bytes: list[int] = field(default_factory=list)
    walks: list[dict[str, float]] = field(default_factory=list)  # full walks of the pending queue
    scrapes: list[float] = field(default_factory=list)
    scrape_bytes: list[int] = field(default_factory=list)
    rss: list[dict[str, float | None]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def _list_loop(self) -> None:
        conn = _Keepalive(self.port, self.token)
        after, walk_t0, walk_rows = 0, time.monotonic(), 0
        while time.monotonic() < self.deadline:
            t0 = time.perf_counter()
            try:
                status, body = conn.get(f"/v1/jobs?status=pending&limit={self.limit}&after={after}")
            except (OSError, http.client.HTTPException):
                self.errors["list"] = self.errors.get("list", 0) + 1
                time.sleep(self.list_every)
                continue
            self.lists.append(time.perf_counter() - t0)
            self.list_bytes.append(len(body))
            if status != 200:
                self.errors[f"list {status}"] = self.errors.get(f"list {status}", 0) + 1
            else:
                page = json.loads(body)
                walk_rows += len(page["items"])
                after = page["nextAfter"] or 0
                if not after:  # a full walk of the queue: its rows and wall time (pauses included)
                    self.walks.append({"rows": walk_rows, "s": round(time.monotonic() - walk_t0, 2)})
                    walk_t0, walk_rows = time.monotonic(), 0
            time.sleep(max(0.0, self.list_every - (time.perf_counter() - t0)))

    def _scrape_loop(self) -> None:
        conn = _Keepalive(self.port, self.token)
        next_rss = 0.0
        next_scrape = time.monotonic() + self.scrape_every / 2
        while time.monotonic() < self.deadline:
            now = time.monotonic()
            if now >= next_rss:
                self.rss.append(rss_mb(self.pid))
                next_rss = now + 1.0
            if now >= next_scrape:
                t0 = time.perf_counter()
                try:
                    status, body = conn.get("/metrics")
                    self.scrapes.append(time.perf_counter() - t0)
                    self.scrape_bytes.append(len(body))
                    if status != 200:
                        self.errors[f"metrics {status}"] = self.errors.get(f"metrics {status}", 0) + 1
                except (OSError, http.client.HTTPException):
                    self.errors["metrics"] = self.errors.get("metrics", 0) + 1
                next_scrape = time.monotonic() + self.scrape_every
            time.sleep(0.05)

    def start(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self._scrape_loop, name="probe-metrics", daemon=True)]
        if self.list_every > 0:  # 0: no listing (to see what the submissions alone get)
            threads.append(threading.Thread(target=self._list_loop, name="probe-list", daemon=True))
        for t in threads:
            t.start()
        return threads

    def report(self) -> dict[str, Any]:
        peak = [r["peak"] for r in self.rss if r["peak"] is not None]
        now = [r["rss"] for r in self.rss if r["rss"] is not None]
        return {
            "list_page_ms": summary_ms(self.lists)
            | {"limit": self.limit, "bytes_max": max(self.list_bytes, default=0)},
            "list_walks": self.walks,
            "metrics_scrape_ms": summary_ms(self.scrapes) | {"bytes": max(self.scrape_bytes, default=0)},
            "server_rss_mb": {"last": now[-1] if now else None, "peak": max(peak, default=None)},
            "probe_errors": self.errors,
        }


def page_loads(url: str, token: str, *, times: int, gap_s: float, chromium: str) -> dict[str, Any]:
    """Load the web page ``times`` times, ``gap_s`` apart, each in a fresh browser context: seconds from
    ``goto`` until the KPIs, the rack aggregate, the first rack's grid and a queued job are drawn, and the
    slowest request of that load (the Resource Timing entries)."""
    from playwright.sync_api import sync_playwright

    loads: list[float] = []
    slowest: list[dict[str, Any]] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            for i in range(times):
                if i:
                    time.sleep(gap_s)
                ctx = browser.new_context(viewport={"width": 1440, "height": 900})
                page = ctx.new_page()
                page.set_default_timeout(60_000)
                t0 = time.perf_counter()
                page.goto(f"{url}/#token={token}")
                for sel in (
                    "[data-kpi=idleRate] .value:text-matches('%$')",
                    "#aggregate:not([hidden])",
                    ".rack[data-rack=r000]",
                    "#queue tr[data-job]",
                ):
                    page.wait_for_selector(sel)
                loads.append(time.perf_counter() - t0)
                entries = page.evaluate(
                    "performance.getEntriesByType('resource').map(e => [e.name.replace(location.origin, ''),"
                    " e.duration, e.transferSize])"
                )
                worst = max(entries, key=lambda e: e[1], default=None)
                if worst is not None:
                    slowest.append({"path": worst[0][:120], "ms": round(worst[1], 1), "requests": len(entries)})
                ctx.close()
        finally:
            browser.close()
    return {"load_ms": summary_ms(loads), "slowest_request": slowest}
