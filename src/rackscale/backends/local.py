"""The ``local`` backend: each job's command runs as a process on this machine, on the GPUs its placement holds.

The cluster is one node (named after the host) in one rack, with the GPUs found by NVML or named by
``--gpus``; the node's GPU slots 0..n-1 map to those physical indexes (``--gpus 2,3``: slots 0 and 1 are
GPUs 2 and 3). A job's ``command`` runs as an argv list, never through a shell, with
``CUDA_VISIBLE_DEVICES`` set to the physical GPUs of its placement, in its own process group, through a
small wrapper (:mod:`rackscale.backends.local_run`) that records the exit code in a file, so a service that
was down when a job ended still learns how it ended.

Isolation (a job's ``command`` and ``env`` come from a tenant): a service running as root runs jobs as an
unprivileged user (``run_as``: ``rackscale-job`` if that user exists, else ``nobody``; never root unless
``allow_root_jobs``) with no supplementary groups; the job's environment is built from scratch (not the
service's); the wrapper runs ``python -I`` with an environment of its own, so nothing of the job's reaches
it; the data directory is closed to jobs except each job's own work directory; each log is capped at
``max_log_bytes``. A service that is not root runs jobs as its own user (and says so once).

Files under the data directory (mode 0711: jobs may pass through, not list it):

- ``logs/<job>.log`` (0600; ``logs/`` 0700): the command's stdout and stderr, written by the wrapper
  (appended to when a preempted job runs again), within the cap;
- ``work/<job>/`` (0700, owned by the run-as user; ``work/`` 0711): the command's working directory;
- ``run/`` (0700): ``<job>.pid``, the wrapper's pid, which is also the job's process group;
  ``<job>.env``, the job's environment for the wrapper (deleted once read); ``<job>.exit``,
  ``"<wrapper pid> <returncode> <log bytes dropped>"``, written by the wrapper when the command ends
  (older wrappers wrote the first two fields only).

The ``run/`` files of a job outlive its end by one ``poll`` (until the service has recorded the exit), so a
crash in between is recovered from the exit file. POSIX only; the wrapper is recognised through ``/proc``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import pwd
import re
import signal
import socket
import stat
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rackscale.backends import local_run
from rackscale.backends.base import Exit, RunningJobRecord
from rackscale.model.errors import RackscaleError
from rackscale.model.placement import Placement
from rackscale.model.topology import GPUCluster, NodeDecl
from rackscale.model.workload import JobSpec

log = logging.getLogger("rackscale.backends.local")

DEFAULT_GRACE_S = 10.0  # SIGTERM to SIGKILL
KILL_WAIT_S = 5.0  # after SIGKILL, how long to wait for the group to vanish before forgetting it
DEFAULT_MAX_LOG_BYTES = 64 * 1024 * 1024
MIN_LOG_BYTES = 4096
DEFAULT_JOB_USERS = ("rackscale-job", "nobody")  # the first that exists, when --run-as is not given
# The wrapper runs as a script (``python -I .../local_run.py``), not ``-m rackscale.backends.local_run``: that
# would import the package (pydantic and all) into a process that lives as long as the job: 33 MB and
# ~0.12 s per job against 13 MB. ``-I`` (isolated: no PYTHON* variables, no user site, the script's
# directory off sys.path) and an environment of its own keep the job's env out of it.
WRAPPER_SCRIPT = str(Path(local_run.__file__).resolve())
WRAPPER_MODULE = "rackscale.backends.local_run"
WRAPPER_ENV = {"PATH": os.defpath}
GPU_HINT = "pass --gpus 0,1,... (the GPU indexes to use), or install nvidia-ml-py on a GPU machine"
NO_COMMAND = "the job has no command; the local backend runs spec.command"
LOST = "lost: the process is gone and left no exit code"
ROOT_REFUSED = "refusing to run tenant jobs as root: pass --run-as USER (an unprivileged user), or --allow-root-jobs"
TRUNCATED_MARKER = "[rackscale: log truncated:"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


class LocalBackendError(RackscaleError, ValueError):
    """The local backend cannot be set up (no GPUs found or declared, bad options)."""


# ---------------------------------------------------------------------- discovery
def nvml_gpu_names() -> list[str] | None:
    """The names of this machine's GPUs by NVML index, or None if NVML is not there (no nvidia-ml-py, no
    driver, or no GPU)."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError: no driver or library on this machine
        return None
    try:
        names: list[str] = []
        for i in range(int(nvml.nvmlDeviceGetCount())):
            name = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i))
            names.append(name.decode() if isinstance(name, bytes) else str(name))
        return names or None
    except Exception as e:
        log.warning("NVML failed to list GPUs (%s); falling back to --gpus", e)
        return None
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def gpu_model(nvml_name: str) -> str:
    """``NVIDIA H200`` -> ``H200`` (what a job's GPU-model constraint names)."""
    name = nvml_name.strip()
    return name.removeprefix("NVIDIA ").strip() or name or "local"


