"""The simulated cluster (the embedded default): a job runs for its estimated time, stretched by the
performance model when its placement crosses racks, on the service clock (``--speed`` accelerates it)."""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from rackscale.backends.base import Exit, RunningJobRecord
from rackscale.model.placement import Placement
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobKind, JobSpec
from rackscale.network.collectives import Layout, ideal_step, training_step

DEFAULT_RUNTIME_S = 3600.0  # a job without a duration estimate runs an hour at its best placement


class SimBackend:
    name = "sim"

    def __init__(self, cluster: GPUCluster, *, default_runtime_s: float = DEFAULT_RUNTIME_S) -> None:
        self.cluster = cluster
        self.default_runtime_s = default_runtime_s
        self._ends: list[tuple[float, int, str]] = []  # (end, generation, job)
        self._gen: dict[str, int] = {}  # the live generation of each running job (a stopped job has none)
        self._seq = 0

    def adopt(self, running: Mapping[str, RunningJobRecord], now: float) -> list[Exit]:
        for name, rec in sorted(running.items()):
            self._track(name, rec.started + self.run_seconds(rec.spec, rec.placement))
        return self.poll(now)

    def start(self, spec: JobSpec, placement: Placement, *, now: float) -> None:
        self._track(spec.name, now + self.run_seconds(spec, placement))

    def stop(self, job: str, *, now: float) -> None:
        self._gen.pop(job, None)

    def poll(self, now: float) -> list[Exit]:
        out: list[Exit] = []
        while self._ends and self._ends[0][0] <= now:
            _, gen, job = heapq.heappop(self._ends)
            if self._gen.get(job) == gen:
                del self._gen[job]
                out.append(Exit(job, True, 0, "ran to its end (simulated)"))
        return out

    def close(self) -> None:
        self._ends.clear()
        self._gen.clear()

    def running(self) -> frozenset[str]:
        return frozenset(self._gen)

    def orphans(self) -> list[str]:
        """Nothing outlives the process: a simulated job runs in this process's memory only."""
        return []

    def run_seconds(self, spec: JobSpec, placement: Placement) -> float:
        """The estimate is for an all-NVLink placement; one that crosses racks stretches it in proportion
        to its slower step. Inference without an estimate serves until cancelled."""
        if spec.duration_estimate_s is None and spec.kind is JobKind.INFERENCE:
            return float("inf")
        base = spec.duration_estimate_s if spec.duration_estimate_s is not None else self.default_runtime_s
        if spec.kind is not JobKind.TRAINING:
            return base
        ideal = ideal_step(self.cluster, spec).total_s
        actual = training_step(self.cluster, spec, Layout.of(self.cluster, placement)).total_s
        return base * actual / max(ideal, 1e-12)

    def _track(self, job: str, end: float) -> None:
        self._seq += 1
        self._gen[job] = self._seq
        heapq.heappush(self._ends, (end, self._seq, job))
