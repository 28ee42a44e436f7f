"""``rackscale submit -f FILE``: validate job specs here, then send each to the server (POST /v1/jobs)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rackscale.cli.client import EXIT_SERVER, EXIT_USAGE, ApiFailure, ServerOpt, TokenFileOpt, connect, die, warn
from rackscale.cli.output import OutputFormat, emit, printable

if TYPE_CHECKING:
    from rackscale.cli.client import Api


def submit(
    files: Annotated[
        list[str],
        typer.Option(
            "--filename",
            "-f",
            metavar="FILE",
            help="Job spec file (YAML or JSON; several documents or a list are fine). Repeatable; '-' reads stdin.",
            show_default=False,
        ),
    ],
    output: Annotated[
        OutputFormat | None,
        typer.Option("--output", "-o", help="json or yaml: print the jobs as the server returned them."),
    ] = None,
    server: ServerOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Submit jobs to a rackscale server. Every file is checked here first (file:line: field: message), so
    nothing is sent unless all specs are valid; then each job is sent as written, in file order.

    Examples:

      rackscale submit -f examples/train-72.yaml
      rackscale submit -f a.yaml -f b.yaml -o json
      cat jobs.yaml | rackscale submit -f - --server http://scheduler:8080
    """
    from rackscale.loaders import MAX_TEXT_CHARS, parse_job_documents, read_text
    from rackscale.model.spec_errors import SpecError

    if not files:
        die("give at least one job file with -f FILE (or -f - for stdin)", EXIT_USAGE)
    docs: list[Any] = []
    bad = False
    for f in files:
        source = "<stdin>" if f == "-" else f
        try:
            text = sys.stdin.read(MAX_TEXT_CHARS + 1) if f == "-" else read_text(f)  # over the limit: refused
            parsed = parse_job_documents(text, source=source)
        except SpecError as err:
            bad = True
            warn(str(err))
            continue
        if not parsed:
            warn(f"{source}: no jobs in this file")
        docs += [doc for _job, doc in parsed]
    if bad:
        die("nothing was submitted: fix the spec files (see above)", EXIT_USAGE)
    if not docs:
        die("nothing to submit: the files hold no jobs", EXIT_USAGE)

    submitted: list[Any] = []
    with connect(server, token_file) as api:
        failed = send_jobs(api, docs, output=output, sent=submitted)
    if output in (OutputFormat.json, OutputFormat.yaml) and submitted:
        assert output is not None
        emit({"items": submitted} if len(docs) > 1 else submitted[0], output)
    if failed:
        die(f"{failed} of {len(docs)} job(s) were not submitted", EXIT_SERVER)


def send_jobs(api: Api, docs: Sequence[Any], *, output: OutputFormat | None, sent: list[Any]) -> int:
    """POST each job document in order, appending what the server returned to ``sent`` (which may already
    hold what this command sent before); the number rejected. A 401 or 503 is about every job, not this
    one: the command ends there, saying how much was sent before."""
    failed = 0
    for doc in docs:
        label = job_label(doc)
        try:
            job = api.post("/v1/jobs", dict(doc))
        except ApiFailure as e:
            if e.status in (401, 503):
                before = f" ({len(sent)} document(s) were sent before)" if sent else ""
                die(f"{e.message}{before}", EXIT_SERVER)
            failed += 1
            if e.status == 422 and "\n" in e.message:
                warn(f"error: job/{label} rejected ({e.status}):\n  " + e.message.replace("\n", "\n  "))
            else:
                warn(f"error: job/{label} rejected ({e.status}): {e.message}")
            continue
        sent.append(job)
        if output is None or output is OutputFormat.table:
            print(printable(f"job/{job.get('name', label)} submitted (queue {job.get('queue', '?')})"))
    return failed


def job_label(doc: Any) -> str:
    if isinstance(doc, dict):
        meta = doc.get("metadata")
        if isinstance(meta, dict) and meta.get("name"):
            return str(meta["name"])
        if doc.get("name"):
            return str(doc["name"])
    return "?"
