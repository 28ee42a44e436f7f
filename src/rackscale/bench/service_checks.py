"""The service benchmark's checks: Prometheus counters scraped from ``/metrics``, every job listed through
the API, whether the running jobs' placements, ``/v1/cluster`` and the racks' GPU grids agree, whether the
store is consistent, and the crash verdict (:func:`verify`)."""

from __future__ import annotations

import re
import time
from typing import Any

from rackscale.bench.service_server import ServerProcess, http_json
from rackscale.service.phase import JobPhase

SCHEDULED_RE = re.compile(r'^rackscale_schedule_attempts_total\{result="scheduled"\}\s+([0-9.eE+]+)', re.M)
FINISHED_RE = re.compile(r"^rackscale_jobs_finished_total\{[^}]*\}\s+([0-9.eE+]+)", re.M)
CYCLE_RE = re.compile(r"^rackscale_scheduling_attempt_duration_seconds_(sum|count)\s+([0-9.eE+]+)", re.M)
CYCLE_SLOW_RE = re.compile(r'^rackscale_scheduling_attempt_duration_seconds_bucket\{le="0\.05"\}\s+([0-9.eE+]+)', re.M)


def scrape(url: str) -> dict[str, float]:
    status, text = http_json(f"{url}/metrics")
    if status != 200 or not isinstance(text, str):
        return {}
    return scrape_text(text)


def scrape_text(text: str) -> dict[str, float]:
    """The counters :func:`scrape` reads, from a ``/metrics`` text."""
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


def cycles_between(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
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
    running = all_jobs(url, JobPhase.RUNNING)
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
    bad_running = sorted(n for n in running_before if status.get(n) not in (JobPhase.RUNNING, JobPhase.COMPLETED))
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
