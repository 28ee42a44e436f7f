"""The wrapper the ``local`` backend starts each job's command through (stdlib only, no shell).

    python -I .../rackscale/backends/local_run.py --exit-file F --pid-file P [--cwd D] [--env-file E]
        [--max-log-bytes N] [--user UID --group GID] -- argv...

(``python -m rackscale.backends.local_run`` works too, but imports the package; the backend runs the file.)
The backend starts it isolated from the job: ``-I`` (no ``PYTHON*`` variables, no user site, no script
directory on ``sys.path``) and an environment holding only ``PATH``, so nothing the tenant controls
(``PYTHONPATH``, ``PYTHONSTARTUP``, ``LD_PRELOAD``...) reaches this process.

It records its own pid in ``P``, runs ``argv`` and writes ``"<wrapper pid> <returncode> <bytes dropped>"`` to
``F`` atomically (a temporary file, then ``os.replace``) when it ends; a negative returncode is the signal
that killed the command. The service may be down when the command ends: the exit file is how a restarted
service learns the exit code. (Older wrappers wrote two fields; readers accept both.)

- ``--env-file E``: the command's whole environment, a JSON object of strings (each the UTF-8 /
  surrogateescape decoding of the bytes to pass); the file is deleted once read. Without it the command
  gets the wrapper's own environment.
- ``--user UID --group GID``: the command runs as that user and group, with no supplementary groups (the
  wrapper must be root for that). The wrapper itself stays as it is: it writes the exit file into a
  directory the job cannot touch, and the job cannot signal it.
- ``--cwd D``: the command's working directory (entered before the user switch).
- Output: the command's stdout and stderr (one pipe) are copied to the wrapper's stdout (the job's log,
  opened for append by the backend). With ``--max-log-bytes N`` the file is kept to ``N`` bytes: once it
  would pass ``N - TAIL``, output is no longer written but only the last ``TAIL`` bytes are kept
  (``TAIL = min(64 KiB, N // 4)``, and no more than what the file has left); when the command ends the
  wrapper appends one line ``[rackscale: log truncated: D bytes dropped (cap N bytes)]`` and that tail
  (from its first line break), so the file ends at most ``N`` bytes plus that line and its last line of
  output survives. The cap is for the file: a command run again appends and gets what is left.
- When the command has ended, the wrapper reads on until every writer has closed the pipe, or the pipe has
  been idle for ``IDLE_S`` (0.5 s), or for ``DRAIN_S`` (5 s) at most: a process the command left behind that
  holds the pipe open does not keep the wrapper (the backend then kills what is left of the group).

The wrapper leads the job's process group (the backend starts it in a new session; the command stays in
that group). It ignores SIGTERM, SIGINT and SIGHUP itself (a no-op handler, so the command still gets the
default dispositions): those are meant for the whole group, and the wrapper stays to record how the command
took them; an interrupted read or write is resumed. SIGKILL ends it with the command. If ``argv`` cannot be
executed, the reason goes to stderr (the job's log) and the exit code is 127 (not found) or 126 (anything
else), as in a shell.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

TAIL_BYTES = 64 * 1024  # the most a truncated log keeps of its end
IDLE_S = 0.5  # after the command ended: stop reading once the pipe has been idle this long...
DRAIN_S = 5.0  # ...or this long after it ended at most
WAKE_S = 30.0  # a safety net: look at the command this often even without a signal
CHUNK = 64 * 1024


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rackscale.backends.local_run", description=__doc__)
    p.add_argument("--exit-file", required=True, type=Path)
    p.add_argument("--pid-file", required=True, type=Path)
    p.add_argument("--cwd", type=Path, default=None)
    p.add_argument("--env-file", type=Path, default=None)
    p.add_argument("--max-log-bytes", type=int, default=None)
    p.add_argument("--user", type=int, default=None)
    p.add_argument("--group", type=int, default=None)
    p.add_argument("command", nargs=argparse.REMAINDER)
    ns = p.parse_args(argv)
    if ns.command and ns.command[0] == "--":
        ns.command = ns.command[1:]
    if not ns.command:
        p.error("no command given after --")
    if (ns.user is None) != (ns.group is None):
        p.error("--user and --group go together")
    if ns.max_log_bytes is not None and ns.max_log_bytes < 1:
        p.error("--max-log-bytes must be >= 1")
    return ns


def _ignore(signum: int, frame: FrameType | None) -> None:
    """A handler that does nothing: unlike SIG_IGN, it is not inherited by the command across exec."""


def read_env(path: Path) -> dict[bytes, bytes]:
    """The command's environment from ``path`` (then deleted), as the bytes to pass."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    finally:
        path.unlink(missing_ok=True)
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise ValueError(f"{path} does not hold a JSON object of strings")
    return {k.encode("utf-8", "surrogateescape"): v.encode("utf-8", "surrogateescape") for k, v in data.items()}


