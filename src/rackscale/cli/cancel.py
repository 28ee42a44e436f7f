"""``rackscale cancel NAME...``: cancel jobs (DELETE /v1/jobs/NAME). A job that had already ended is left as it
is and said so: exit code 1, as scancel does for a finished job and kubectl for a delete of something gone,
unless ``--ignore-ended``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rackscale.cli.client import (
    EXIT_SERVER,
    EXIT_USAGE,
    Api,
    ApiFailure,
    ServerOpt,
    TokenFileOpt,
    age,
    connect,
    die,
    quote_path,
    warn,
)
from rackscale.cli.output import OutputFormat, emit, printable

ACTIVE = ("pending", "running")


def _service_now(api: Api) -> float | None:
    """The service clock before any DELETE (None when the server does not say): a cancelled job whose
    ``ended`` is earlier had been cancelled before this command, by someone or by an earlier one."""
    try:
        value = api.get("/v1/cluster").get("now")
    except ApiFailure:
        return None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _ended_line(name: str, job: dict[str, Any], now: float | None) -> str:
    status = str(job.get("status", "?"))
    ended = job.get("ended")
    when = f" {age(now - ended)} ago" if now is not None and isinstance(ended, int | float) else ""
    return f"job/{printable(name)} had already ended ({status}{when}): nothing to cancel"


def cancel(
    names: Annotated[list[str], typer.Argument(metavar="NAME...", help="Jobs to cancel.", show_default=False)],
    ignore_ended: Annotated[
        bool,
        typer.Option(
            "--ignore-ended",
            help="A job that had already ended is not an error (exit 0), e.g. in a script's cleanup.",
        ),
    ] = False,
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
      rackscale cancel --ignore-ended train-1          # in a cleanup: fine if it has finished already

    A job that had already ended (completed, failed, or cancelled before) is left as it is:
    "job/train-1 had already ended (cancelled 2m ago): nothing to cancel". Like scancel on a finished
    job and kubectl delete of something already gone, that is an error (exit 1) unless --ignore-ended.

    Exit codes: 0 every job cancelled; 1 a job had already ended (without --ignore-ended), does not
    exist, or the server said no; 2 bad usage.
    """
    if "" in names:
        die("NAME is empty: give the job's name (see `rackscale get jobs`)", EXIT_USAGE)
    done: list[Any] = []
    failed = ended = 0
    as_doc = output if output in (OutputFormat.json, OutputFormat.yaml) else None  # else: one line per job
    quiet = as_doc is not None
    with connect(server, token_file) as api:
        before = _service_now(api)
        for name in names:
            try:
                job = api.delete(f"/v1/jobs/{quote_path(name)}")
            except ApiFailure as e:
                failed += 1
                warn(f"error: job/{printable(name)}: {e.message}")  # a newline in NAME stays on the line
                continue
            done.append(job)
            status, at = job.get("status"), job.get("ended")
            fresh = status == "cancelled" and (before is None or not isinstance(at, int | float) or at >= before)
            if fresh:
                if not quiet:
                    print(printable(f"job/{name} cancelled"))
            elif status in ACTIVE:
                failed += 1
                warn(f"error: job/{printable(name)} is still {status}: the server did not cancel it (try again)")
            else:
                line = _ended_line(name, job, before)
                if ignore_ended:
                    if not quiet:
                        print(printable(line))
                else:
                    ended += 1
                    warn(f"error: {line}")
    if as_doc is not None and done:
        emit(done[0] if len(names) == 1 else {"items": done}, as_doc)
    if failed or ended:
        if len(names) == 1:  # its own line said it all
            raise typer.Exit(EXIT_SERVER)
        parts = [f"{ended} had already ended"] * bool(ended) + [f"{failed} failed"] * bool(failed)
        die(f"{failed + ended} of {len(names)} job(s) not cancelled ({', '.join(parts)})", EXIT_SERVER)
