"""The service clock: wall time, optionally accelerated (``--speed``), monotonic across restarts."""

from __future__ import annotations

import time


class ServiceClock:
    """``now()`` = ``origin + (wall - wall_origin) * speed``. Seconds; with speed 1 it is Unix time."""

    def __init__(self, *, speed: float = 1.0, resume_from: float | None = None) -> None:
        if speed <= 0:
            raise ValueError("speed must be > 0")
        self.speed = speed
        self._wall0 = time.time()
        # After a restart the clock continues from the last time the store saw, never going back.
        self._origin = max(self._wall0, resume_from) if resume_from is not None else self._wall0

    def now(self) -> float:
        return self._origin + (time.time() - self._wall0) * self.speed
