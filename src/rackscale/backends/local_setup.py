"""Setting up the ``local`` backend: its options' defaults and checks, the GPUs it finds (NVML) or is given
(``--gpus``), the one-node cluster they make, and the user jobs run as (:func:`resolve_run_as`)."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import pwd
import socket
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rackscale.model.errors import RackscaleError
from rackscale.model.topology import GPUCluster, NodeDecl

log = logging.getLogger("rackscale.backends.local")  # one logger for the whole backend

DEFAULT_GRACE_S = 10.0  # SIGTERM to SIGKILL
DEFAULT_MAX_LOG_BYTES = 64 * 1024 * 1024
MIN_LOG_BYTES = 4096
DEFAULT_JOB_USERS = ("rackscale-job", "nobody")  # the first that exists, when --run-as is not given
GPU_HINT = "pass --gpus 0,1,... (the GPU indexes to use), or install nvidia-ml-py on a GPU machine"
ROOT_REFUSED = "refusing to run tenant jobs as root: pass --run-as USER (an unprivileged user), or --allow-root-jobs"
# The folder of a tier the storage lifecycle manages by default (rackscale.storage.lifecycle.DEFAULT_INCLUDE;
# that package sits above this layer, so the name is repeated here and a test keeps the two equal).
CHECKPOINTS_FOLDER = "checkpoints"
CHECKPOINT_ENV = "RACKSCALE_CHECKPOINT_DIR"


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


def can_enter(path: Path, uid: int, gid: int) -> bool:
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


def check_log_cap(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < MIN_LOG_BYTES:
        raise LocalBackendError(
            f"--max-log-bytes must be a whole number of bytes >= {MIN_LOG_BYTES} (got {value!r}); "
            f"e.g. --max-log-bytes {DEFAULT_MAX_LOG_BYTES} (64 MiB)"
        )
    return value


def job_home(user: JobUser, work_dir: Path) -> str | None:
    """The run-as user's home if that user can reach it (else None: HOME is then the job's work directory).
    Warns, once per backend, when jobs run as the service's own user or cannot reach ``work_dir``."""
    if not user.switch:
        log.warning(
            "the service does not run as root: jobs run as its own user %s and can read whatever it can "
            "(its store, its tokens file, every job's files); run the service as root to run them as an "
            "unprivileged user (--run-as)",
            user.name,
        )
    elif not can_enter(work_dir, user.uid, user.gid):
        log.warning(
            "user %s (jobs run as it) cannot search a directory above %s: jobs start in their work directory "
            "but cannot reach it by its path; give the directories above --data-dir o+x, or move it",
            user.name,
            work_dir,
        )
    return user.home if user.home and can_enter(Path(user.home), user.uid, user.gid) else None


def check_checkpoint_root(value: object) -> Path | None:
    """The ``checkpoint_root`` option (the hot tier's folder; ``rackscale serve --tier hot=PATH``): None, or
    an absolute path to an existing folder, returned resolved. Raises :class:`LocalBackendError` naming it."""
    if value is None:
        return None
    fix = "give the hot tier's folder as an absolute path, e.g. --tier hot=/nvme/hot"
    if not isinstance(value, str) or not value or "\x00" in value or not Path(value).is_absolute():
        raise LocalBackendError(f"checkpoint_root must be an absolute path (got {value!r}); {fix}")
    try:
        root = Path(value).resolve(strict=True)
    except (OSError, RuntimeError) as e:  # missing, a symlink loop, unreadable
        raise LocalBackendError(f"checkpoint_root {value}: {e.__class__.__name__}: {e}; {fix}") from None
    if not root.is_dir():
        raise LocalBackendError(f"checkpoint_root {value} is not a folder; {fix}")
    return root


def prepare_checkpoints(checkpoint_root: Path) -> Path:
    """``<checkpoint_root>/checkpoints/``: created (mode 0711: jobs pass through to their own folder, and do
    not list the others) unless it exists; a folder, never a symlink (the lifecycle refuses a symlinked
    folder as a whole, so checkpoints written through one would never move). Raises :class:`LocalBackendError`."""
    folder = checkpoint_root / CHECKPOINTS_FOLDER
    try:
        if not os.path.lexists(folder):
            folder.mkdir(mode=0o700)
            os.chmod(folder, 0o711)  # explicit: the service's umask (077) would leave it closed to jobs
        st = os.lstat(folder)
    except OSError as e:
        raise LocalBackendError(
            f"cannot set up {folder}: {e}; the hot tier must be a folder the service can write"
        ) from e
    if not stat.S_ISDIR(st.st_mode):
        raise LocalBackendError(f"{folder} is not a folder (a symlink or a file): make it a plain folder, or remove it")
    return folder


def checkpoint_dir(checkpoint_root: Path, job: str) -> Path:
    """``<checkpoint_root>/checkpoints/<job>``: where a job writes its checkpoints on the hot tier
    (``checkpoint_root``). Raises ValueError for a name that is not one plain path component (``..``, ``/``):
    the backend refuses such names before this, but a path built from a tenant's string is checked here too."""
    if not job or job in (".", "..") or "/" in job or "\x00" in job or Path(job).name != job:
        raise ValueError(f"the job name {job!r} cannot name a checkpoint folder (one path component, not . or ..)")
    return checkpoint_root / CHECKPOINTS_FOLDER / job


def job_environment(
    job: str,
    devices: Sequence[int],
    spec_env: Mapping[str, str],
    user: JobUser,
    home: str,
    *,
    checkpoint_root: Path | None = None,
) -> dict[str, str]:
    """A job's environment: a base (PATH, LANG, LC_ALL and TZ from the service when set; HOME, USER and
    LOGNAME of the run-as user), then the job's ``env``, then the GPU variables, RACKSCALE_JOB and, with a
    hot tier (``checkpoint_root``), RACKSCALE_CHECKPOINT_DIR (:func:`checkpoint_dir`)."""
    env = {"PATH": os.environ.get("PATH") or os.defpath}
    for key in ("LANG", "LC_ALL", "TZ"):
        if key in os.environ:
            env[key] = os.environ[key]
    env["HOME"] = home
    env["USER"] = env["LOGNAME"] = user.name
    env.update(spec_env)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, devices))
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's indexes = NVML's = nvidia-smi's
    env["RACKSCALE_JOB"] = job
    if checkpoint_root is not None:  # after the job's env: the lifecycle manages this folder, not another
        env[CHECKPOINT_ENV] = str(checkpoint_dir(checkpoint_root, job))
    return env
