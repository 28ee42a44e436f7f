"""``rackscale drain node|rack NAME [--reason R] [--grace 10m]``: cordon, then stop what runs there after
the grace and requeue it (POST /v1/nodes/NAME/drain, /v1/racks/NAME/drain; admin only)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from rackscale.cli.client import ApiFailure, ServerOpt, TokenFileOpt, connect, die, quote_path
from rackscale.cli.cordon import NameArg, OutputOpt, ReasonOpt, Target, TargetArg, hold, parse_grace
from rackscale.cli.output import OutputFormat, printable

POLL_S = 0.5  # how often --wait asks (one GET of the nodes)


def drain(
    target: TargetArg,
    name: NameArg,
    reason: ReasonOpt = "",
    grace: Annotated[
        str, typer.Option("--grace", "-g", help="How long jobs run on after the stop signal: 90s, 10m, 1h30m.")
    ] = "0s",
    output: OutputOpt = OutputFormat.table,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Wait until the nodes are empty (drained), as kubectl drain does.")
    ] = True,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout", help="With --wait: give up after this many seconds (default: the grace + 600).", min=0
        ),
    ] = None,
    server: ServerOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Drain a node or a rack: cordon it, tell its jobs to stop (checkpoint), and once the grace has
    passed stop them and requeue them elsewhere; done when the nodes are empty (kubectl drain).

    Examples:

      rackscale drain rack r000 --reason "nvidia-smi -pm 1 (reboot)" --grace 10m
      rackscale drain node r001-n07 --grace 0      # stop now
      rackscale drain rack r002 --grace 5m --no-wait   # return at once; watch `get nodes`
      rackscale get nodes                           # STATUS: draining, then drained

    A stopped job loses the work since its last checkpoint (none with checkpointOnPreempt). The nodes
    stay cordoned once drained: `rackscale uncordon rack r000` when the work is done. Admin token only.
    Exit codes: 0 done (drained, or asked with --no-wait); 1 the server said no (unknown name, not an
    admin) or the nodes were not empty by the timeout; 2 bad usage (a bad --grace).
    """
    secs = parse_grace(grace)
    body = {"reason": reason, "grace": secs}
    hold("drain", target, name, body=body, output=output, server=server, token_file=token_file)
    if wait:
        deadline = timeout if timeout is not None else secs + 600.0
        wait_drained(target, name, deadline_s=deadline, quiet=output is not OutputFormat.table,
                     server=server, token_file=token_file)  # fmt: skip


def wait_drained(
    target: Target, name: str, *, deadline_s: float, quiet: bool, server: str | None, token_file: Any
) -> None:
    """Poll the nodes until every one is ``drained`` (kubectl drain's wait), or give up after ``deadline_s``
    of wall-clock time (exit 1, saying which nodes still run jobs)."""
    path = f"/v1/nodes/{quote_path(name)}" if target is Target.node else "/v1/nodes"
    params = {} if target is Target.node else {"rack": name}
    end = time.monotonic() + deadline_s
    left: list[str] = []
    with connect(server, token_file) as api:
        while True:
            try:
                got = api.get(path, **params)
            except ApiFailure as e:
                die(f"{target.value}/{printable(name)}: {e.message}")
            nodes = [got] if target is Target.node else got.get("items", [])
            left = [str(n.get("name")) for n in nodes if n.get("mode") != "drained"]
            if not left:
                if not quiet:
                    print(printable(f"{target.value}/{name} drained"))
                return
            if time.monotonic() >= end:
                shown = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
                die(
                    f"{target.value}/{printable(name)}: not drained after {deadline_s:g} s: {shown} still run jobs "
                    "(or were uncordoned)"
                )
            time.sleep(POLL_S)
