"""Small sweep documents and a pid watcher shared by the sweep tests."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

TINY = {"racks": 1, "jobs": 30, "duration_h": 2.0}  # ~0.2 s per cell


def doc(grid: dict[str, Any] | None = None, base: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"base": dict(TINY if base is None else base)}
    if grid is not None:
        body["grid"] = grid
    body.update(spec)
    return {"apiVersion": "rackscale.io/v1", "kind": "Sweep", "metadata": {"name": "t"}, "spec": body}


def kill_when_written(pid_file: Path, *, timeout_s: float = 60.0) -> threading.Thread:
    """A thread that SIGKILLs the process whose pid appears in ``pid_file`` (the worker that runs the cell)."""

    def watch() -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if pid_file.exists() and pid_file.read_text().strip():
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
                return
            time.sleep(0.05)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t
