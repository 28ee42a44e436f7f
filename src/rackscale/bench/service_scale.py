"""The service benchmark at cluster scale (issue 16 part 3): ``rackscale serve`` on a 100,000-GPU spec
(``--racks 1389``: 1,389 NVL72 racks = 100,008 GPUs) with a backlog of ``--backlog`` pending jobs, under an
open-loop submission load.

How the backlog is made (honest, not a trick of the scheduler): before the measured load, jobs of the
benchmark's usual mix (:func:`~rackscale.bench.service_load.job_doc`: 1-72 GPU gangs, inference, batch) are
submitted through the API, unpaced, until the cluster is full and ``backlog`` of them wait. At ``--speed 1``
their durations (60-3,600 s) end ~15 jobs a second on a full 100,008-GPU cluster, so every cycle places real
work into freed GPUs while 50,000+ jobs wait behind; nothing is held by a quota or a paused cycle. The
measured load starts only once the first of them can have ended (60 s of service clock after the fill
began): a fast fill would otherwise measure a cluster where nothing ends and no cycle places anything. The
report counts the jobs placed and ended during the load (``churn``) to show it.

Then, for ``duration`` seconds: submissions at ``rate``/s (paced open-loop: latency counts from each send
time), pages of ``GET /v1/jobs?status=pending`` walking the queue with the ``after`` cursor, ``/metrics``
scrapes (time and bytes), the server's RSS, and ``page_loads`` loads of the web page in headless Chromium.
The scheduling cycles come from the ``rackscale_scheduling_attempt_duration_seconds`` histogram between a
scrape before and one after the load.
"""

from __future__ import annotations

import multiprocessing as mp
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rackscale.bench import Result, machine_info
from rackscale.bench.service_checks import scrape_text, store_problems
from rackscale.bench.service_load import MIN_DURATION_S, WorkerPlan, job_doc, job_gpus, worker_main
from rackscale.bench.service_probes import Probes, cycle_histogram, page_loads, rss_mb, summary_ms
from rackscale.bench.service_server import ServerProcess, free_port, http_json

FILL_ROUNDS = 6  # submission rounds to reach the backlog (the first does nearly all of it)
FILL_SHARE = 0.99  # enough of the backlog: jobs keep starting (~15/s) while the last round is sent


def _metrics_text(url: str) -> str:
    status, text = http_json(f"{url}/metrics", timeout=60)
    return text if status == 200 and isinstance(text, str) else ""


