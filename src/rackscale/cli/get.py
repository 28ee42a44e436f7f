"""``rackscale get jobs|nodes|racks|queues|schedules [NAME]``: list what the server knows, kubectl style."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from rackscale.cli.client import (
    EXIT_USAGE,
    Api,
    ServerOpt,
    TokenFileOpt,
    age,
    connect,
    die,
    num,
    quote_path,
    resource,
    table,
    warn,
)
from rackscale.cli.output import OutputFormat, emit

STATUSES = ("pending", "running", "completed", "failed", "cancelled")
SCHEDULE_WORDS = ("schedules", "schedule", "sched")
PAGE = 500


class GetFormat(StrEnum):
    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"


def get(
    kind: Annotated[
        str,
        typer.Argument(
            metavar="TYPE", help="jobs (job), nodes (node, no), racks (rack), queues (q), schedules (schedule)."
        ),
    ],
    name: Annotated[str | None, typer.Argument(metavar="[NAME]", help="Only this one.", show_default=False)] = None,
    output: Annotated[
        GetFormat, typer.Option("--output", "-o", help="table, wide (more columns), json or yaml.")
    ] = GetFormat.table,
    queue: Annotated[str | None, typer.Option("--queue", help="jobs: only this queue.", show_default=False)] = None,
    status: Annotated[
        str | None,
        typer.Option(
            "--status", help="jobs: only these statuses, comma-separated (pending,running,...).", show_default=False
        ),
    ] = None,
    job_kind: Annotated[
        str | None, typer.Option("--kind", help="jobs: training, inference or batch.", show_default=False)
    ] = None,
    all_pages: Annotated[
        bool, typer.Option("--all", "-A", help=f"jobs: every page (default: the first {PAGE}, oldest first).")
    ] = False,
    server: ServerOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """List jobs, nodes, racks, queues or schedules (or show one by NAME).

    Examples:

      rackscale get jobs --status pending,running
      rackscale get job train-1 -o yaml
      rackscale get racks -o wide
      rackscale get schedules
    """
    if kind.strip().lower() in SCHEDULE_WORDS:  # scheduled scaling (docs/scheduled-scaling.md)
        if queue or status or job_kind or all_pages:
            die("--queue, --status, --kind and --all apply to jobs only", EXIT_USAGE)
        with connect(server, token_file) as api:
            _schedules(api, name, output)
        return
    what = resource(kind, ("jobs", "nodes", "racks", "queues"))
    if what != "jobs" and (queue or status or job_kind or all_pages):
        die("--queue, --status, --kind and --all apply to jobs only", EXIT_USAGE)
    if status:
        wrong = [s for s in (x.strip() for x in status.split(",")) if s and s not in STATUSES]
        if wrong:
            die(f"unknown status {wrong[0]!r}; use any of {', '.join(STATUSES)} (comma-separated)", EXIT_USAGE)
    with connect(server, token_file) as api:
        if what == "jobs":
            _jobs(api, name, output, queue, status, job_kind, all_pages)
        elif what == "nodes":
            items = [api.get(f"/v1/nodes/{quote_path(name)}")] if name else api.get("/v1/nodes")["items"]
            _show(items, output, single=name is not None, cols=NODE_COLS, wide=NODE_WIDE, what="nodes")
        elif what == "racks":
            if name:
                rack = api.get(f"/v1/racks/{quote_path(name)}")
                _show([rack], output, single=True, cols=RACK_COLS, wide=RACK_WIDE, what="racks")
            else:
                _show(api.get("/v1/racks")["items"], output, single=False, cols=RACK_COLS, wide=RACK_WIDE, what="racks")
        else:
            items = api.get("/v1/queues")["items"]
            if name:
                items = [q for q in items if q.get("name") == name]
                if not items:
                    die(f"no queue named {name!r} (a queue shows up once it holds pending or running jobs)")
            _show(items, output, single=name is not None, cols=QUEUE_COLS, wide=QUEUE_COLS, what="queues")


# ----------------------------------------------------------------------------------------- columns
Col = tuple[str, Any]  # header, row -> cell


def _racks_of(j: dict[str, Any]) -> str:
    p = j.get("placement")
    return ",".join(p.get("racks", [])) if p else "-"


def _nodes_of(j: dict[str, Any]) -> str:
    p = j.get("placement")
    if not p:
        return "-"
    nodes = list(dict.fromkeys(n["node"] for n in p.get("nodes", [])))  # a node may hold several shares
    return ",".join(nodes) if len(nodes) <= 4 else ",".join(nodes[:3]) + f",+{len(nodes) - 3} more"


def _job_cols(now: float) -> tuple[list[Col], list[Col]]:
    base: list[Col] = [
        ("NAME", lambda j: j["name"]),
        ("QUEUE", lambda j: j["queue"]),
        ("KIND", lambda j: j["kind"]),
        ("GPUS", lambda j: num(j["gpus"])),
        ("STATUS", lambda j: j["status"]),
        ("AGE", lambda j: age(now - j["submitted"])),
        ("RACKS", _racks_of),
    ]
    wide: list[Col] = [
        *base,
        ("PRIORITY", lambda j: j["priority"]),
        ("RESTARTS", lambda j: j.get("restarts", 0)),
        ("NODES", _nodes_of),
        ("REASON", lambda j: j.get("reason") or "-"),
        ("RUN", lambda j: j.get("run") or "-"),  # a name submitted again once ended: one row per run
    ]
    return base, wide


NODE_COLS: list[Col] = [
    ("NAME", lambda n: n["name"]),
    ("RACK", lambda n: n["rack"]),
    ("GPUS", lambda n: n["gpus"]),
    ("ALLOCATED", lambda n: num(n["allocated"])),
    ("FAILED", lambda n: n["failed"]),
    ("STATUS", lambda n: n.get("mode") or "schedulable"),  # cordoned, draining, drained (rackscale cordon/drain)
    ("JOBS", lambda n: len(n["jobs"])),
]
NODE_WIDE: list[Col] = [
    *NODE_COLS[:2],
    ("REGION", lambda n: n["region"]),
    ("MODEL", lambda n: n["gpuModel"]),
    *NODE_COLS[2:-1],
    ("JOBS", lambda n: ",".join(n["jobs"]) or "-"),
]
RACK_COLS: list[Col] = [
    ("NAME", lambda r: r["name"]),
    ("REGION", lambda r: r["region"]),
    ("MODEL", lambda r: r["gpuModel"]),
    ("GPUS", lambda r: r["gpus"]),
    ("ALLOCATED", lambda r: num(r["allocated"])),
    ("FREE", lambda r: r["free"]),
    ("FAILED", lambda r: r["failed"]),
    ("JOBS", lambda r: len(r["jobs"])),
]
RACK_WIDE: list[Col] = [*RACK_COLS[:-1], ("JOBS", lambda r: ",".join(r["jobs"]) or "-")]
QUEUE_COLS: list[Col] = [
    ("NAME", lambda q: q["name"]),
    ("PENDING", lambda q: q["pending"]),
    ("RUNNING", lambda q: q["running"]),
    ("GPUS-ALLOCATED", lambda q: num(q["gpusAllocated"])),
    ("GPUS-WAITING", lambda q: num(q["gpusWaiting"])),
]


def _show(
    items: list[dict[str, Any]], output: GetFormat, *, single: bool, cols: list[Col], wide: list[Col], what: str
) -> None:
    if output in (GetFormat.json, GetFormat.yaml):
        emit(items[0] if single and items else {"items": items}, OutputFormat(output.value))
        return
    if not items:
        warn(f"No {what} found.")
        return
    chosen = wide if output is GetFormat.wide else cols
    table([h for h, _ in chosen], [[f(i) for _, f in chosen] for i in items])


def _jobs(
    api: Api,
    name: str | None,
    output: GetFormat,
    queue: str | None,
    status: str | None,
    kind: str | None,
    all_pages: bool,
) -> None:
    if name:
        items = [api.get(f"/v1/jobs/{quote_path(name)}")]
        more = None
    else:
        items, more = [], 0
        while more is not None:
            page = api.get("/v1/jobs", queue=queue, status=status, kind=kind, after=more or None, limit=PAGE)
            items += page["items"]
            more = page.get("nextAfter")
            if not all_pages:
                break
    if output in (GetFormat.json, GetFormat.yaml):
        doc: Any = items[0] if name else {"items": items, "nextAfter": more}
        emit(doc, OutputFormat(output.value))
        return
    if not items:
        warn("No jobs found." + (f" (queue {queue})" if queue else ""))
        return
    base, wide = _job_cols(api.now())
    chosen = wide if output is GetFormat.wide else base
    table([h for h, _ in chosen], [[f(j) for _, f in chosen] for j in items])
    if more is not None:
        warn(f"(showing the first {len(items)} jobs; --all lists every page)")


def _when(at: float, zone: str) -> str:
    """A fire time in the schedule's own zone (its cron is written in it): ``2026-01-05 02:00 CET``."""
    from datetime import datetime
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return datetime.fromtimestamp(at, ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %Z")
    except (ZoneInfoNotFoundError, ValueError, OverflowError, OSError):
        return f"{at:.0f}"


def _schedule_cols(now: float) -> list[Col]:
    def nxt(s: dict[str, Any]) -> str:
        n = s.get("next")
        return f"{_when(n['at'], s['timeZone'])} (in {age(n['at'] - now)})" if n else "never"

    def step(s: dict[str, Any]) -> str:
        n = s.get("next")
        return f"{n['step']}: {n['sets']}" if n else "-"

    def last(s: dict[str, Any]) -> str:
        f = s.get("lastFired")
        return f"{age(now - f['applied'])} ago (step {f['step']})" if f else "-"

    return [
        ("NAME", lambda s: s["name"]),
        ("TARGET", lambda s: f"{s['targetKind']} {s['target']}"),
        ("NEXT", nxt),
        ("STEP", step),
        ("LAST FIRED", last),
    ]


def _schedules(api: Api, name: str | None, output: GetFormat) -> None:
    items = [api.get(f"/v1/schedules/{quote_path(name)}")] if name else api.get("/v1/schedules")["items"]
    if output in (GetFormat.json, GetFormat.yaml):
        emit(items[0] if name else {"items": items}, OutputFormat(output.value))
        return
    if not items:
        warn("No schedules found.")
        return
    cols = _schedule_cols(api.now())
    table([h for h, _ in cols], [[f(s) for _, f in cols] for s in items])
