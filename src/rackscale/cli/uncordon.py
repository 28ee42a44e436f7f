"""``rackscale uncordon node|rack NAME``: schedulable again (POST /v1/nodes/NAME/uncordon,
/v1/racks/NAME/uncordon; admin only)."""

from __future__ import annotations

from rackscale.cli.client import ServerOpt, TokenFileOpt
from rackscale.cli.cordon import NameArg, OutputOpt, TargetArg, hold
from rackscale.cli.output import OutputFormat


def uncordon(
    target: TargetArg,
    name: NameArg,
    output: OutputOpt = OutputFormat.table,
    server: ServerOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Uncordon a node or a rack: new jobs may be placed there again; a drain still in its grace is called
    off (its jobs go on) (kubectl uncordon).

    Examples:

      rackscale uncordon rack r000
      rackscale uncordon node r000-n03 -o yaml

    Admin token only. Exit codes: 0 done; 1 the server said no (unknown name, not an admin); 2 bad usage.
    """
    hold("uncordon", target, name, body={}, output=output, server=server, token_file=token_file)
