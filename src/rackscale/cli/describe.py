"""``rackscale describe job NAME`` / ``describe rack NAME``: one object in readable sections, with events."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from rackscale.cli.client import ServerOpt, TokenFileOpt, age, connect, num, quote_path, resource, table
from rackscale.cli.output import OutputFormat, emit, printable

LABEL = 14  # width of the "Name:" column


def describe(
    kind: Annotated[str, typer.Argument(metavar="TYPE", help="job or rack.")],
    name: Annotated[str, typer.Argument(help="The job's (or rack's) name.")],
    output: Annotated[
        OutputFormat | None,
        typer.Option("--output", "-o", help="json or yaml: the raw objects (a job with its events)."),
    ] = None,
    server: ServerOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Show one job (status, queue, priority, placement, why it is pending, its events) or one rack
    (allocation, nodes, and which job holds each GPU). A job name submitted again once its job ended is a
    new run: describe shows the latest, and says how many ran before (get jobs lists every run).

    Examples:

      rackscale describe job train-1
      rackscale describe job train-1 -o yaml
      rackscale describe rack r000
    """
    what = resource(kind, ("jobs", "racks"))
    raw = output in (OutputFormat.json, OutputFormat.yaml)
    with connect(server, token_file) as api:
        if what == "jobs":
            job = api.get(f"/v1/jobs/{quote_path(name)}")
            events = api.get(f"/v1/jobs/{quote_path(name)}/events", limit=1000)["items"]
            if raw:
                assert output is not None
                emit({"job": job, "events": events}, output)
                return
            _job(job, events, api.now())
        else:
            rack = api.get(f"/v1/racks/{quote_path(name)}")
            if raw:
                assert output is not None
                emit(rack, output)
                return
            _rack(rack)


def _line(label: str, value: Any, indent: str = "") -> None:
    """``Label:   value`` on one line; the value's terminal controls and newlines shown as escapes."""
    text = "-" if value is None or value == "" else printable(str(value))
    sys.stdout.write(f"{indent}{(label + ':').ljust(LABEL - len(indent))}{text}\n")


def _when(t: float | None, now: float) -> str | None:
    if t is None:
        return None
    try:
        stamp = datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        stamp = f"{t:.0f}"
    return f"{stamp} ({age(now - t)} ago)" if now >= t else stamp


def _job(job: dict[str, Any], events: list[dict[str, Any]], now: float) -> None:
    out = sys.stdout.write
    status = job["status"]
    _line("Name", job["name"])
    _line("Queue", job["queue"])
    _line("Kind", job["kind"])
    _line("Priority", job["priority"])
    _line("GPUs", num(job["gpus"]))
    _line("Status", status + (f" ({job['reason']})" if job.get("reason") else ""))
    if status != "pending" and job.get("message"):
        _line("Message", job["message"])
    _line("Submitted", _when(job["submitted"], now))
    # A job preempted and waiting again keeps the start of its last run: not running, not for that long.
    _line(
        "Last started" if status == "pending" and job.get("started") is not None else "Started",
        _when(job.get("started"), now),
    )
    if job.get("ended") is not None:
        _line("Ended", _when(job["ended"], now))
    if job.get("started") is not None and job.get("ended") is not None:
        _line("Ran for", age(job["ended"] - job["started"]))
    elif job.get("started") is not None and status == "running":
        _line("Running for", age(now - job["started"]))
    if job.get("exitCode") is not None:
        _line("Exit code", job["exitCode"])
    _line("Restarts", job.get("restarts", 0))
    earlier = _earlier(job, now)
    if earlier:
        _line("Earlier runs", earlier)
    p = job.get("placement")
    if p:
        out("Placement:\n")
        _line("Racks", ", ".join(p.get("racks", [])), "  ")
        _line("GPUs", num(p.get("gpus")), "  ")
        per_node = _per_node(p.get("nodes", []))
        _line("Nodes", len(per_node), "  ")
        table(["NODE", "RACK", "GPU IDS", "GPUS"], per_node, indent="    ")
    else:
        _line("Placement", "<none>" if status != "running" else "-")
    if status == "pending":
        out("Why pending:\n")
        _line("Reason", job.get("reason") or "-", "  ")
        _line("Message", job.get("message") or "-", "  ")
    spec = job.get("spec")
    if spec:
        import yaml

        out("Spec:\n")
        # allow_unicode=False: the dump writes controls and non-ASCII as escapes ("\e", "\u202E")
        for line in yaml.safe_dump(spec, sort_keys=False, allow_unicode=False).rstrip("\n").split("\n"):
            out(f"  {printable(line)}\n")
    if not events:
        out("Events:       <none>\n")
        return
    out("Events:\n")
    rows = [[e["type"], e["reason"], age(now - e["time"]), e["message"]] for e in events]
    table(["TYPE", "REASON", "AGE", "MESSAGE"], rows, indent="  ")


def _earlier(job: dict[str, Any], now: float) -> str | None:
    """``2, the last cancelled 5m ago (get jobs lists every run)``: the runs of the name before this one."""
    n = job.get("earlierRunCount") or 0
    runs = job.get("earlierRuns") or []
    if not n:
        return None
    last = runs[0] if runs else None
    said = f"{n}"
    if last is not None:
        ended = last.get("ended")
        said += f", the last {last.get('status', '?')}" + (f" {age(now - ended)} ago" if ended is not None else "")
    return said + " (rackscale get jobs lists every run)"


def _per_node(slices: list[dict[str, Any]]) -> list[list[str]]:
    """One row per node (a node may hold several shares of the job): its GPU indexes and GPUs held."""
    rows: dict[str, tuple[str, set[int], float]] = {}
    for n in slices:
        rack, ids, held = rows.get(n["node"], (n["rack"], set(), 0.0))
        ids |= set(n["gpus"])
        rows[n["node"]] = (rack, ids, held + len(n["gpus"]) * n.get("milliPerGpu", 1000) / 1000)
    return [
        [node, rack, ",".join(str(g) for g in sorted(ids)), num(round(held, 3))]
        for node, (rack, ids, held) in sorted(rows.items())
    ]


def _rack(rack: dict[str, Any]) -> None:
    out = sys.stdout.write
    _line("Name", rack["name"])
    _line("Region", rack["region"])
    _line("GPU model", rack["gpuModel"])
    _line("GPUs", rack["gpus"])
    _line("Allocated", num(rack["allocated"]))
    _line("Free", f"{rack['free']} whole GPU(s)")
    _line("Failed", rack["failed"])
    _line("Jobs", ", ".join(rack["jobs"]) or "<none>")
    nodes = rack.get("nodes") or []
    if not nodes:
        return
    out("Nodes:  (GPU grid: . free, # whole GPU used, + shared, x failed)\n")
    rows = []
    for n in nodes:
        grid = "".join(_cell(g) for g in n.get("gpuGrid", []))
        rows.append([n["name"], n["gpus"], num(n["allocated"]), n["failed"], grid, ",".join(n["jobs"]) or "-"])
    table(["NODE", "GPUS", "ALLOCATED", "FAILED", "GRID", "JOBS"], rows, indent="  ")


def _cell(g: dict[str, Any]) -> str:
    if g.get("failed"):
        return "x"
    used = g.get("usedMilli", 0)
    if used <= 0:
        return "."
    return "#" if used >= 1000 else "+"
