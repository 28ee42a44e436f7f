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

Files under the data directory (mode 0711: jobs may pass through, not list it): the layout is written once,
in :mod:`rackscale.backends.local_files`.

The ``run/`` files of a job outlive its end by one ``poll`` (until the service has recorded the exit), so a
crash in between is recovered from the exit file. POSIX only; the wrapper is recognised through ``/proc``.

The modules: this one (the service's factory, :func:`make_local_backend`, and the names callers import),
:mod:`~rackscale.backends.local_setup` (options, GPU discovery, the cluster, the run-as user),
:mod:`~rackscale.backends.local_backend` (:class:`LocalBackend`), :mod:`~rackscale.backends.local_files`
(the data directory), :mod:`~rackscale.backends.local_procs` (processes) and
:mod:`~rackscale.backends.local_run` (the wrapper, a stdlib-only script).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from rackscale.backends.local_backend import KILL_WAIT_S, LOST, NO_COMMAND, LocalBackend
from rackscale.backends.local_files import TRUNCATED_MARKER, LocalFiles, last_log_line
from rackscale.backends.local_health import (
    DEFAULT_HEALTH_INTERVAL_S,
    DEFAULT_HEALTH_TIMEOUT_S,
    HealthCommand,
    NvmlHealth,
    command_argv,
)
from rackscale.backends.local_procs import WRAPPER_ENV, WRAPPER_MODULE, WRAPPER_SCRIPT
from rackscale.backends.local_procs import is_our_wrapper as _is_our_wrapper
from rackscale.backends.local_setup import (
    CHECKPOINT_ENV,
    CHECKPOINTS_FOLDER,
    DEFAULT_GRACE_S,
    DEFAULT_JOB_USERS,
    DEFAULT_MAX_LOG_BYTES,
    GPU_HINT,
    MIN_LOG_BYTES,
    ROOT_REFUSED,
    JobUser,
    LocalBackendError,
    check_checkpoint_root,
    check_log_cap,
    checkpoint_dir,
    discover_gpus,
    gpu_model,
    local_cluster,
    nvml_gpu_names,
    resolve_run_as,
)
from rackscale.model.topology import GPUCluster

__all__ = [
    "CHECKPOINTS_FOLDER",
    "CHECKPOINT_ENV",
    "DEFAULT_GRACE_S",
    "DEFAULT_HEALTH_INTERVAL_S",
    "DEFAULT_HEALTH_TIMEOUT_S",
    "DEFAULT_JOB_USERS",
    "DEFAULT_MAX_LOG_BYTES",
    "GPU_HINT",
    "KILL_WAIT_S",
    "LOST",
    "MIN_LOG_BYTES",
    "NO_COMMAND",
    "ROOT_REFUSED",
    "TRUNCATED_MARKER",
    "WRAPPER_ENV",
    "WRAPPER_MODULE",
    "WRAPPER_SCRIPT",
    "HealthCommand",
    "JobUser",
    "LocalBackend",
    "LocalBackendError",
    "LocalFiles",
    "NvmlHealth",
    "_is_our_wrapper",  # the tests' name for it, from before the split
    "checkpoint_dir",
    "discover_gpus",
    "gpu_model",
    "last_log_line",
    "local_cluster",
    "make_local_backend",
    "nvml_gpu_names",
    "resolve_run_as",
]


def make_local_backend(
    data_dir: Path, cluster: GPUCluster | None, options: Mapping[str, object]
) -> tuple[LocalBackend, GPUCluster]:
    """The service's factory. Options: ``gpus`` (GPU indexes), ``stop_grace_s`` (SIGTERM to SIGKILL, s),
    ``run_as`` (user name), ``allow_root_jobs`` (bool), ``max_log_bytes`` (int); the node's health:
    ``health_command`` (a command line or argv), ``health_interval_s``, ``health_timeout_s``, ``nvml_health``
    (bool, default true: read NVML where it is installed); ``checkpoint_root`` (the hot tier's folder, an
    absolute path: each job gets RACKSCALE_CHECKPOINT_DIR=<it>/checkpoints/<job>)."""
    grace = options.get("stop_grace_s", DEFAULT_GRACE_S)
    if not isinstance(grace, int | float) or isinstance(grace, bool) or grace < 0:
        raise LocalBackendError(f"--stop-grace must be a number of seconds >= 0 (got {grace!r}); e.g. --stop-grace 10")
    run_as = options.get("run_as")
    if run_as is not None and (not isinstance(run_as, str) or not run_as.strip()):
        raise LocalBackendError(f"--run-as must name a user (got {run_as!r}); e.g. --run-as rackscale-job")
    allow_root = options.get("allow_root_jobs", False)
    if not isinstance(allow_root, bool):
        raise LocalBackendError(f"--allow-root-jobs is a flag, true or false (got {allow_root!r}); leave it off")
    cap = check_log_cap(options.get("max_log_bytes", DEFAULT_MAX_LOG_BYTES))
    checkpoint_root = check_checkpoint_root(options.get("checkpoint_root"))
    gpus, model = discover_gpus(options, cluster)
    local = local_cluster(len(gpus), model)
    backend = LocalBackend(
        data_dir,
        gpus,
        grace_s=float(grace),
        run_as=run_as.strip() if isinstance(run_as, str) else None,
        allow_root_jobs=allow_root,
        max_log_bytes=cap,
        health=health_sources(options, node=local.nodes[0].name, gpus=gpus),
        checkpoint_root=checkpoint_root,
    )
    return backend, local


def _seconds(options: Mapping[str, object], key: str, default: float, flag: str) -> float:
    value = options.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value < 86400:
        raise LocalBackendError(f"{flag} must be a number of seconds between 0 and 86400 (got {value!r})")
    return float(value)


def health_sources(
    options: Mapping[str, object], *, node: str, gpus: tuple[int, ...]
) -> list[HealthCommand | NvmlHealth]:
    """Where the node's health comes from: NVML (unless ``nvml_health`` is false; it turns itself off
    without pynvml or a driver) and the operator's ``health_command``, each read every ``health_interval_s``."""
    interval = _seconds(options, "health_interval_s", DEFAULT_HEALTH_INTERVAL_S, "--health-interval")
    out: list[HealthCommand | NvmlHealth] = []
    if options.get("nvml_health", True) is not False:
        out.append(NvmlHealth(node=node, gpus=gpus, interval_s=interval))
    command = options.get("health_command")
    if command is not None:
        timeout = _seconds(options, "health_timeout_s", DEFAULT_HEALTH_TIMEOUT_S, "--health-timeout")
        try:
            argv = command_argv(command)
        except ValueError as e:
            raise LocalBackendError(str(e)) from None
        out.append(HealthCommand(argv, node=node, gpus=len(gpus), interval_s=interval, timeout_s=timeout))
    return out
