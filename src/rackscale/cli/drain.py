"""``rackscale drain node|rack NAME [--reason R] [--grace 10m]``: cordon, then stop what runs there after
the grace and requeue it (POST /v1/nodes/NAME/drain, /v1/racks/NAME/drain; admin only)."""

from __future__ import annotations

from typing import Annotated

import typer

from rackscale.cli.client import ServerOpt, TokenFileOpt
from rackscale.cli.cordon import NameArg, OutputOpt, ReasonOpt, TargetArg, hold, parse_grace
from rackscale.cli.output import OutputFormat


def drain(
    target: TargetArg,
    name: NameArg,
    reason: ReasonOpt = "",
    grace: Annotated[
        str, typer.Option("--grace", "-g", help="How long jobs run on after the stop signal: 90s, 10m, 1h30m.")
    ] = "0s",
    output: OutputOpt = OutputFormat.table,
    server: ServerOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Drain a node or a rack: cordon it, tell its jobs to stop (checkpoint), and once the grace has
    passed stop them and requeue them elsewhere; done when the nodes are empty (kubectl drain).

    Examples:

      rackscale drain rack r000 --reason "nvidia-smi -pm 1 (reboot)" --grace 10m
      rackscale drain node r001-n07 --grace 0      # stop now
      rackscale get nodes                           # STATUS: draining, then drained

    A stopped job loses the work since its last checkpoint (none with checkpointOnPreempt). The nodes
    stay cordoned once drained: `rackscale uncordon rack r000` when the work is done. Admin token only.
    Exit codes: 0 done; 1 the server said no (unknown name, not an admin); 2 bad usage (a bad --grace).
    """
    secs = parse_grace(grace)
    body = {"reason": reason, "grace": secs}
    hold("drain", target, name, body=body, output=output, server=server, token_file=token_file)
