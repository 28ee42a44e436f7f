"""The ``local`` backend's health: NVML where a GPU exists, and an operator's health-check command.

Both give :class:`~rackscale.host.parts.NodeHealth` for the one node (the runner hands them to the host,
which stops and requeues what a failed part held and recovers it once a report no longer names it).

- **NVML** (``pip install 'rackscale[gpu]'``, imported lazily; nothing happens without it or without a
  driver). Per GPU, the state NVML keeps, not its event stream, so a GPU recovers by itself once a reset
  clears it: a handle call that answers ``NVML_ERROR_GPU_IS_LOST`` ("fallen off the bus", what XID 79
  reports) or ``NVML_ERROR_RESET_REQUIRED``; uncorrectable (double-bit) ECC errors in the volatile counter
  (``nvmlDeviceGetTotalEccErrors``, cleared by a reset); a row remap pending or failed
  (``nvmlDeviceGetRemappedRows``, A100 and later) or a page retirement pending
  (``nvmlDeviceGetRetiredPagesPendingStatus``, older GPUs): both need a reset before the memory is trusted.
  ``NVML_ERROR_NOT_SUPPORTED`` skips a check. The names are pynvml's (nvidia-ml-py; e.g. the copy in
  ray-project/ray python/ray/_private/thirdparty/pynvml/pynvml.py).
- **A health-check command** (``serve --health-command 'PATH ARGS'``), an argv list run without a shell,
  as a Kubernetes exec probe is read (https://kubernetes.io/docs/tasks/configure-pod-container/
  configure-liveness-readiness-startup-probes/: exit 0 is healthy, and a probe past ``timeoutSeconds``
  fails): exit 0 is healthy; any other exit fails the node with the first line of its output as the reason,
  unless some lines read ``gpu N: REASON``, which fail only those GPUs. A run past its timeout is killed
  (its whole process group) and fails the node; output past :data:`MAX_OUTPUT_BYTES` is dropped and the
  run killed, and what was read is judged. It runs in the background: :meth:`HealthCommand.read` never
  waits on it (the runner's step goes on), starts a new run at most every ``interval_s``, and answers the
  last finished run's result meanwhile.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from types import ModuleType

from rackscale.host.parts import NodeHealth, NodeState
from rackscale.model.errors import RackscaleError

log = logging.getLogger("rackscale.backends.local")

DEFAULT_HEALTH_INTERVAL_S = 30.0
DEFAULT_HEALTH_TIMEOUT_S = 10.0
MAX_OUTPUT_BYTES = 64 * 1024  # what a health command may print; the rest is dropped and the run killed
MAX_REASON = 200  # characters of a reason kept
_GPU_LINE = re.compile(r"^\s*gpu\s+(\d+)\s*:\s*(.*)$", re.IGNORECASE)
NVML_GPU_IS_LOST = 15  # nvmlReturn_t NVML_ERROR_GPU_IS_LOST
NVML_RESET_REQUIRED = 16  # NVML_ERROR_RESET_REQUIRED
NVML_NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED


def _clean(text: str) -> str:
    """A reason that is safe in an event, a log line and a terminal: printable, one line, bounded."""
    out = "".join(c if c.isprintable() else "?" for c in text.strip())
    return out[:MAX_REASON] + ("..." if len(out) > MAX_REASON else "")


def judge(node: str, gpus: int, code: int, output: bytes, *, note: str = "") -> list[NodeHealth]:
    """A finished run's verdict: ``code`` 0 is healthy; otherwise the GPUs named by ``gpu N: REASON`` lines
    (N a slot of this node) fail, or the whole node with the first output line. ``note`` (a timeout, a flood)
    goes first in the reason."""
    if code == 0 and not note:
        return []
    text = output.decode("utf-8", "replace")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    failed: dict[int, str] = {}
    for ln in lines:
        m = _GPU_LINE.match(ln)
        if m and int(m.group(1)) < gpus:
            failed.setdefault(int(m.group(1)), _clean(m.group(2)))
    if failed and not note:
        return [
            NodeHealth(node=node, failed_gpus=(g,), reason=f"health command: {why or f'exit {code}'}")
            for g, why in sorted(failed.items())
        ]
    first = _clean(lines[0]) if lines else ""
    why = "; ".join(x for x in (note, first or f"exit {code}") if x)
    return [NodeHealth(node=node, state=NodeState.DOWN, reason=f"health command: {why}")]


def command_argv(value: object) -> list[str]:
    """``--health-command``'s argv: a string (split as a shell would, but never run by one) or a list."""
    if isinstance(value, str):
        argv = shlex.split(value)
    elif isinstance(value, list | tuple) and all(isinstance(a, str) for a in value):
        argv = list(value)
    else:
        raise ValueError(f"--health-command takes a command line, e.g. '/usr/local/bin/gpu-check -q' (got {value!r})")
    if not argv or not argv[0]:
        raise ValueError("--health-command is empty; give a command line, e.g. '/usr/local/bin/gpu-check -q'")
    exe = argv[0] if os.sep in argv[0] else shutil.which(argv[0])
    if exe is None or not os.access(exe, os.X_OK):
        raise ValueError(f"--health-command: {argv[0]!r} is not an executable file (give its path)")
    return argv


