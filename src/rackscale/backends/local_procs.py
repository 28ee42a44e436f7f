"""The ``local`` backend's processes: starting a job's wrapper in a session of its own, telling whether it
ended (and reaping it), signalling its process group, recognising it through ``/proc`` after a restart
(so a recycled pid is never taken for it), and the strings and environment handed to exec."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rackscale.backends import local_run

# The wrapper runs as a script (``python -I .../local_run.py``), not ``-m rackscale.backends.local_run``: that
# would import the package (pydantic and all) into a process that lives as long as the job: 33 MB and
# ~0.12 s per job against 13 MB. ``-I`` (isolated: no PYTHON* variables, no user site, the script's
# directory off sys.path) and an environment of its own keep the job's env out of it.
WRAPPER_SCRIPT = str(Path(local_run.__file__).resolve())
WRAPPER_MODULE = "rackscale.backends.local_run"
WRAPPER_ENV = {"PATH": os.defpath}


@dataclass(slots=True)
class Run:
    """A job's wrapper; its pid is also the job's process group. Our child, or (after a restart) adopted:
    then its end is seen through the exit file and /proc."""

    job: str
    pid: int


@dataclass(slots=True)
class Stopping:
    job: str
    pid: int
    deadline: float  # monotonic: SIGKILL after this
    killed_at: float | None = None


def exec_string(value: str, what: str) -> str:
    """``value`` as it will reach exec: its bytes (the filesystem encoding) decoded as UTF-8 with
    surrogateescape, which the wrapper turns back into the same bytes. Raises ValueError for a NUL byte,
    UnicodeEncodeError for what cannot be encoded (a lone surrogate)."""
    raw = os.fsencode(value)
    if b"\0" in raw:
        raise ValueError(f"{what} contains a NUL byte")
    return raw.decode("utf-8", "surrogateescape")


def exec_env(env: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in env.items():
        if not key or "=" in key:
            raise ValueError(f"the environment variable name {key!r} is not valid (empty, or holds '=')")
        name = exec_string(key, f"the environment variable name {key!r}")
        out[name] = exec_string(value, f"the value of the environment variable {key}")
    return out


def child_ended(pid: int) -> bool | None:
    """For our own child: has it ended? It is left unreaped (a zombie keeps its pid, so the process group id
    cannot be recycled while we signal what is left of the group). None: ``pid`` is not our child."""
    try:
        if hasattr(os, "waitid"):
            return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        got, _ = os.waitpid(pid, os.WNOHANG)  # no waitid (macOS): this reaps it at once
        return got != 0
    except ChildProcessError:
        return None


def reap(pid: int) -> int | None:
    """Reap ``pid`` if it is our child and has ended: its status in ``Popen.returncode`` terms, else None."""
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child (adopted after a restart), or reaped already
        return None
    return os.waitstatus_to_exitcode(status) if got else None


def spawn(argv: list[str], env: Mapping[str, str], log_fd: int) -> int:
    """Start ``argv`` in a new session (its own process group) with stdin from /dev/null and stdout and
    stderr on ``log_fd``; the pid. Not ``subprocess.Popen``: the backend reaps its children itself, and a
    restart leaves them running, which a Popen object would warn about."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, log_fd, 1),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    # Signals the service ignores (Python ignores SIGPIPE) would stay ignored across exec: reset them.
    reset = {signal.SIGPIPE, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXFSZ}
    return os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True, setsigdef=reset, setsigmask=())


def proc_state(pid: int) -> str | None:
    """The /proc state letter (R, S, Z, ...), None if there is no such process, "?" without /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        if not Path("/proc/self").exists():
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return None
            except PermissionError:
                return "?"
            return "?"
        return None
    except OSError:
        return None
    rest = stat.rpartition(")")[2].split()
    return rest[0] if rest else "?"


def is_our_wrapper(pid: int, exit_file: Path) -> bool:
    """``pid`` is alive and is the wrapper of this job (so a recycled pid is never taken for it)."""
    state = proc_state(pid)
    if state is None or state in ("Z", "X", "x"):
        return False
    if state == "?":  # no /proc: trust the pid
        return True
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    wrapper = any(a.endswith(b"local_run.py") or a == WRAPPER_MODULE.encode() for a in args)
    return wrapper and os.fsencode(str(exit_file)) in args


def live_groups(pgids: set[int]) -> set[int]:
    """Those of ``pgids`` that still have a live (not zombie) member. A zombie answers ``killpg(g, 0)``, and
    the orphans of a stopped job are reaped by init whenever it gets to it; /proc tells them apart."""
    probed: set[int] = set()
    for g in pgids:
        try:
            os.killpg(g, 0)
        except (ProcessLookupError, PermissionError):  # gone, or the id now belongs to someone else
            continue
        probed.add(g)
    if not probed or not Path("/proc/self/stat").exists():
        return probed
    live: set[int] = set()
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rpartition(b")")[2].split()
            except OSError:
                continue
            if len(fields) > 2 and fields[0] not in (b"Z", b"X") and int(fields[2]) in probed:
                live.add(int(fields[2]))
                if live == probed:
                    break
    return live


def signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
