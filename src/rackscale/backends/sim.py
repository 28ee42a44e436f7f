"""The simulated cluster (the embedded default): jobs run on the host's performance model
(:class:`rackscale.host.progress.Progress`), the simulator's own, on the service clock (``--speed``
accelerates it). A training job's speed depends on its placement and on the contention of the cross-rack
jobs it shares uplinks with, so it ends when the simulator would have ended it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping

from rackscale.backends.base import Exit, RunningJobRecord
from rackscale.host.kpis import KpiAccumulator
from rackscale.host.progress import Progress
from rackscale.host.runs import JobRun, RunStatus, RuntimeDefaults
from rackscale.model.placement import Placement
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobSpec


class SimBackend:
    name = "sim"

    def __init__(self, cluster: GPUCluster, *, defaults: RuntimeDefaults | None = None) -> None:
        self.cluster = cluster
        self._runs: dict[str, JobRun] = {}  # the jobs running here
        # (end, start number, generation, job): an end is due only if the job is still the same start of it
        # (a job preempted and started again is a new start) and was not re-timed since.
        self._ends: list[tuple[float, int, int, str]] = []
        self._start_of: dict[str, int] = {}
        self._starts = 0
        self.progress = Progress(
            cluster, runs=self._runs, kpi=KpiAccumulator(), on_end=self._announce, defaults=defaults
        )

    def adopt(self, running: Mapping[str, RunningJobRecord], now: float) -> list[Exit]:
        # What runs here already is stopped first (a replica that led before and leads again: the store says
        # what runs now, as for a new process); adopting a job twice would put its traffic on the network twice.
        for job in sorted(self._runs):
            self.stop(job, now=now)
        for _, rec in sorted(running.items()):
            self._begin(rec.spec, rec.placement, rec.started)
        return self.poll(now)

    def start(self, spec: JobSpec, placement: Placement, *, now: float) -> None:
        self._begin(spec, placement, now)

    def stop(self, job: str, *, now: float) -> None:
        r = self._runs.pop(job, None)
        self._start_of.pop(job, None)
        if r is not None:
            r.status = RunStatus.STOPPED
            self.progress.detach(r, now)

    def resize(self, spec: JobSpec, placement: Placement, *, now: float) -> None:
        """An elastic gang's new size: its run goes on from where it got, on the host's performance model
        (``Progress.resize``: the same restart cost the host charges), as a new start of it."""
        r = self._runs.get(spec.name)
        if r is None:
            self._begin(spec, placement, now)
            return
        self._starts += 1
        self._start_of[spec.name] = self._starts
        self.progress.resize(r, placement, now)

    def poll(self, now: float) -> list[Exit]:
        out: list[Exit] = []
        while self._ends and self._ends[0][0] <= now:
            end, start, gen, job = heapq.heappop(self._ends)
            r = self._runs.get(job)
            if r is None or self._start_of[job] != start or r.generation != gen:
                continue  # stopped, or re-timed since
            self.progress.advance(r, end)
            del self._runs[job]
            del self._start_of[job]
            r.status = RunStatus.COMPLETED
            self.progress.detach(r, end)  # its neighbours speed up from its end, not from the poll
            out.append(Exit(job, True, 0, "ran to its end (simulated)"))
        return out

    def next_end(self) -> float | None:
        """When the next running job ends (None: none will), for a caller that steps the clock by hand."""
        while self._ends:
            end, start, gen, job = self._ends[0]
            r = self._runs.get(job)
            if r is not None and self._start_of[job] == start and r.generation == gen:
                return end
            heapq.heappop(self._ends)
        return None

    def close(self) -> None:
        self._ends.clear()
        self._runs.clear()
        self._start_of.clear()

    def running(self) -> frozenset[str]:
        return frozenset(self._runs)

    def orphans(self) -> list[str]:
        """Nothing outlives the process: a simulated job runs in this process's memory only."""
        return []

    def _begin(self, spec: JobSpec, placement: Placement, start: float) -> None:
        r = JobRun(spec, self.progress.work_of(spec), status=RunStatus.RUNNING, run_start=start, since=start)
        self._starts += 1
        self._start_of[spec.name] = self._starts
        self._runs[spec.name] = r
        self.progress.place(r, placement)
        self.progress.attach(r, placement)
        self.progress.set_rate(r, start)
        if r.traffic is not None and r.traffic.inter_rack > 0:
            self.progress.refresh_neighbours(r, start)

    def _announce(self, job: str, end: float, generation: int) -> None:
        if math.isfinite(end):  # a service without an estimate serves until stopped
            heapq.heappush(self._ends, (end, self._start_of[job], generation, job))