class HealthCommand:
    """The operator's health check for node ``node`` (``gpus`` slots), run at most every ``interval_s``
    (service clock), killed after ``timeout_s`` (wall clock)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        node: str,
        gpus: int,
        interval_s: float = DEFAULT_HEALTH_INTERVAL_S,
        timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S,
    ) -> None:
        self.argv, self.node, self.gpus = list(argv), node, gpus
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self.runs = 0  # runs finished (for the tests and the log)
        self._proc: subprocess.Popen[bytes] | None = None
        self._out = bytearray()
        self._deadline = 0.0
        self._started: float | None = None  # service clock of the last start
        self._result: list[NodeHealth] = []

    def read(self, now: float) -> list[NodeHealth]:
        """The last finished run's verdict; collects a run that ended, kills one past its time, starts one
        when due. Never blocks. A command that cannot start raises (the runner counts it)."""
        if self._proc is not None:
            self._collect()
        due = self._started is None or now - self._started >= self.interval_s or now < self._started
        if self._proc is None and due:
            self._start(now)
        return list(self._result)

    def close(self) -> None:
        if self._proc is not None:
            self._kill()
            self._proc = None

    def _start(self, now: float) -> None:
        self._out.clear()
        self._started = now
        self._deadline = time.monotonic() + self.timeout_s
        # Its own session, so a timeout kills what it started too; stdin closed; stderr joins stdout.
        self._proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert self._proc.stdout is not None
        os.set_blocking(self._proc.stdout.fileno(), False)

    def _collect(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        note = ""
        with contextlib.suppress(BlockingIOError):
            while len(self._out) <= MAX_OUTPUT_BYTES and (chunk := os.read(proc.stdout.fileno(), 65536)):
                self._out += chunk
        if len(self._out) > MAX_OUTPUT_BYTES:
            note = f"killed: printed more than {MAX_OUTPUT_BYTES} bytes"
            del self._out[MAX_OUTPUT_BYTES:]
        elif proc.poll() is None and time.monotonic() >= self._deadline:
            note = f"timed out after {self.timeout_s:g}s (killed)"
        elif proc.poll() is None:
            return
        if note:
            self._kill()
        code = proc.wait()
        proc.stdout.close()
        self._proc = None
        self.runs += 1
        result = judge(self.node, self.gpus, code, bytes(self._out), note=note)
        if result != self._result:
            log.warning("health command %s: %s", self.argv[0], "; ".join(h.describe() for h in result) or "healthy")
        self._result = result

    def _kill(self) -> None:
        assert self._proc is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()


class NvmlHealth:
    """NVML's view of GPUs ``gpus`` (physical indexes, by slot) of node ``node``, read at most every
    ``interval_s``. Off (no report) when pynvml or the driver is missing."""

    def __init__(self, *, node: str, gpus: Sequence[int], interval_s: float = DEFAULT_HEALTH_INTERVAL_S) -> None:
        self.node, self.gpus, self.interval_s = node, tuple(gpus), interval_s
        self._nvml: ModuleType | None = None
        self._off = False
        self._at: float | None = None
        self._result: list[NodeHealth] = []

    def read(self, now: float) -> list[NodeHealth]:
        if self._off:
            return []
        if self._at is not None and 0 <= now - self._at < self.interval_s:
            return list(self._result)
        nvml = self._nvml or self._init()
        if nvml is None:
            return []
        self._at = now
        self._result = [h for slot, phys in enumerate(self.gpus) if (h := self._gpu(nvml, slot, phys)) is not None]
        return list(self._result)

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None

    def _init(self) -> ModuleType | None:
        try:
            nvml = importlib.import_module("pynvml")
            nvml.nvmlInit()
        except Exception as e:  # no nvidia-ml-py, no driver: no NVML health (the command, if any, still runs)
            log.info("no NVML health (%s: %s)", type(e).__name__, e)
            self._off = True
            return None
        self._nvml = nvml
        return nvml

    def _gpu(self, nvml: ModuleType, slot: int, phys: int) -> NodeHealth | None:
        why: list[str] = []
        try:
            h = _call(lambda: nvml.nvmlDeviceGetHandleByIndex(phys))
            for check in (_ecc, _remap, _retired):
                try:
                    found = _call(lambda: check(nvml, h))  # noqa: B023 (called at once)
                except _Unsupported:
                    continue
                if found:
                    why.append(str(found))
        except _Gone as e:
            why.append(str(e))
        if not why:
            return None
        return NodeHealth(node=self.node, failed_gpus=(slot,), reason=f"NVML GPU {phys}: " + "; ".join(why))


class _Unsupported(RackscaleError):
    """An NVML check this GPU does not support: skipped."""


class _Gone(RackscaleError):
    """The GPU is lost or needs a reset: failed."""


def _call(fn: Callable[[], object]) -> object:
    """One NVML call, its errors sorted: lost/reset-required fail the GPU, not-supported skips the check,
    others go up (the runner counts them and the host keeps what it knew)."""
    try:
        return fn()
    except Exception as e:
        code = getattr(e, "value", None)
        if code in (NVML_GPU_IS_LOST, NVML_RESET_REQUIRED):
            raise _Gone("GPU lost (fallen off the bus)" if code == NVML_GPU_IS_LOST else "needs a reset") from e
        if code == NVML_NOT_SUPPORTED or "not supported" in str(e).lower():
            raise _Unsupported from e
        raise


def _ecc(nvml: ModuleType, h: object) -> str | None:
    n = int(nvml.nvmlDeviceGetTotalEccErrors(h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC))
    return f"{n} uncorrectable ECC error(s) since its last reset" if n > 0 else None


def _remap(nvml: ModuleType, h: object) -> str | None:
    _corr, _unc, pending, failure = nvml.nvmlDeviceGetRemappedRows(h)
    if failure:
        return "row remapping failed"
    return "row remap pending (needs a reset)" if pending else None


def _retired(nvml: ModuleType, h: object) -> str | None:
    pending = nvml.nvmlDeviceGetRetiredPagesPendingStatus(h)
    return "page retirement pending (needs a reset)" if int(pending) else None
