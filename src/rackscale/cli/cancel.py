"""``rackscale cancel NAME...``: cancel jobs (DELETE /v1/jobs/NAME); a job that already ended is left as it is."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rackscale.cli.client import EXIT_SERVER, ApiFailure, ServerOpt, TokenFileOpt, connect, die, quote_path, warn
from rackscale.cli.output import OutputFormat, emit, printable


def cancel(
    names: Annotated[list[str], typer.Argument(metavar="NAME...", help="Jobs to cancel.", show_default=False)],
    output: Annotated[
        OutputFormat | None,
        typer.Option("--output", "-o", help="json or yaml: print the jobs as the server returned them."),
    ] = None,
    server: ServerOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Cancel jobs: a pending job leaves the queue, a running one is stopped and its GPUs freed.

    Examples:

      rackscale cancel train-1
      rackscale cancel train-1 train-2 --server http://scheduler:8080
    """
    done: list[Any] = []
    failed = 0
    with connect(server, token_file) as api:
        for name in names:
            try:
                job = api.delete(f"/v1/jobs/{quote_path(name)}")
            except ApiFailure as e:
                failed += 1
                warn(f"error: job/{name}: {e.message}")
                continue
            done.append(job)
            if output in (OutputFormat.json, OutputFormat.yaml):
                continue
            status = job.get("status", "?")
            if status == "cancelled":
                print(printable(f"job/{name} cancelled"))
            else:
                print(printable(f"job/{name} already {status} (nothing to cancel)"))
    if output in (OutputFormat.json, OutputFormat.yaml) and done:
        emit(done[0] if len(names) == 1 else {"items": done}, output)
    if failed:
        die(f"{failed} of {len(names)} job(s) could not be cancelled", EXIT_SERVER)
