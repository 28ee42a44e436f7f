"""Benchmark targets that end their process without a result, for tests of ``run_isolated`` (imported in its
child process by ``module:function``)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any


def killed(config: dict[str, Any], progress: Callable[..., None]) -> dict[str, Any]:
    progress(1, 2)
    os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's out-of-memory killer does
    return config


def raises(config: dict[str, Any], progress: Callable[..., None]) -> dict[str, Any]:
    raise MemoryError("a run too large for this machine")