def _requested_gpus(value: object) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        items: list[object] = [v for v in value.split(",") if v.strip()]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise LocalBackendError(f"gpus must be a list of GPU indexes (got {value!r}); {GPU_HINT}")
    out: list[int] = []
    for v in items:
        try:
            g = int(v) if isinstance(v, int | str) and not isinstance(v, bool) else None
        except ValueError:
            g = None
        if g is None or g < 0:
            raise LocalBackendError(f"gpus: {v!r} is not a GPU index (0, 1, ...); {GPU_HINT}")
        out.append(g)
    if not out:
        raise LocalBackendError(f"gpus is empty; {GPU_HINT}")
    if len(set(out)) != len(out):
        raise LocalBackendError(f"gpus lists a GPU twice ({','.join(map(str, out))}); name each GPU once")
    return tuple(out)


def discover_gpus(
    options: Mapping[str, object],
    cluster: GPUCluster | None = None,
    *,
    nvml: Callable[[], list[str] | None] = nvml_gpu_names,
) -> tuple[tuple[int, ...], str]:
    """The physical GPU indexes to use and their model.

    ``options["gpus"]`` (``--gpus``) wins; NVML, when present, checks those indexes and names the model.
    Without it: every GPU NVML sees; else the GPUs of the (one-node) cluster the service was given.
    """
    names = nvml()
    requested = _requested_gpus(options.get("gpus"))
    if requested is not None:
        if names is None:
            return requested, "local"
        missing = [g for g in requested if g >= len(names)]
        if missing:
            raise LocalBackendError(
                f"--gpus names GPU {','.join(map(str, missing))}, but NVML sees {len(names)} GPU(s) "
                f"(indexes 0..{len(names) - 1})"
            )
        models = {gpu_model(names[g]) for g in requested}
        if len(models) > 1:
            log.warning("the GPUs mix models %s; the node is labelled %s", sorted(models), gpu_model(names[0]))
        return requested, gpu_model(names[requested[0]])
    if names:
        return tuple(range(len(names))), gpu_model(names[0])
    if cluster is not None:
        if len(cluster.nodes) != 1:
            raise LocalBackendError(
                f"the local backend runs jobs on this one machine, but the cluster given has {len(cluster.nodes)} "
                f"nodes; {GPU_HINT}"
            )
        node = cluster.nodes[0]
        if node.gpus > 0:
            return tuple(range(node.gpus)), node.gpu_model
    raise LocalBackendError(f"the local backend found no GPUs to use: {GPU_HINT}")


def _host_cpu_memory() -> tuple[int, int]:
    cpu_milli = (os.cpu_count() or 1) * 1000
    try:
        memory_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError, AttributeError):
        memory_mib = 0
    return cpu_milli, max(0, memory_mib)


def local_cluster(gpus: int, model: str = "local", *, host: str | None = None) -> GPUCluster:
    """One rack holding one node, named after the host, with ``gpus`` GPUs of ``model``."""
    host = host or socket.gethostname() or "localhost"
    cpu_milli, memory_mib = _host_cpu_memory()
    decl = NodeDecl(
        name=host, rack=host, region="local", gpus=gpus, gpu_model=model, cpu_milli=cpu_milli, memory_mib=memory_mib
    )
    return GPUCluster.from_nodes([decl], name=f"local-{host}")


# ---------------------------------------------------------------------- the user jobs run as
@dataclass(frozen=True, slots=True)
class JobUser:
    """Who jobs run as. ``switch``: the service is root and the wrapper starts the command as this user
    (with no supplementary groups); otherwise jobs run as the service's own user."""

    name: str
    uid: int
    gid: int
    home: str
    switch: bool


