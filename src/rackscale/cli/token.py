"""``rackscale token NAME``: make a bearer token and the token-file entry that holds only its digest."""

from __future__ import annotations

import hashlib
import re
import secrets
import sys
from typing import Annotated

import typer
import yaml

from rackscale.cli.output import fail, printable
from rackscale.model.text import NAME_FIX, NAME_RULE
from rackscale.service.auth import PRIORITY_MAX, PRIORITY_MIN

ROLES = ("admin", "tenant", "scrape")


def token(
    name: Annotated[str, typer.Argument(help="Who holds it (a person, a team, Prometheus).", show_default=False)],
    role: Annotated[str, typer.Option(help="admin, tenant or scrape (GET /metrics only).")] = "tenant",
    queue: Annotated[
        list[str] | None,
        typer.Option("--queue", "-q", help="A tenant's queue (repeatable; the first is its default)."),
    ] = None,
    max_priority: Annotated[
        int | None,
        typer.Option(
            "--max-priority", help="A tenant's priority ceiling (default 0).", min=PRIORITY_MIN, max=PRIORITY_MAX
        ),
    ] = None,
    priority_class: Annotated[
        list[str] | None,
        typer.Option(
            "--priority-class", help="A class the tenant may name (repeatable; default: default, low-priority)."
        ),
    ] = None,
) -> None:
    """Make a random token for NAME: the token goes to stderr (hand it over once), the entry for the
    service's --tokens file goes to stdout with only the token's SHA-256 (the file then holds no secret).

    Examples:

      rackscale token team-a --queue team-a --max-priority 100 >> tokens.yaml   # then give team-a the token
      rackscale token prometheus --role scrape >> tokens.yaml
      rackscale token ops --role admin
    """
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}", name) is None:
        fail(f"{printable(name)!r} is not a token name (use letters, digits, '.', '_' or '-'; a letter or digit first)")
    if role not in ROLES:
        fail(f"--role must be one of {', '.join(ROLES)} (got {role!r})")
    if role == "tenant" and not queue:
        fail("a tenant needs at least one --queue (e.g. --queue team-a)")
    if role != "tenant" and (queue or max_priority is not None or priority_class):
        fail("--queue, --max-priority and --priority-class are for --role tenant only")
    for q in queue or ():
        if NAME_RULE.fullmatch(q) is None:
            fail(f"--queue {q!r} is not a valid queue name ({NAME_FIX})")
    for c in priority_class or ():
        if NAME_RULE.fullmatch(c) is None:
            fail(f"--priority-class {c!r} is not a valid priority class name ({NAME_FIX})")
    secret = secrets.token_urlsafe(32)
    entry: dict[str, object] = {"name": name, "role": role}
    if role == "tenant":
        entry["queues"] = list(queue or ())
        if max_priority is not None:
            entry["maxPriority"] = max_priority
        if priority_class:
            entry["priorityClasses"] = list(priority_class)
    entry["tokenSha256"] = hashlib.sha256(secret.encode()).hexdigest()
    sys.stderr.write(f"token for {name} (shown once; the file below keeps only its digest):\n{secret}\n")
    # One item of the `tokens:` list, indented, so that `>> tokens.yaml` appends it to a token file.
    item = yaml.safe_dump([entry], sort_keys=False, default_flow_style=None)
    sys.stdout.write("".join(f"  {line}\n" for line in item.splitlines()))
