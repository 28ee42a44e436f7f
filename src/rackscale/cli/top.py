"""``rackscale top racks|nodes``: GPU allocation per rack (or node), with a utilisation bar."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from rackscale.cli.client import EXIT_USAGE, ServerOpt, TokenFileOpt, connect, die, num, resource, table, util_bar
from rackscale.cli.output import OutputFormat, emit


class SortKey(StrEnum):
    name = "name"
    util = "util"


def top(
    kind: Annotated[str, typer.Argument(metavar="TYPE", help="racks (default) or nodes.")] = "racks",
    sort: Annotated[SortKey, typer.Option("--sort", help="name, or util (busiest first).")] = SortKey.name,
    rack: Annotated[
        str | None, typer.Option("--rack", help="nodes: only the nodes of this rack.", show_default=False)
    ] = None,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help="table, json or yaml.")] = OutputFormat.table,
    server: ServerOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Show how much of each rack (NVLink domain) is allocated: GPUs, allocated, free, and UTIL%.

    Examples:

      rackscale top racks
      rackscale top racks --sort util
      rackscale top nodes --rack r000 -o json
    """
    what = resource(kind, ("racks", "nodes"))
    if rack is not None and what != "nodes":
        die("--rack applies to `top nodes` only", EXIT_USAGE)
    with connect(server, token_file) as api:
        items = (api.get("/v1/racks") if what == "racks" else api.get("/v1/nodes", rack=rack))["items"]
    rows: list[dict[str, Any]] = []
    for it in items:
        usable = it["gpus"] - it.get("failed", 0)
        row: dict[str, Any] = {"name": it["name"]}
        row["rack" if what == "nodes" else "region"] = it["rack" if what == "nodes" else "region"]
        row |= {
            "gpus": it["gpus"],
            "allocated": it["allocated"],
            "free": it["free"] if what == "racks" else max(usable - it["allocated"], 0.0),
            "failed": it.get("failed", 0),
            "util": round(it["allocated"] / it["gpus"], 4) if it["gpus"] else 0.0,
            "jobs": it.get("jobs", []),
        }
        rows.append(row)
    rows.sort(key=lambda r: r["name"])
    if sort is SortKey.util:
        rows.sort(key=lambda r: -r["util"])
    if output is not OutputFormat.table:
        emit({"items": rows}, output)
        return
    second = "RACK" if what == "nodes" else "REGION"
    body = [
        [
            r["name"],
            r[second.lower()],
            r["gpus"],
            num(r["allocated"]),
            num(r["free"]),
            r["failed"],
            util_bar(r["allocated"], r["gpus"]),
        ]
        for r in rows
    ]
    total = sum(r["gpus"] for r in rows)
    used = sum(r["allocated"] for r in rows)
    if len(rows) > 1:
        free = sum(r["free"] for r in rows)
        body.append(["TOTAL", "", total, num(used), num(free), sum(r["failed"] for r in rows), util_bar(used, total)])
    table(["NAME", second, "GPUS", "ALLOCATED", "FREE", "FAILED", "UTIL%"], body)