def _lookup_user(name: str) -> pwd.struct_passwd:
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    if name.isdigit():
        with contextlib.suppress(KeyError):
            return pwd.getpwuid(int(name))
    raise LocalBackendError(
        f"--run-as {name}: no such user; name an existing unprivileged user, or create one "
        "(e.g. useradd --system --no-create-home --shell /usr/sbin/nologin rackscale-job)"
    )


def resolve_run_as(run_as: str | None, *, allow_root_jobs: bool = False, euid: int | None = None) -> JobUser:
    """The user jobs run as (see :class:`JobUser`). ``euid``: the service's (default: this process's).

    As root: ``run_as``, else ``rackscale-job`` if it exists, else ``nobody``; root only with
    ``allow_root_jobs``. Not root: the service's own user (naming another one is an error: it needs root).
    """
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        try:
            me = pwd.getpwuid(euid)
            mine = JobUser(me.pw_name, euid, me.pw_gid, me.pw_dir, switch=False)
        except KeyError:  # no passwd entry (a container's arbitrary uid)
            mine = JobUser(str(euid), euid, os.getegid(), "", switch=False)
        if run_as is not None and _lookup_user(run_as).pw_uid != euid:
            raise LocalBackendError(
                f"--run-as {run_as}: running jobs as another user needs the service to run as root (it runs as "
                f"{mine.name}); drop --run-as to run jobs as {mine.name}, or start the service as root"
            )
        return mine
    if run_as is not None:
        pw = _lookup_user(run_as)
    else:
        for name in DEFAULT_JOB_USERS:
            with contextlib.suppress(KeyError):
                pw = pwd.getpwnam(name)
                break
        else:
            raise LocalBackendError(
                "no user to run jobs as: neither rackscale-job nor nobody exists; create rackscale-job "
                "(useradd --system --no-create-home --shell /usr/sbin/nologin rackscale-job) or pass --run-as USER"
            )
    if pw.pw_uid == 0 and not allow_root_jobs:
        raise LocalBackendError(ROOT_REFUSED)
    return JobUser(pw.pw_name, pw.pw_uid, pw.pw_gid, pw.pw_dir, switch=True)


def _can_enter(path: Path, uid: int, gid: int) -> bool:
    """``path`` is a directory that ``uid`` (with group ``gid`` and no other) may reach: every directory
    from ``/`` down to it is searchable by that user (mode bits only; ACLs are not read)."""
    try:
        p = path.resolve(strict=True)
        if not p.is_dir():
            return False
        for d in (p, *p.parents):
            st = os.stat(d)
            if uid == 0:
                continue
            bit = stat.S_IXUSR if st.st_uid == uid else stat.S_IXGRP if st.st_gid == gid else stat.S_IXOTH
            if not st.st_mode & bit:
                return False
    except OSError:
        return False
    return True


