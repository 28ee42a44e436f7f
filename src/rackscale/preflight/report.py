"""The report: rows, the labels, a summary, and the exit code.

Exit codes: 0 every check passed or was skipped; 1 warnings but no failure; 2 a failure (the CLI also
uses 2 for bad usage, as every rackscale verb does, so a script treats both as "not ready").
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rackscale.preflight.checks import Check, Status

EXIT_OK, EXIT_WARN, EXIT_FAIL = 0, 1, 2


def exit_code(checks: list[Check]) -> int:
    statuses = {c.status for c in checks}
    if Status.FAIL in statuses:
        return EXIT_FAIL
    if Status.WARN in statuses:
        return EXIT_WARN
    return EXIT_OK


def summary(checks: list[Check]) -> dict[str, int]:
    counts = Counter(c.status for c in checks)
    return {s.value: counts.get(s, 0) for s in Status}


def document(checks: list[Check], *, labels: dict[str, str], host: str, wrote: str | None = None) -> dict[str, Any]:
    """What ``-o json|yaml`` prints."""
    doc: dict[str, Any] = {
        "host": host,
        "exitCode": exit_code(checks),
        "summary": summary(checks),
        "checks": [c.row() for c in checks],
        "labels": labels,
    }
    if wrote is not None:
        doc["fixWrote"] = wrote
    return doc
