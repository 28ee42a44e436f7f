"""``rackscale cordon node|rack NAME [--reason R]``: no new placements there; what runs there goes on
(POST /v1/nodes/NAME/cordon, /v1/racks/NAME/cordon; admin only). Also the code ``drain`` and ``uncordon``
share (:func:`hold`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from rackscale.cli.client import EXIT_USAGE, ApiFailure, ServerOpt, TokenFileOpt, connect, die, quote_path, table
from rackscale.cli.output import OutputFormat, emit, printable
from rackscale.host.drains import DrainError, grace_seconds


class Target(StrEnum):
    node = "node"
    rack = "rack"


TargetArg = Annotated[Target, typer.Argument(metavar="node|rack", help="A node, or every node of a rack.")]
NameArg = Annotated[str, typer.Argument(metavar="NAME", help="The node's or rack's name (see `rackscale get nodes`).")]
ReasonOpt = Annotated[
    str, typer.Option("--reason", "-r", help="Why (shown in `get nodes` and in drained jobs' events).")
]
OutputOpt = Annotated[
    OutputFormat, typer.Option("--output", "-o", help="table (default), json or yaml: the nodes as the server says.")
]


def hold(
    verb: str,
    target: Target,
    name: str,
    *,
    body: dict[str, Any],
    output: OutputFormat,
    server: str | None,
    token_file: Any,
) -> None:
    """POST the verb, then print each node's new state."""
    if not name:
        die(f"NAME is empty: give the {target.value}'s name (see `rackscale get nodes`)", EXIT_USAGE)
    with connect(server, token_file) as api:
        try:
            got = api.post(f"/v1/{target.value}s/{quote_path(name)}/{verb}", body)
        except ApiFailure as e:
            die(f"{target.value}/{printable(name)}: {e.message}")  # a newline in NAME stays on the one line
    if output is not OutputFormat.table:
        emit(got, output)
        return
    items = got.get("items", [])
    past = {"cordon": "cordoned", "drain": "draining", "uncordon": "uncordoned"}[verb]
    print(printable(f"{target.value}/{name} {past} ({len(items)} node(s))"))
    rows = [[i["node"], i["rack"], i.get("mode") or "schedulable", i.get("reason"), i.get("deadline")] for i in items]
    table(["NODE", "RACK", "STATUS", "REASON", "STOPS-AT"], rows)


def parse_grace(text: str) -> float:
    try:
        return grace_seconds(text)
    except DrainError as e:
        die(f"--grace: {e}", EXIT_USAGE)


def cordon(
    target: TargetArg,
    name: NameArg,
    reason: ReasonOpt = "",
    output: OutputOpt = OutputFormat.table,
    server: ServerOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Cordon a node or a rack: no new job is placed there; what runs there goes on (kubectl cordon).

    Examples:

      rackscale cordon node r000-n03 --reason "ECC errors, watching"
      rackscale cordon rack r000 --reason "firmware next week" -o json

    Undo with `rackscale uncordon`; stop what runs there with `rackscale drain`. Admin token only.
    Exit codes: 0 done; 1 the server said no (unknown name, not an admin); 2 bad usage.
    """
    hold("cordon", target, name, body={"reason": reason}, output=output, server=server, token_file=token_file)
