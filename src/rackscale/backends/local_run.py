"""The wrapper the ``local`` backend starts each job's command through (stdlib only, no shell).

    python -P .../rackscale/backends/local_run.py --exit-file F --pid-file P [--cwd D] -- argv...

(``python -m rackscale.backends.local_run`` works too, but imports the package; the backend runs the file.)

It records its own pid in ``P``, runs ``argv`` (its stdout/stderr and environment are the wrapper's own),
waits, and writes ``"<wrapper pid> <returncode>"`` to ``F`` atomically (a temporary file, then
``os.replace``); a negative returncode is the signal that killed the command. The service may be down when
the command ends: the exit file is how a restarted service learns the exit code.

The wrapper leads the job's process group (the backend starts it in a new session). It ignores SIGTERM,
SIGINT and SIGHUP itself (a no-op handler, so the command still gets the default dispositions): those are
meant for the whole group, and the wrapper stays to record how the command took them. SIGKILL ends it with
the command. If ``argv`` cannot be executed, the reason goes to stderr (the job's log) and the exit code is
127 (not found) or 126 (not executable), as in a shell.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rackscale.backends.local_run", description=__doc__)
    p.add_argument("--exit-file", required=True, type=Path)
    p.add_argument("--pid-file", required=True, type=Path)
    p.add_argument("--cwd", type=Path, default=None)
    p.add_argument("command", nargs=argparse.REMAINDER)
    ns = p.parse_args(argv)
    if ns.command and ns.command[0] == "--":
        ns.command = ns.command[1:]
    if not ns.command:
        p.error("no command given after --")
    return ns


def _ignore(signum: int, frame: FrameType | None) -> None:
    """A handler that does nothing: unlike SIG_IGN, it is not inherited by the command across exec."""


def run(command: Sequence[str], cwd: Path | None) -> int:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _ignore)
    try:
        child = subprocess.Popen(list(command), cwd=cwd, stdin=subprocess.DEVNULL)
    except FileNotFoundError as e:
        print(f"rackscale: cannot run {command[0]!r}: {e}", file=sys.stderr, flush=True)
        return 127
    except OSError as e:
        print(f"rackscale: cannot run {command[0]!r}: {e}", file=sys.stderr, flush=True)
        return 126
    return child.wait()


def main(argv: Sequence[str] | None = None) -> int:
    ns = parse(sys.argv[1:] if argv is None else argv)
    write_atomic(ns.pid_file, f"{os.getpid()}\n")
    code = run(ns.command, ns.cwd)
    write_atomic(ns.exit_file, f"{os.getpid()} {code}\n")
    # Mirror the command's status (a signal death becomes 128+N, as in a shell).
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