def _check_log_cap(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < MIN_LOG_BYTES:
        raise LocalBackendError(
            f"--max-log-bytes must be a whole number of bytes >= {MIN_LOG_BYTES} (got {value!r}); "
            f"e.g. --max-log-bytes {DEFAULT_MAX_LOG_BYTES} (64 MiB)"
        )
    return value


def make_local_backend(
    data_dir: Path, cluster: GPUCluster | None, options: Mapping[str, object]
) -> tuple[LocalBackend, GPUCluster]:
    """The service's factory. Options: ``gpus`` (GPU indexes), ``stop_grace_s`` (SIGTERM to SIGKILL, s),
    ``run_as`` (user name), ``allow_root_jobs`` (bool), ``max_log_bytes`` (int)."""
    grace = options.get("stop_grace_s", DEFAULT_GRACE_S)
    if not isinstance(grace, int | float) or isinstance(grace, bool) or grace < 0:
        raise LocalBackendError(f"--stop-grace must be a number of seconds >= 0 (got {grace!r}); e.g. --stop-grace 10")
    run_as = options.get("run_as")
    if run_as is not None and (not isinstance(run_as, str) or not run_as.strip()):
        raise LocalBackendError(f"--run-as must name a user (got {run_as!r}); e.g. --run-as rackscale-job")
    allow_root = options.get("allow_root_jobs", False)
    if not isinstance(allow_root, bool):
        raise LocalBackendError(f"--allow-root-jobs is a flag, true or false (got {allow_root!r}); leave it off")
    cap = _check_log_cap(options.get("max_log_bytes", DEFAULT_MAX_LOG_BYTES))
    gpus, model = discover_gpus(options, cluster)
    backend = LocalBackend(
        data_dir,
        gpus,
        grace_s=float(grace),
        run_as=run_as.strip() if isinstance(run_as, str) else None,
        allow_root_jobs=allow_root,
        max_log_bytes=cap,
    )
    return backend, local_cluster(len(gpus), model)


# ---------------------------------------------------------------------- processes
@dataclass(slots=True)
class _Run:
    """A job's wrapper; its pid is also the job's process group. Our child, or (after a restart) adopted:
    then its end is seen through the exit file and /proc."""

    job: str
    pid: int


@dataclass(slots=True)
class _Stopping:
    job: str
    pid: int
    deadline: float  # monotonic: SIGKILL after this
    killed_at: float | None = None


def _read_int_file(path: Path) -> list[int] | None:
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


def _write_atomic(path: Path, text: str) -> None:
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


def _exec_string(value: str, what: str) -> str:
    """``value`` as it will reach exec: its bytes (the filesystem encoding) decoded as UTF-8 with
    surrogateescape, which the wrapper turns back into the same bytes. Raises ValueError for a NUL byte,
    UnicodeEncodeError for what cannot be encoded (a lone surrogate)."""
    raw = os.fsencode(value)
    if b"\0" in raw:
        raise ValueError(f"{what} contains a NUL byte")
    return raw.decode("utf-8", "surrogateescape")


def _exec_env(env: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in env.items():
        if not key or "=" in key:
            raise ValueError(f"the environment variable name {key!r} is not valid (empty, or holds '=')")
        name = _exec_string(key, f"the environment variable name {key!r}")
        out[name] = _exec_string(value, f"the value of the environment variable {key}")
    return out


def _child_ended(pid: int) -> bool | None:
    """For our own child: has it ended? It is left unreaped (a zombie keeps its pid, so the process group id
    cannot be recycled while we signal what is left of the group). None: ``pid`` is not our child."""
    try:
        if hasattr(os, "waitid"):
            return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        got, _ = os.waitpid(pid, os.WNOHANG)  # no waitid (macOS): this reaps it at once
        return got != 0
    except ChildProcessError:
        return None


def _reap(pid: int) -> int | None:
    """Reap ``pid`` if it is our child and has ended: its status in ``Popen.returncode`` terms, else None."""
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child (adopted after a restart), or reaped already
        return None
    return os.waitstatus_to_exitcode(status) if got else None


def _spawn(argv: list[str], env: Mapping[str, str], log_fd: int) -> int:
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


def _proc_state(pid: int) -> str | None:
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


def _is_our_wrapper(pid: int, exit_file: Path) -> bool:
    """``pid`` is alive and is the wrapper of this job (so a recycled pid is never taken for it)."""
    state = _proc_state(pid)
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


def _live_groups(pgids: set[int]) -> set[int]:
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


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _size(n: int) -> str:
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


class LocalBackend:
    """Runs each job's ``command`` on this machine's GPUs ``gpus`` (physical indexes, by node slot), as the
    user :func:`resolve_run_as` picks from ``run_as`` and ``allow_root_jobs``, each log within
    ``max_log_bytes``. Raises :class:`LocalBackendError` if that user cannot be used or the data directory
    cannot be set up."""

    name = "local"

    def __init__(
        self,
        data_dir: Path,
        gpus: Sequence[int],
        *,
        grace_s: float = DEFAULT_GRACE_S,
        python: str = sys.executable,
        run_as: str | None = None,
        allow_root_jobs: bool = False,
        max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.gpus = tuple(gpus)
        self.grace_s = grace_s
        self.python = python
        self.max_log_bytes = _check_log_cap(max_log_bytes)
        self.user = resolve_run_as(run_as, allow_root_jobs=allow_root_jobs)
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
        u = self.user
        self._home = u.home if u.home and _can_enter(Path(u.home), u.uid, u.gid) else None
        if not u.switch:
            log.warning(
                "the service does not run as root: jobs run as its own user %s and can read whatever it can "
                "(its store, its tokens file, every job's files); run the service as root to run them as an "
                "unprivileged user (--run-as)",
                u.name,
            )
        elif not _can_enter(self.work_dir, u.uid, u.gid):
            log.warning(
                "user %s (jobs run as it) cannot search a directory above %s: jobs start in their work directory "
                "but cannot reach it by its path; give the directories above --data-dir o+x, or move it",
                u.name,
                self.work_dir,
            )
        self._runs: dict[str, _Run] = {}
        self._stopping: list[_Stopping] = []
        self._pending: list[Exit] = []  # failures found at start, reported by the next poll
        self._reported: list[tuple[str, int]] = []  # (job, wrapper pid) whose run/ files go at the next poll

    # ------------------------------------------------------------------ paths
    def log_path(self, job: str) -> Path:
        return self.logs_dir / f"{job}.log"

    def pid_path(self, job: str) -> Path:
        return self.run_dir / f"{job}.pid"

    def exit_path(self, job: str) -> Path:
        return self.run_dir / f"{job}.exit"

    def env_path(self, job: str) -> Path:
        return self.run_dir / f"{job}.env"

    def job_env(self, job: str, devices: Sequence[int], spec_env: Mapping[str, str]) -> dict[str, str]:
        """The job's environment: a base (PATH, LANG, LC_ALL and TZ from the service when set; HOME, USER and
        LOGNAME of the run-as user), then the job's ``env``, then the GPU variables and RACKSCALE_JOB."""
        env = {"PATH": os.environ.get("PATH") or os.defpath}
        for key in ("LANG", "LC_ALL", "TZ"):
            if key in os.environ:
                env[key] = os.environ[key]
        env["HOME"] = self._home or str(self.work_dir / job)
        env["USER"] = env["LOGNAME"] = self.user.name
        env.update(spec_env)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, devices))
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's indexes = NVML's = nvidia-smi's
        env["RACKSCALE_JOB"] = job
        return env

    def running(self) -> frozenset[str]:
        return frozenset(self._runs)

    def devices(self, placement: Placement) -> list[int]:
        """The physical GPU indexes of a placement's slots (a shared slice names its one GPU too)."""
        out: list[int] = []
        for alloc in placement.allocs:
            if alloc.node != 0:
                raise ValueError(f"the placement uses node {alloc.node}; this machine is node 0")
            for slot in alloc.gpus:
                if not 0 <= slot < len(self.gpus):
                    raise ValueError(f"the placement uses GPU slot {slot}; this machine has {len(self.gpus)}")
                if self.gpus[slot] not in out:
                    out.append(self.gpus[slot])
        return out

    # ------------------------------------------------------------------ the Backend protocol
    def adopt(self, running: Mapping[str, RunningJobRecord], now: float) -> list[Exit]:
        exits: list[Exit] = []
        for job, rec in sorted(running.items()):
            if not _SAFE_NAME.match(job):
                exits.append(Exit(job, False, None, f"the local backend cannot run a job named {job!r}"))
                continue
            pid_file, exit_file = self.pid_path(job), self.exit_path(job)
            pid = _read_int_file(pid_file)
            ended = _read_int_file(exit_file)
            if ended is not None and len(ended) in (2, 3) and (not pid or pid[0] == ended[0]):
                _reap(ended[0])  # only if it is our child: a restart inside one process (tests)
                exits.append(self._exit_of(job, ended[1], ended[2] if len(ended) == 3 else 0))
                self._reported.append((job, ended[0]))
            elif pid and _is_our_wrapper(pid[0], exit_file):
                self._runs[job] = _Run(job, pid[0])
            elif pid is None and ended is None:
                # The service stopped after recording the start and before making it: make it now.
                log.info("adopt: %s was never started; starting it", job)
                self.start(rec.spec, rec.placement, now=now)
            else:
                exits.append(Exit(job, False, None, LOST))
                self._reported.append((job, pid[0] if pid else -1))
        # Whatever ran for jobs the store does not call running is stopped; old files go.
        for path in sorted(self.run_dir.glob("*.pid")):
            job = path.stem
            if job in running:
                continue
            pid = _read_int_file(path)
            if pid and _is_our_wrapper(pid[0], self.exit_path(job)):
                log.info("adopt: stopping %s (pid %d), which the store does not call running", job, pid[0])
                self._terminate(job, pid[0])
            else:
                if pid:
                    _reap(pid[0])
                self._remove_files(job, None)
        for path in sorted([*self.run_dir.glob("*.exit"), *self.run_dir.glob("*.env")]):
            if path.stem not in running and not self.pid_path(path.stem).exists():
                path.unlink(missing_ok=True)
        return exits + self._check(now)

    def start(self, spec: JobSpec, placement: Placement, *, now: float) -> None:
        job = spec.name
        if not _SAFE_NAME.match(job):
            self._pending.append(Exit(job, False, None, f"the local backend cannot run a job named {job!r}"))
            return
        if job in self._runs:  # not expected from the runner: stop the old run rather than lose track of it
            log.warning("start: %s is already running; stopping the old run first", job)
            self.stop(job, now=now)
        if not spec.command:
            self._pending.append(Exit(job, False, None, NO_COMMAND))
            return
        try:
            devices = self.devices(placement)
        except ValueError as e:
            self._pending.append(Exit(job, False, None, f"cannot run here: {e}"))
            return
        try:
            pid = self._launch(spec, devices)
        except Exception as e:  # the job's own problem (a NUL byte, an unencodable string, a full disk...)
            log.warning("start: cannot start %s: %s: %s", job, type(e).__name__, e)
            self._abandon(job)
            self._pending.append(Exit(job, False, None, f"cannot start the job: {type(e).__name__}: {e}"))
            return
        log.info("started %s (pid %d) on GPUs %s as %s: %s", job, pid, devices, self.user.name, list(spec.command))

    def _launch(self, spec: JobSpec, devices: Sequence[int]) -> int:
        """Prepare the job's files and start its wrapper; the wrapper's pid (the run is tracked from then)."""
        job = spec.name
        command = [_exec_string(a, f"argument {i} of the command") for i, a in enumerate(spec.command)]
        env = _exec_env(self.job_env(job, devices, dict(spec.env)))
        pid_file, exit_file, env_file = self.pid_path(job), self.exit_path(job), self.env_path(job)
        work = self.work_dir / job
        argv = [self.python, "-I", WRAPPER_SCRIPT, "--exit-file", str(exit_file), "--pid-file", str(pid_file)]
        argv += ["--cwd", str(work), "--env-file", str(env_file), "--max-log-bytes", str(self.max_log_bytes)]
        if self.user.switch:
            argv += ["--user", str(self.user.uid), "--group", str(self.user.gid)]
        argv += ["--", *command]
        self._prepare_work_dir(work)
        exit_file.unlink(missing_ok=True)
        _write_atomic(pid_file, "")  # "starting": an empty pid file tells a restart the start was cut short
        _write_atomic(env_file, json.dumps(env))
        log_fd = os.open(
            self.log_path(job), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            os.fchmod(log_fd, 0o600)
            pid = _spawn(argv, WRAPPER_ENV, log_fd)
        finally:
            os.close(log_fd)
        self._runs[job] = _Run(job, pid)
        _write_atomic(pid_file, f"{pid}\n")
        return pid

    def _prepare_work_dir(self, work: Path) -> None:
        """``work/<job>/``: a directory (never a link), mode 0700, owned by the run-as user."""
        work.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(work)
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(f"{work} is not a directory")
        u = self.user
        if u.switch and (st.st_uid, st.st_gid) != (u.uid, u.gid):
            os.chown(work, u.uid, u.gid, follow_symlinks=False)
        os.chmod(work, 0o700)

    def _abandon(self, job: str) -> None:
        """A start failed: kill its wrapper if it got that far, and drop its run/ files."""
        run = self._runs.pop(job, None)
        if run is not None:
            _signal_group(run.pid, signal.SIGKILL)
            clock = time.monotonic()
            self._stopping.append(_Stopping(job, run.pid, clock, killed_at=clock))  # reaped by _escalate
        with contextlib.suppress(OSError):
            self._remove_files(job, None)

    def stop(self, job: str, *, now: float) -> None:
        self._pending = [e for e in self._pending if e.job != job]
        run = self._runs.pop(job, None)
        if run is not None:
            self._terminate(job, run.pid)

    def poll(self, now: float) -> list[Exit]:
        # The exits returned by the previous poll are in the store now: their files can go.
        for job, pid in self._reported:
            if job not in self._runs:
                self._remove_files(job, pid)
        self._reported = []
        return self._check(now)

    def close(self) -> None:
        """Processes keep running (a restart adopts them); nothing is held open between calls."""
        self._runs.clear()
        self._stopping.clear()
        self._pending.clear()

    # ------------------------------------------------------------------ internals
    def _check(self, now: float) -> list[Exit]:
        out, self._pending = self._pending, []
        for job, run in list(self._runs.items()):
            e = self._ended(run)
            if e is not None:
                del self._runs[job]
                self._reported.append((job, run.pid))
                out.append(e)
        self._escalate()
        return out

    def _ended(self, run: _Run) -> Exit | None:
        """The run's exit if it has ended. What its command left behind in its process group is killed."""
        exit_file = self.exit_path(run.job)
        ended_child = _child_ended(run.pid)
        if ended_child is False or (ended_child is None and _is_our_wrapper(run.pid, exit_file)):
            return None
        _signal_group(run.pid, signal.SIGKILL)  # before reaping: an unreaped wrapper holds the group id
        status = _reap(run.pid)
        ended = _read_int_file(exit_file)
        if ended is not None and len(ended) in (2, 3) and ended[0] == run.pid:
            return self._exit_of(run.job, ended[1], ended[2] if len(ended) == 3 else 0)
        if status is not None and status < 0:
            return Exit(run.job, False, 128 - status, f"the job's wrapper was killed by signal {_signal_name(-status)}")
        if status is not None:
            return Exit(run.job, False, None, f"the job's wrapper ended ({status}) without recording an exit code")
        return Exit(run.job, False, None, LOST)

    def _exit_of(self, job: str, code: int, dropped: int = 0) -> Exit:
        """The exit for a returncode, and the log bytes the wrapper dropped at the cap."""
        note = f" (log truncated: {_size(dropped)} dropped at the {_size(self.max_log_bytes)} cap)" if dropped else ""
        if code == 0:
            return Exit(job, True, 0, f"exit code 0{note}")
        last = last_log_line(self.log_path(job))
        if last.startswith(TRUNCATED_MARKER):  # nothing of this run's output was kept
            last = ""
        if code < 0:
            head, exit_code = f"killed by signal {_signal_name(-code)}", 128 - code
        else:
            head, exit_code = f"exit code {code}", code
        return Exit(job, False, exit_code, (f"{head}: {last}" if last else head) + note)

    def _terminate(self, job: str, pid: int) -> None:
        _signal_group(pid, signal.SIGTERM)
        self._stopping.append(_Stopping(job, pid, time.monotonic() + self.grace_s))
        log.info("stopping %s (process group %d): SIGTERM, SIGKILL in %.1fs", job, pid, self.grace_s)

    def _escalate(self) -> None:
        """SIGKILL the stopped jobs that outlived their grace; forget those that are gone (and their files)."""
        clock = time.monotonic()
        live = _live_groups({s.pid for s in self._stopping})
        keep: list[_Stopping] = []
        for s in self._stopping:
            if s.pid not in live:
                _reap(s.pid)  # the wrapper, dead by now (a zombie does not count as live)
                self._remove_files(s.job, s.pid)
            elif s.killed_at is None and clock >= s.deadline:
                log.info("stop: %s outlived its %.1fs grace: SIGKILL", s.job, self.grace_s)
                _signal_group(s.pid, signal.SIGKILL)
                s.killed_at = clock
                keep.append(s)
            elif s.killed_at is not None and clock - s.killed_at > KILL_WAIT_S:
                log.warning("stop: process group %d of %s still there after SIGKILL; forgetting it", s.pid, s.job)
                _reap(s.pid)
            else:
                keep.append(s)
        self._stopping = keep

    def _remove_files(self, job: str, pid: int | None) -> None:
        """Drop a job's run/ files, unless a newer run of the job wrote them (``pid``: the run they are for)."""
        if job in self._runs:
            return
        for path in (self.pid_path(job), self.exit_path(job)):
            got = _read_int_file(path)
            if pid is None or not got or got[0] == pid:
                path.unlink(missing_ok=True)
        self.env_path(job).unlink(missing_ok=True)  # normally deleted by the wrapper once read

    def orphans(self) -> list[str]:
        """Before ``adopt``: the jobs whose wrapper still runs from an earlier start (a run/<job>.pid whose
        process is alive and is that job's wrapper). The service refuses to adopt them onto a new store."""
        out: list[str] = []
        for path in sorted(self.run_dir.glob("*.pid")):
            pid = _read_int_file(path)
            if pid and _is_our_wrapper(pid[0], self.exit_path(path.stem)):
                out.append(path.stem)
        return out