class LogSink:
    """Writes the command's output to ``fd`` (the job's log, opened for append), within ``cap`` bytes for the
    whole file when a cap is given (see the module's docstring)."""

    def __init__(self, fd: int, cap: int | None) -> None:
        self.fd = fd
        self.cap = cap
        try:
            st = os.fstat(fd)
            size = st.st_size if stat.S_ISREG(st.st_mode) else 0
        except OSError:
            size = 0
        self.head_room: int | None = None  # bytes still written straight through (None: no cap)
        self.tail_room = 0
        if cap is not None:
            left = max(0, cap - size)
            self.tail_room = min(TAIL_BYTES, cap // 4, left)
            self.head_room = left - self.tail_room
        self.tail = bytearray()  # past the head room: the last tail_room bytes
        self.dropped = 0
        self.last = b"\n"  # the last byte written (a marker starts on a line of its own)

    def _out(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.fd, view)
            except OSError:  # disk full, I/O error: the output is lost, the command goes on
                self.dropped += len(view)
                return
            view = view[n:]
        if data:
            self.last = data[-1:]

    def write(self, data: bytes) -> None:
        if self.head_room is None:
            self._out(data)
            return
        if self.head_room:
            n = min(self.head_room, len(data))
            self._out(data[:n])
            self.head_room -= n
            data = data[n:]
        if not data:
            return
        self.tail += data
        excess = len(self.tail) - self.tail_room
        if excess > 0:
            del self.tail[:excess]
            self.dropped += excess

    def close(self) -> int:
        """Write what was kept (after a marker if output was dropped); the bytes dropped."""
        tail = bytes(self.tail)
        self.tail.clear()
        if self.dropped == 0:
            self._out(tail)
            return 0
        cut = tail.find(b"\n")
        if 0 <= cut < len(tail) - 1:  # the kept tail starts at a line
            self.dropped += cut + 1
            tail = tail[cut + 1 :]
        marker = f"[rackscale: log truncated: {self.dropped} bytes dropped (cap {self.cap} bytes)]\n".encode()
        self._out((b"" if self.last == b"\n" else b"\n") + marker + tail)
        return self.dropped


def pump(child: subprocess.Popen[bytes], sink: LogSink, wake: int) -> None:
    """Copy the command's output to ``sink`` until the pipe closes, or the command has ended and the pipe
    went idle (``IDLE_S``) or ``DRAIN_S`` passed. ``wake`` is readable when a signal came (SIGCHLD)."""
    assert child.stdout is not None
    fd = child.stdout.fileno()
    ended_at: float | None = None
    while True:
        if ended_at is None and child.poll() is not None:
            ended_at = time.monotonic()
        if ended_at is None:
            timeout = WAKE_S
        else:
            left = ended_at + DRAIN_S - time.monotonic()
            if left <= 0:
                return
            timeout = min(IDLE_S, left)
        ready, _, _ = select.select([fd, wake], [], [], timeout)  # retried on EINTR (PEP 475)
        if wake in ready:
            try:
                while os.read(wake, 512):
                    pass
            except BlockingIOError:
                pass
        if fd in ready:
            try:
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                continue
            except OSError:
                return
            if not chunk:  # every writer closed it
                return
            sink.write(chunk)
        elif not ready and ended_at is not None:
            return  # ended, and the pipe is idle: something the command left behind holds it open


def run(
    command: Sequence[str],
    cwd: Path | None,
    *,
    env: dict[bytes, bytes] | None = None,
    max_log_bytes: int | None = None,
    user: int | None = None,
    group: int | None = None,
) -> tuple[int, int]:
    """Run ``command``; its returncode and the bytes of its output dropped by the cap."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, _ignore)  # a handler, so that the command's end wakes the pump
    kwargs: dict[str, Any] = {}
    if user is not None:
        kwargs.update(user=user, group=group, extra_groups=[])
    try:
        child = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            **kwargs,
        )
    except Exception as e:
        as_user = f" (the job runs as uid {user})" if user is not None and isinstance(e, PermissionError) else ""
        print(f"rackscale: cannot run {command[0]!r}: {e}{as_user}", file=sys.stderr, flush=True)
        return (127 if isinstance(e, FileNotFoundError) else 126), 0
    sink = LogSink(sys.stdout.fileno(), max_log_bytes)
    try:
        pump(child, sink, wake_r)
    finally:
        assert child.stdout is not None
        child.stdout.close()  # what the command left behind now gets EPIPE
        code = child.wait()
        dropped = sink.close()
    return code, dropped


def main(argv: Sequence[str] | None = None) -> int:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _ignore)
    ns = parse(sys.argv[1:] if argv is None else argv)
    write_atomic(ns.pid_file, f"{os.getpid()}\n")
    env: dict[bytes, bytes] | None = None
    if ns.env_file is not None:
        try:
            env = read_env(ns.env_file)
        except (OSError, ValueError) as e:
            print(f"rackscale: cannot read the job's environment: {e}", file=sys.stderr, flush=True)
            env = None
    if ns.env_file is not None and env is None:
        code, dropped = 126, 0
    else:
        code, dropped = run(ns.command, ns.cwd, env=env, max_log_bytes=ns.max_log_bytes, user=ns.user, group=ns.group)
    write_atomic(ns.exit_file, f"{os.getpid()} {code} {dropped}\n")
    # Mirror the command's status (a signal death becomes 128+N, as in a shell).
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
