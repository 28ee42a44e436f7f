"""Cell functions for the runner tests, at module level so that pool and Ray workers can unpickle them.

``killable``: the cell with seed 1 writes its worker's pid to ``$SWEEP_TEST_DIR/pid`` on its first
attempt and then waits (bounded) for the test to kill that process; every other run is a real cell.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from rackscale.sweep.cells import run_cell


def killable(options: dict[str, Any], trace: bytes | None) -> dict[str, Any]:
    box = Path(os.environ["SWEEP_TEST_DIR"])
    with (box / "pids").open("a") as f:  # every attempt of every cell: which process ran it
        f.write(f"{options['seed']} {os.getpid()}\n")
    if options["seed"] == 1 and not (box / "attempted").exists():
        (box / "attempted").write_text("1")
        (box / "pid").write_text(str(os.getpid()))
        time.sleep(60)  # killed by the test long before
        raise AssertionError("the test did not kill this worker")
    out = run_cell(options, trace)
    out["trace_bytes"] = None if trace is None else len(trace)
    return out
