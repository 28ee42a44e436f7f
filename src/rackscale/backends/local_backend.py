"""The ``local`` backend's :class:`LocalBackend`: the Backend protocol (adopt, start, stop, poll) over the
processes (:mod:`~rackscale.backends.local_procs`) and files (:mod:`~rackscale.backends.local_files`) of
its jobs; the overview is :mod:`rackscale.backends.local`'s."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from rackscale.backends.base import Exit, RunningJobRecord
from rackscale.backends.local_files import LocalFiles, exit_of, read_int_file, write_atomic
from rackscale.backends.local_health import HealthCommand, NvmlHealth
from rackscale.backends.local_procs import (
    WRAPPER_ENV,
    WRAPPER_SCRIPT,
    Run,
    Stopping,
    child_ended,
    exec_env,
    exec_string,
    is_our_wrapper,
    live_groups,
    reap,
    signal_group,
    signal_name,
    spawn,
)
from rackscale.backends.local_setup import (
    DEFAULT_GRACE_S,
    DEFAULT_MAX_LOG_BYTES,
    check_log_cap,
    checkpoint_dir,
    job_environment,
    job_home,
    prepare_checkpoints,
    resolve_run_as,
)
from rackscale.host.parts import NodeHealth
from rackscale.model.placement import Placement
from rackscale.model.workload import JobSpec

log = logging.getLogger("rackscale.backends.local")

KILL_WAIT_S = 5.0  # after SIGKILL, how long to wait for the group to vanish before forgetting it
NO_COMMAND = "the job has no command; the local backend runs spec.command"
LOST = "lost: the process is gone and left no exit code"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
# A job's longest file name is write_atomic's ``.<job>.exit.<pid>.tmp``: 18 characters besides the name with
# a 7-digit pid (Linux's pid_max is at most 4,194,304), within a file name's 255 bytes (NAME_MAX; names are
# ASCII). Longer names, which the spec allows (253), failed the start with "File name too long".
MAX_JOB_NAME = 255 - len("..exit..tmp") - 7


class LocalBackend(LocalFiles):
    """Runs each job's ``command`` on this machine's GPUs ``gpus`` (physical indexes, by node slot), as the
    user :func:`resolve_run_as` picks from ``run_as`` and ``allow_root_jobs``, each log within
    ``max_log_bytes``; ``health``: where :meth:`health` reads the node's health (NVML, the operator's
    command: :mod:`~rackscale.backends.local_health`; none: always healthy); ``checkpoint_root``: the hot
    tier's folder, where each job gets ``checkpoints/<job>/`` and RACKSCALE_CHECKPOINT_DIR naming it (none:
    neither). Raises :class:`LocalBackendError` if that user cannot be used or a folder cannot be set up."""

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
        health: Sequence[HealthCommand | NvmlHealth] = (),
        checkpoint_root: Path | None = None,
    ) -> None:
        self.gpus = tuple(gpus)
        self.grace_s = grace_s
        self.python = python
        self.max_log_bytes = check_log_cap(max_log_bytes)
        self.user = resolve_run_as(run_as, allow_root_jobs=allow_root_jobs)
        super().__init__(data_dir)  # the directories, after the checks: a refused user creates none
        self.checkpoint_root = checkpoint_root
        if checkpoint_root is not None:
            prepare_checkpoints(checkpoint_root)
        self._home = job_home(self.user, self.work_dir)  # None: HOME is the job's work directory
        self._runs: dict[str, Run] = {}
        self._stopping: list[Stopping] = []
        self._pending: list[Exit] = []  # failures found at start, reported by the next poll
        self._reported: list[tuple[str, int]] = []  # (job, wrapper pid) whose run/ files go at the next poll
        self.health_sources = tuple(health)
        self._warned: dict[str, float] = {}  # job -> when (service clock) the drain's grace it was told of ends

    # ------------------------------------------------------------------ the job
    def job_env(self, job: str, devices: Sequence[int], spec_env: Mapping[str, str]) -> dict[str, str]:
        """The job's environment: a base (PATH, LANG, LC_ALL and TZ from the service when set; HOME, USER and
        LOGNAME of the run-as user), then the job's ``env``, then the GPU variables, RACKSCALE_JOB and (with
        a hot tier) RACKSCALE_CHECKPOINT_DIR."""
        home = self._home or str(self.work_dir / job)
        return job_environment(job, devices, spec_env, self.user, home, checkpoint_root=self.checkpoint_root)

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
        # A replica that led before and leads again (docs/high-availability.md) adopts from the files, as a new
        # process does: what it watched, and the failed starts it had not reported, are forgotten first (kept,
        # a job that ended while it stood by was reported twice, and one the store does not call running was
        # stopped and then reported as an exit). Stops under way go on (not signalled a second time below).
        self._runs.clear()
        self._pending.clear()
        self._warned.clear()
        stopping = {s.pid for s in self._stopping}
        exits: list[Exit] = []
        for job, rec in sorted(running.items()):
            if not _SAFE_NAME.match(job):
                exits.append(Exit(job, False, None, f"the local backend cannot run a job named {job!r}"))
                continue
            pid_file, exit_file = self.pid_path(job), self.exit_path(job)
            pid = read_int_file(pid_file)
            ended = read_int_file(exit_file)
            if ended is not None and len(ended) in (2, 3) and (not pid or pid[0] == ended[0]):
                reap(ended[0])  # only if it is our child: a restart inside one process (tests)
                exits.append(self._exit_of(job, ended[1], ended[2] if len(ended) == 3 else 0))
                self._reported.append((job, ended[0]))
            elif pid and is_our_wrapper(pid[0], exit_file):
                self._runs[job] = Run(job, pid[0])
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
            pid = read_int_file(path)
            if pid and pid[0] in stopping:
                continue  # stopped before: its stop goes on (and removes its files)
            if pid and is_our_wrapper(pid[0], self.exit_path(job)):
                log.info("adopt: stopping %s (pid %d), which the store does not call running", job, pid[0])
                self._terminate(job, pid[0])
            else:
                if pid:
                    reap(pid[0])
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
        if len(job) > MAX_JOB_NAME:
            why = (
                f"the local backend cannot run a job named {job[:40]!r}... ({len(job)} characters): its files "
                f"(run/.NAME.exit.PID.tmp) would pass the file system's 255; give it a name of at most "
                f"{MAX_JOB_NAME} characters"
            )
            self._pending.append(Exit(job, False, None, why))
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
        command = [exec_string(a, f"argument {i} of the command") for i, a in enumerate(spec.command)]
        env = exec_env(self.job_env(job, devices, dict(spec.env)))
        pid_file, exit_file, env_file = self.pid_path(job), self.exit_path(job), self.env_path(job)
        work = self.work_dir / job
        argv = [self.python, "-I", WRAPPER_SCRIPT, "--exit-file", str(exit_file), "--pid-file", str(pid_file)]
        argv += ["--cwd", str(work), "--env-file", str(env_file), "--max-log-bytes", str(self.max_log_bytes)]
        if self.user.switch:
            argv += ["--user", str(self.user.uid), "--group", str(self.user.gid)]
        argv += ["--", *command]
        self.prepare_work_dir(work, self.user)
        if self.checkpoint_root is not None:  # the same checks and owner as the work dir: 0700, the run-as user
            self.prepare_work_dir(checkpoint_dir(self.checkpoint_root, job), self.user)
        exit_file.unlink(missing_ok=True)
        write_atomic(pid_file, "")  # "starting": an empty pid file tells a restart the start was cut short
        write_atomic(env_file, json.dumps(env))
        log_fd = os.open(
            self.log_path(job), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            os.fchmod(log_fd, 0o600)
            pid = spawn(argv, WRAPPER_ENV, log_fd)
        finally:
            os.close(log_fd)
        self._runs[job] = Run(job, pid)
        write_atomic(pid_file, f"{pid}\n")
        return pid

    def _abandon(self, job: str) -> None:
        """A start failed: kill its wrapper if it got that far, and drop its run/ files."""
        run = self._runs.pop(job, None)
        if run is not None:
            signal_group(run.pid, signal.SIGKILL)
            clock = time.monotonic()
            self._stopping.append(Stopping(job, run.pid, clock, killed_at=clock))  # reaped by _escalate
        with contextlib.suppress(OSError):
            self._remove_files(job, None)

    def stop(self, job: str, *, now: float) -> None:
        self._pending = [e for e in self._pending if e.job != job]
        run = self._runs.pop(job, None)
        if run is not None:
            self._terminate(job, run.pid, left_s=self._warned[job] - now if job in self._warned else None)
        self._warned.pop(job, None)

    def warn(self, job: str, *, now: float, grace_s: float) -> None:
        """A drain's stop signal at its start (kubectl's: SIGTERM, the grace, then SIGKILL): SIGTERM to the
        job's process group now; its ``stop`` (at the drain's deadline) SIGKILLs what is left once the grace
        is over, with no second grace."""
        run = self._runs.get(job)
        if run is None:
            return
        signal_group(run.pid, signal.SIGTERM)
        self._warned[job] = now + max(0.0, grace_s)
        log.info("drain: SIGTERM to %s (process group %d); stopped in %.1fs", job, run.pid, grace_s)

    def health(self, now: float) -> list[NodeHealth]:
        """The node's health from each source (none: healthy); a source that raises goes to the runner."""
        return [h for src in self.health_sources for h in src.read(now)]

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
        self._warned.clear()
        for src in self.health_sources:
            src.close()

    # ------------------------------------------------------------------ internals
    def _check(self, now: float) -> list[Exit]:
        out, self._pending = self._pending, []
        for job, run in list(self._runs.items()):
            e = self._ended(run)
            if e is not None:
                del self._runs[job]
                self._warned.pop(job, None)
                self._reported.append((job, run.pid))
                out.append(e)
        self._escalate()
        return out

    def _ended(self, run: Run) -> Exit | None:
        """The run's exit if it has ended. What its command left behind in its process group is killed."""
        exit_file = self.exit_path(run.job)
        ended_child = child_ended(run.pid)
        if ended_child is False or (ended_child is None and is_our_wrapper(run.pid, exit_file)):
            return None
        signal_group(run.pid, signal.SIGKILL)  # before reaping: an unreaped wrapper holds the group id
        status = reap(run.pid)
        ended = read_int_file(exit_file)
        if ended is not None and len(ended) in (2, 3) and ended[0] == run.pid:
            return self._exit_of(run.job, ended[1], ended[2] if len(ended) == 3 else 0)
        if status is not None and status < 0:
            return Exit(run.job, False, 128 - status, f"the job's wrapper was killed by signal {signal_name(-status)}")
        if status is not None:
            return Exit(run.job, False, None, f"the job's wrapper ended ({status}) without recording an exit code")
        return Exit(run.job, False, None, LOST)

    def _exit_of(self, job: str, code: int, dropped: int = 0) -> Exit:
        return exit_of(job, code, dropped, log=self.log_path(job), cap=self.max_log_bytes)

    def _terminate(self, job: str, pid: int, *, left_s: float | None = None) -> None:
        """SIGTERM, SIGKILL after the grace; ``left_s``: what is left of the grace of a drain the job was told
        of (``warn``), which bounds it (none left: SIGKILL now)."""
        clock = time.monotonic()
        if left_s is not None and left_s <= 0:
            signal_group(pid, signal.SIGKILL)
            self._stopping.append(Stopping(job, pid, clock, killed_at=clock))
            log.info("stopping %s (process group %d): its drain's grace is over: SIGKILL", job, pid)
            return
        deadline = clock + min(self.grace_s, left_s if left_s is not None else math.inf)
        signal_group(pid, signal.SIGTERM)
        self._stopping.append(Stopping(job, pid, deadline))
        log.info("stopping %s (process group %d): SIGTERM, SIGKILL in %.1fs", job, pid, deadline - clock)

    def _escalate(self) -> None:
        """SIGKILL the stopped jobs that outlived their grace; forget those that are gone (and their files)."""
        clock = time.monotonic()
        live = live_groups({s.pid for s in self._stopping})
        keep: list[Stopping] = []
        for s in self._stopping:
            if s.pid not in live:
                reap(s.pid)  # the wrapper, dead by now (a zombie does not count as live)
                self._remove_files(s.job, s.pid)
            elif s.killed_at is None and clock >= s.deadline:
                log.info("stop: %s outlived its %.1fs grace: SIGKILL", s.job, self.grace_s)
                signal_group(s.pid, signal.SIGKILL)
                s.killed_at = clock
                keep.append(s)
            elif s.killed_at is not None and clock - s.killed_at > KILL_WAIT_S:
                log.warning("stop: process group %d of %s still there after SIGKILL; forgetting it", s.pid, s.job)
                reap(s.pid)
            else:
                keep.append(s)
        self._stopping = keep

    def _remove_files(self, job: str, pid: int | None) -> None:
        """Drop a job's run/ files, unless it runs again (a newer run's files are its own)."""
        if job in self._runs:
            return
        self.remove_run_files(job, pid)

    def orphans(self) -> list[str]:
        """Before ``adopt``: the jobs whose wrapper still runs from an earlier start (a run/<job>.pid whose
        process is alive and is that job's wrapper). The service refuses to adopt them onto a new store."""
        out: list[str] = []
        for path in sorted(self.run_dir.glob("*.pid")):
            pid = read_int_file(path)
            if pid and is_our_wrapper(pid[0], self.exit_path(path.stem)):
                out.append(path.stem)
        return out
