"""``rackscale apply -f FILE``: put ScalingSchedule documents to the server (POST /v1/schedules), and submit
the jobs of the same files as ``submit`` does; every document is validated here first."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rackscale.cli.client import EXIT_SERVER, EXIT_USAGE, Api, ApiFailure, ServerOpt, TokenFileOpt, connect, die, warn
from rackscale.cli.output import OutputFormat, emit, printable
from rackscale.cli.submit import send_jobs

if TYPE_CHECKING:
    from rackscale.host.scaling import ScalingSchedule

SCHEDULE_KIND = "ScalingSchedule"


def read_documents(text: str, *, source: str) -> tuple[list[ScalingSchedule], list[dict[str, Any]]]:
    """The schedules and the job documents of one file (YAML stream, list or ``kind: List``), each checked:
    raises one SpecError listing every problem as ``file:line: field: message (fix: ...)``."""
    # The loader's own reading (bounds, line numbers); its document helpers are not public API yet.
    from rackscale.host.scaling_docs import parse_schedule
    from rackscale.loaders import document_entries, documents, locate_problem
    from rackscale.model.spec_errors import SpecError, SpecProblem
    from rackscale.model.specs import job_from_dict

    problems: list[SpecProblem] = []
    schedules: list[ScalingSchedule] = []
    jobs: list[dict[str, Any]] = []
    seen: set[str] = set()
    for prefix, data, node in document_entries(documents(text, source), problems):
        try:
            if isinstance(data, dict) and data.get("kind") == SCHEDULE_KIND:
                s = parse_schedule(data, source=source)
                if s.name in seen:
                    fix = "give every schedule its own name (a later one would replace it)"
                    problems.append(
                        locate_problem(SpecProblem(("metadata", "name"), f"{s.name!r} twice", fix), prefix, node)
                    )
                seen.add(s.name)
                schedules.append(s)
            else:
                job_from_dict(data)
                jobs.append(dict(data))
        except SpecError as err:
            problems += [locate_problem(p, prefix, node) for p in err.problems]
    if problems:
        raise SpecError(problems, source)
    return schedules, jobs


def read_files(files: list[str]) -> tuple[list[ScalingSchedule], list[dict[str, Any]]]:
    """Every file's documents; one line per problem on stderr, then exit 2 (nothing is sent)."""
    from rackscale.loaders import MAX_TEXT_CHARS, read_text
    from rackscale.model.spec_errors import SpecError

    schedules: list[ScalingSchedule] = []
    jobs: list[dict[str, Any]] = []
    bad = False
    for f in files:
        source = "<stdin>" if f == "-" else f
        try:
            text = sys.stdin.read(MAX_TEXT_CHARS + 1) if f == "-" else read_text(f)
            got, more = read_documents(text, source=source)
        except SpecError as err:
            bad = True
            warn(str(err))
            continue
        if not got and not more:
            warn(f"{source}: no documents in this file")
        schedules += got
        jobs += more
    if bad:
        die("nothing was applied: fix the files (see above)", EXIT_USAGE)
    return schedules, jobs


def apply(
    files: Annotated[
        list[str],
        typer.Option(
            "--filename",
            "-f",
            metavar="FILE",
            help="YAML or JSON file of ScalingSchedule (and job) documents. Repeatable; '-' reads stdin.",
            show_default=False,
        ),
    ],
    output: Annotated[
        OutputFormat | None,
        typer.Option("--output", "-o", help="json or yaml: print what the server returned."),
    ] = None,
    server: ServerOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Apply ScalingSchedule documents (admin): each is created, or replaces the schedule of its name. Jobs
    in the same files are submitted, as `rackscale submit` sends them. Every file is checked here first
    (file:line: field: message); nothing is sent unless all of it is valid. See docs/scheduled-scaling.md.

    Examples:

      rackscale apply -f examples/schedule-training-quota.yaml
      rackscale apply -f schedules.yaml -o json
      rackscale get schedules
    """
    from rackscale.host.scaling import schedule_to_doc

    if not files:
        die("give at least one file with -f FILE (or -f - for stdin)", EXIT_USAGE)
    schedules, jobs = read_files(files)
    if not schedules and not jobs:
        die("nothing to apply: the files hold no schedules or jobs", EXIT_USAGE)
    done: list[Any] = []
    failed = 0
    with connect(server, token_file) as api:
        for s in schedules:
            existed = _exists(api, s.name)
            try:
                got = api.post("/v1/schedules", schedule_to_doc(s))
            except ApiFailure as e:
                if e.status in (401, 403, 503):  # about every document, not this one: stop here
                    die(e.message + (f" ({len(done)} applied before)" if done else ""), EXIT_SERVER)
                failed += 1
                warn(f"error: schedule/{s.name} rejected ({e.status}):\n  " + e.message.replace("\n", "\n  "))
                continue
            done.append(got)
            if output in (None, OutputFormat.table):
                print(printable(f"schedule/{s.name} {'configured' if existed else 'created'}"))
        failed += send_jobs(api, jobs, output=output, sent=done)
    if output in (OutputFormat.json, OutputFormat.yaml) and done:
        assert output is not None
        emit({"items": done}, output)
    if failed:
        die(f"{failed} of {len(schedules) + len(jobs)} document(s) were not applied", EXIT_SERVER)


def _exists(api: Api, name: str) -> bool:
    from rackscale.cli.client import quote_path

    try:
        api.get(f"/v1/schedules/{quote_path(name)}")
    except ApiFailure as e:
        if e.status == 404:
            return False
        raise
    return True