def _submit(
    port_file: Path,
    indices: list[int],
    *,
    token: str,
    concurrency: int,
    workers: int,
    seed: int,
    prefix: str,
    rate: float,
    limit_s: float,
) -> dict[str, Any]:
    """Send job ``indices`` (of the mix) from ``workers`` client processes; their merged outcome."""
    ctx = mp.get_context("spawn")
    acked, results = ctx.Value("q", 0), ctx.Queue()
    deadline = time.time() + limit_s
    conns = [concurrency // workers + (1 if w < concurrency % workers else 0) for w in range(workers)]
    procs = [
        ctx.Process(
            target=worker_main,
            args=(
                WorkerPlan(
                    str(port_file), indices[w::workers], conns[w], deadline, seed, prefix, rate / workers, token
                ),
                acked,
                results,
            ),
            daemon=True,
        )
        for w in range(workers)
    ]
    for p in procs:
        p.start()
    outs = [results.get(timeout=limit_s + 60) for _ in procs]
    for p in procs:
        p.join(timeout=10)
    lat = [x / 1e9 for o in outs for x in o["lat_ns"]]
    rejected: dict[str, int] = {}
    for o in outs:
        for k, v in o["rejected"].items():
            rejected[k] = rejected.get(k, 0) + v
    wall = max(o["last_reply"] for o in outs) - min(o["first_send"] for o in outs)
    accepted = sum(len(o["acked"]) for o in outs)
    return {
        "accepted": accepted,
        "non_2xx": rejected,
        "no_reply": sum(len(o["in_doubt"]) for o in outs),
        "wall_s": round(wall, 2),
        "submissions_per_s": round(accepted / wall, 1) if wall > 0 else None,
        "latency_ms": summary_ms(lat),
        "cpu_s_clients": round(sum(o["cpu_s"] for o in outs), 2),
    }


def _cluster(url: str) -> dict[str, Any]:
    _, c = http_json(f"{url}/v1/cluster", timeout=60)
    return {k: c.get(k) for k in ("gpus", "gpusAllocated", "running", "pending")}


def _fill(
    server: ServerProcess,
    port_file: Path,
    backlog: int,
    *,
    seed: int,
    concurrency: int,
    workers: int,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Submit jobs of the mix, unpaced, until ``backlog`` of them are pending (bounded rounds)."""
    mean_gpus = sum(job_gpus(job_doc(i, seed, "backlog")) for i in range(2000)) / 2000
    t0 = time.monotonic()
    sent, accepted = 0, 0
    c = _cluster(server.url)
    for _ in range(FILL_ROUNDS):
        free = float(c["gpus"]) - float(c["gpusAllocated"])
        want = backlog - int(c["pending"]) + int(free / mean_gpus * 1.05)
        if int(c["pending"]) >= FILL_SHARE * backlog or want <= 0:
            break
        got = _submit(
            port_file,
            list(range(sent, sent + want)),
            token=server.token,
            concurrency=concurrency,
            workers=workers,
            seed=seed,
            prefix="backlog",
            rate=0.0,
            limit_s=600,
        )
        sent += want
        accepted += got["accepted"]
        time.sleep(1.0)  # a step takes the inbox; then /v1/cluster counts the newcomers
        c = _cluster(server.url)
        say(f"backlog: {accepted:,} accepted, {c['pending']:,} pending, {c['running']:,} running")
    return {"submitted": sent, "accepted": accepted, "s": round(time.monotonic() - t0, 1), "cluster": c}


def _churn(before: str, after: str) -> dict[str, float]:
    """Jobs the scheduler placed and jobs that ended between two ``/metrics`` texts."""
    b, a = scrape_text(before), scrape_text(after)
    return {k: a[k] - b[k] for k in ("scheduled", "finished")}


def run_scale_benchmark(
    *,
    racks: int = 1389,
    backlog: int = 50_000,
    rate: float = 1000.0,
    duration: float = 20.0,
    concurrency: int = 32,
    workers: int = 2,
    speed: float = 1.0,
    seed: int = 0,
    page_load_count: int = 3,
    list_every: float = 0.1,
    cycle_max_busy: float | None = None,
    chromium: str | None = None,
    log: Callable[[str], None] | None = None,
) -> Result:
    """Fill the backlog, then measure under the paced load; the report (``ok`` False: inconsistent)."""
    say = log or (lambda _msg: None)
    workers = max(1, min(workers, concurrency))
    tmp = Path(tempfile.mkdtemp(prefix="rackscale-bench-scale-"))
    extra = [] if cycle_max_busy is None else ["--cycle-max-busy", f"{cycle_max_busy:g}"]
    server = ServerProcess(tmp / "data", free_port(), speed=speed, racks=racks, extra=extra)
    port_file = tmp / "port"
    port_file.write_text(str(server.port))
    try:
        t0 = time.monotonic()
        server.start(ready_timeout=300)
        ready_s = round(time.monotonic() - t0, 2)
        rss_idle = rss_mb(server.pid)
        say(f"server pid {server.pid} ready in {ready_s} s ({rss_idle['rss']} MiB)")
        filling = time.monotonic()
        fill = _fill(server, port_file, backlog, seed=seed, concurrency=concurrency, workers=workers, say=say)
        if (wait := filling + (MIN_DURATION_S + 5) / speed - time.monotonic()) > 0:
            say(f"waiting {wait:.0f} s for the first jobs to end (the shortest runs {MIN_DURATION_S} s)")
            time.sleep(wait)
        before = _metrics_text(server.url)
        start = time.monotonic()
        probes = Probes(server.port, server.token, server.pid, deadline=start + duration, list_every=list_every)
        threads = probes.start()
        load: dict[str, Any] = {}
        n_load = int(rate * duration * 1.05) + 1

        def drive() -> None:
            load.update(
                _submit(
                    port_file,
                    list(range(n_load)),
                    token=server.token,
                    concurrency=concurrency,
                    workers=workers,
                    seed=seed + 1,
                    prefix="load",
                    rate=rate,
                    limit_s=duration,
                )
            )

        driver = threading.Thread(target=drive, name="load", daemon=True)
        driver.start()
        page: dict[str, Any] | None = None
        if page_load_count > 0 and chromium:
            time.sleep(min(2.0, duration / 4))  # the load is under way before the first page load
            page = page_loads(
                server.url,
                server.token,
                times=page_load_count,
                gap_s=duration / (page_load_count + 1),
                chromium=chromium,
            )
        driver.join(timeout=duration + 120)
        for t in threads:
            t.join(timeout=60)
        after = _metrics_text(server.url)
        cluster_after = _cluster(server.url)
        # The store's own check only: the load benchmark's allocation check reads every rack's grid (1,389
        # requests) on a cluster that never stands still here (~15 ends a second), minutes for no verdict.
        alloc: list[str] = []
        info: dict[str, Any] = {"checked": False}
        store = store_problems(server.db_url)
        return {
            "mode": "scale",
            "params": {
                "racks": racks,
                "backlog": backlog,
                "rate": rate,
                "duration_s": duration,
                "concurrency": concurrency,
                "workers": workers,
                "speed": speed,
                "seed": seed,
            },
            "machine": machine_info(),
            "ready_s": ready_s,
            "server_rss_idle_mb": rss_idle,
            "fill": fill,
            "load": load,
            "cycles": cycle_histogram(before, after),
            "churn": _churn(before, after),
            **probes.report(),
            "page": page,
            "cluster_after": cluster_after,
            "server_rss_end_mb": rss_mb(server.pid),
            "verdict": {
                "ok": not alloc and not store,
                "store_problems": store[:10],
                "allocation_problems": alloc[:10],
                "allocation": info,
            },
            "ok": not alloc and not store,
        }
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def scale_rows(r: Result) -> list[tuple[str, str, str]]:
    """The report as (metric, value, goal) rows for a table."""

    def f(v: Any, digits: int = 0) -> str:
        return "-" if v is None else f"{v:,.{digits}f}" if isinstance(v, float) else f"{v:,}"

    load, cyc, fill = r["load"], r["cycles"], r["fill"]
    page = (r.get("page") or {}).get("load_ms", {})
    return [
        ("ready s (start, empty store)", f(r["ready_s"], 1), ""),
        (
            "backlog: pending / running at the start",
            f"{f(fill['cluster']['pending'])} / {f(fill['cluster']['running'])}",
            "",
        ),
        ("submissions/s (paced)", f(load.get("submissions_per_s"), 0), f">= {r['params']['rate']:,.0f}"),
        (
            "submit p50 / p99 / max ms",
            " / ".join(f(load["latency_ms"][k], 1) for k in ("p50", "p99", "max")),
            "p99 < 50",
        ),
        (
            "jobs placed / ended during the load",
            f"{f(r['churn']['scheduled'])} / {f(r['churn']['finished'])}" if "churn" in r else "-",
            "> 0 (the cycles place work)",
        ),
        ("non-2xx / no reply", f"{sum(load['non_2xx'].values())} / {load['no_reply']}", "0 / 0"),
        (
            "cycles: n / mean ms / p99 <= s / over 1 s",
            f"{f(cyc['count'])} / {f(cyc['mean_ms'], 1)} / {f(cyc['p99_le_s'], 3)} / {f(cyc['over_1s'])}",
            "< 1 s",
        ),
        (
            f"GET /v1/jobs page ({r['list_page_ms']['limit']} rows) p50 / p99 ms",
            f"{f(r['list_page_ms']['p50'], 1)} / {f(r['list_page_ms']['p99'], 1)}",
            "p99 < 50",
        ),
        (
            "/metrics scrape p50 / max ms, bytes",
            f"{f(r['metrics_scrape_ms']['p50'], 0)} / "
            f"{f(r['metrics_scrape_ms']['max'], 0)}, {f(r['metrics_scrape_ms']['bytes'])}",
            "< 1,000 ms",
        ),
        ("page load in Chromium p50 / max ms", f"{f(page.get('p50'), 0)} / {f(page.get('max'), 0)}", ""),
        (
            "server RSS idle / peak MiB",
            f"{f(r['server_rss_idle_mb']['rss'], 0)} / {f(r['server_rss_end_mb']['peak'], 0)}",
            "",
        ),
    ]
