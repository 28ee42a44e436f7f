"""``rackscale delete schedule NAME``: remove a ScalingSchedule from the server (admin). Jobs are cancelled
with ``rackscale cancel``; this verb deletes schedules only."""

from __future__ import annotations

from typing import Annotated

import typer

from rackscale.cli.client import EXIT_USAGE, ServerOpt, TokenFileOpt, connect, die, quote_path
from rackscale.cli.output import printable

WORDS = ("schedules", "schedule", "sched")


def delete(
    kind: Annotated[str, typer.Argument(metavar="TYPE", help="schedule (schedules).")],
    names: Annotated[list[str], typer.Argument(metavar="NAME...", help="The schedules to delete.")],
    server: ServerOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Delete schedules (admin). What a schedule has set stays as it is: a queue keeps its quota, a service
    its bounds, until someone changes them. See docs/scheduled-scaling.md.

    Examples:

      rackscale delete schedule training-nights
      rackscale delete schedules a b
    """
    if kind.strip().lower() not in WORDS:
        die(f"unknown resource type {kind!r}; use: schedule (jobs are cancelled with `rackscale cancel`)", EXIT_USAGE)
    with connect(server, token_file) as api:
        for name in names:
            api.delete(f"/v1/schedules/{quote_path(name)}")
            print(printable(f"schedule/{name} deleted"))
