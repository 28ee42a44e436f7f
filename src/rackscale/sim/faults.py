"""Failures: GPUs, nodes and rack uplinks fail and are repaired, with exponential times.

Each kind of part fails as a Poisson process over the whole cluster: with ``count`` parts of mean time
between failures ``mtbf_h``, the next failure is ``Exp(count / mtbf)`` away and strikes a part drawn at
random; it is repaired ``Exp(1 / mttr)`` later. Defaults are off (``mtbf_h=None``); the values commonly
quoted for large GPU fleets (e.g. Meta's Llama 3 report: a failure every ~3 h on 16k GPUs, mostly GPUs
and their memory) give ``gpu_mtbf_h`` in the tens of thousands of hours per GPU.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum


class Part(StrEnum):
    GPU = "gpu"
    NODE = "node"
    UPLINK = "uplink"


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultConfig:
    """Mean time between failures per part (hours; None = never) and mean time to repair (hours)."""

    gpu_mtbf_h: float | None = None
    node_mtbf_h: float | None = None
    uplink_mtbf_h: float | None = None
    gpu_mttr_h: float = 4.0
    node_mttr_h: float = 8.0
    uplink_mttr_h: float = 2.0
    max_restarts: int = 20  # a job that fails more often than this is given up (failed, with the reason)

    def mtbf_h(self, part: Part) -> float | None:
        return {Part.GPU: self.gpu_mtbf_h, Part.NODE: self.node_mtbf_h, Part.UPLINK: self.uplink_mtbf_h}[part]

    def mttr_h(self, part: Part) -> float:
        return {Part.GPU: self.gpu_mttr_h, Part.NODE: self.node_mttr_h, Part.UPLINK: self.uplink_mttr_h}[part]

    @property
    def enabled(self) -> bool:
        return any(self.mtbf_h(p) for p in Part)


class FaultSource:
    """Draws failure and repair times from one seeded RNG (so a replay is reproducible)."""

    def __init__(self, config: FaultConfig, *, seed: int, counts: dict[Part, int]) -> None:
        self.config = config
        self._rng = random.Random(seed ^ 0x5EED)
        self._counts = counts

    def next_failure_in(self, part: Part) -> float | None:
        mtbf = self.config.mtbf_h(part)
        count = self._counts.get(part, 0)
        if not mtbf or count <= 0:
            return None
        return self._rng.expovariate(count / (mtbf * 3600.0))

    def repair_in(self, part: Part) -> float:
        return self._rng.expovariate(1.0 / (self.config.mttr_h(part) * 3600.0))

    def pick(self, n: int) -> int:
        return self._rng.randrange(n)
