"""The ``local`` backend's data directory: its layout and modes (:class:`LocalFiles`), a job's files in it,
and reading and writing them safely (atomic writes, no links followed, the last line of a log).

Under the data directory (mode 0711: jobs may pass through, not list it):

- ``logs/<job>.log`` (0600; ``logs/`` 0700): the command's stdout and stderr, written by the wrapper
  (appended to when a preempted job runs again), within the cap;
- ``work/<job>/`` (0700, owned by the run-as user; ``work/`` 0711): the command's working directory;
- ``run/`` (0700): ``<job>.pid``, the wrapper's pid, which is also the job's process group;
  ``<job>.env``, the job's environment for the wrapper (deleted once read); ``<job>.exit``,
  ``"<wrapper pid> <returncode> <log bytes dropped>"``, written by the wrapper when the command ends
  (older wrappers wrote the first two fields only).
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from rackscale.backends.base import Exit
from rackscale.backends.local_procs import signal_name
from rackscale.backends.local_setup import JobUser, LocalBackendError

log = logging.getLogger("rackscale.backends.local")

TRUNCATED_MARKER = "[rackscale: log truncated:"


class LocalFiles:
    """The directories under ``data_dir`` (created with their modes; :class:`LocalBackendError` if that
    fails) and the paths of a job's files."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.run_dir = self.data_dir / "run"
        self.logs_dir = self.data_dir / "logs"
        self.work_dir = self.data_dir / "work"
        # Jobs may pass through the data dir and work/ (to their own work dir), and nothing more.
        for d, mode in ((self.data_dir, 0o711), (self.run_dir, 0o700), (self.logs_dir, 0o700), (self.work_dir, 0o711)):
            try:
                d.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.chmod(d, mode)
            except OSError as e:
                raise LocalBackendError(
                    f"cannot set up {d} (mode {mode:o}): {e}; --data-dir must be a directory the service owns"
                ) from e

    def log_path(self, job: str) -> Path:
        return self.logs_dir / f"{job}.log"

    def pid_path(self, job: str) -> Path:
        return self.run_dir / f"{job}.pid"

    def exit_path(self, job: str) -> Path:
        return self.run_dir / f"{job}.exit"

    def env_path(self, job: str) -> Path:
        return self.run_dir / f"{job}.env"

    @staticmethod
    def prepare_work_dir(work: Path, user: JobUser) -> None:
        """``work/<job>/``: a directory (never a link), mode 0700, owned by the run-as user."""
        work.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(work)
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(f"{work} is not a directory")
        if user.switch and (st.st_uid, st.st_gid) != (user.uid, user.gid):
            os.chown(work, user.uid, user.gid, follow_symlinks=False)
        os.chmod(work, 0o700)

    def remove_run_files(self, job: str, pid: int | None) -> None:
        """Drop a job's run/ files, unless a newer run of the job wrote them (``pid``: the run they are for)."""
        for path in (self.pid_path(job), self.exit_path(job)):
            got = read_int_file(path)
            if pid is None or not got or got[0] == pid:
                path.unlink(missing_ok=True)
        self.env_path(job).unlink(missing_ok=True)  # normally deleted by the wrapper once read


def read_int_file(path: Path) -> list[int] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        log.warning("cannot read %s: %s", path, e)
        return None
    try:
        return [int(x) for x in text.split()]
    except ValueError:
        return []


def write_atomic(path: Path, text: str) -> None:
    """Write ``path`` (mode 0600) through a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("utf-8"))
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)


def human_size(n: int) -> str:
    """12.3 MiB, 64 MiB, 512 bytes."""
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} byte" + ("" if n == 1 else "s")


def last_log_line(path: Path, *, limit: int = 200) -> str:
    """The last non-blank line of a log (read from its last 8 KiB), cut to ``limit`` characters."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 8192))
            tail = f.read()
    except OSError:
        return ""
    for line in reversed(tail.decode("utf-8", errors="replace").splitlines()):
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def exit_of(job: str, code: int, dropped: int, *, log: Path, cap: int) -> Exit:
    """The exit for a wrapper's returncode (negative: the signal), with the last line of the job's ``log``
    and the bytes the wrapper dropped at the ``cap``."""
    note = f" (log truncated: {human_size(dropped)} dropped at the {human_size(cap)} cap)" if dropped else ""
    if code == 0:
        return Exit(job, True, 0, f"exit code 0{note}")
    last = last_log_line(log)
    if last.startswith(TRUNCATED_MARKER):  # nothing of this run's output was kept
        last = ""
    if code < 0:
        head, exit_code = f"killed by signal {signal_name(-code)}", 128 - code
    else:
        head, exit_code = f"exit code {code}", code
    return Exit(job, False, exit_code, (f"{head}: {last}" if last else head) + note)
