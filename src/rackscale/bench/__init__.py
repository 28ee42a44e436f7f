"""Benchmarks of the scheduling core, and the harness they share.

Benchmarks read clocks and start processes, so they live at the edge (the pure core never imports them).
The harness runs one configuration in a fresh Python process, so that its peak RSS is its own: the child
calls ``module:function(config, progress)`` and streams JSON lines (progress, then the result) on stdout.
The benchmarks themselves live in submodules, e.g. :mod:`rackscale.bench.placement`.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import platform
import resource
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rackscale.model.errors import RackscaleError

Result = dict[str, Any]
ChildProgress = Callable[..., None]  # called in the child with JSON-serialisable positional values


def percentile(values: Sequence[int], p: float) -> float | None:
    """Nearest-rank percentile of nanosecond samples, in microseconds (``None`` without samples)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] / 1_000


def peak_rss_mb() -> float:
    """This process's peak resident set size, in MiB."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu_model": platform.processor() or None,
    }
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            info["cpu_model"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        pass
    try:
        import psutil  # the optional 'bench' extra

        info["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    return info


def child_main() -> None:
    """Entry point of the child process: ``module:function`` and the config (JSON) in argv."""

    def emit(obj: object) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    module, _, name = sys.argv[1].partition(":")
    fn = getattr(importlib.import_module(module), name)
    emit({"result": fn(json.loads(sys.argv[2]), lambda *values: emit({"progress": list(values)}))})


def run_isolated(target: str, config: Result, *, progress: Callable[[list[Any]], None] | None = None) -> Result:
    """Run ``target`` (``"module:function"``) on ``config`` in a fresh Python process; its result."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])  # the directory holding the rackscale package
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-c", "from rackscale.bench import child_main; child_main()", target, json.dumps(config)]
    result: Result | None = None
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                msg = json.loads(line)
                if "result" in msg:
                    result = msg["result"]
                elif progress is not None:
                    progress(msg["progress"])
        except BaseException:
            proc.kill()
            raise
    if proc.returncode != 0 or result is None:
        raise BenchRunError(target=target, returncode=proc.returncode)
    return result


class BenchRunError(RackscaleError, RuntimeError):
    """A benchmark's own process ended without its result (a bug, memory run out, a signal): its traceback,
    if it wrote one, is on stderr above; the verb says this in one line."""

    def __init__(self, *, target: str, returncode: int | None) -> None:
        self.target, self.returncode = target, returncode
        how = (
            f"was killed by signal {-returncode}"
            if returncode is not None and returncode < 0
            else (f"exited with code {returncode}")
        )
        super().__init__(
            f"a benchmark run ({target.rpartition(':')[2]}) {how} without its result; its own error, if it wrote "
            "one, is above (a signal 9 is often the kernel's out-of-memory killer: try a smaller size)"
        )


__all__ = [
    "BenchRunError",
    "ChildProgress",
    "Result",
    "child_main",
    "machine_info",
    "peak_rss_mb",
    "percentile",
    "run_isolated",
]
