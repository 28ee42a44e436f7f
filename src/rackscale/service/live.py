"""The live cluster: the simulator's scheduler, driven by whatever clock the caller passes as ``now``.

No I/O here. The service's runner feeds it submissions, cancellations and the exits its backend saw, runs a
cycle, persists the :class:`Change` values it returns, and only then acts on them (start, stop). The cycle
choice (full, or only the jobs queued since) is the simulator's :class:`~rackscale.scheduler.cycles.CycleDriver`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rackscale.model.placement import Placement
from rackscale.model.state import ClusterState
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.model.workload import JobKind, JobSpec
from rackscale.network.collectives import Layout, training_step
from rackscale.network.monitor import NetworkMonitor
from rackscale.scheduler import Code, Decisions, PendingQueue, ResourceScheduler, Status, apply_decisions
from rackscale.scheduler.cycles import CycleDriver
from rackscale.sim.kpis import KpiAccumulator

# What a Change can say about a job; each becomes a row in the job's event log.
SCHEDULED, PREEMPTED, COMPLETED, FAILED, CANCELLED, WAITING = (
    "scheduled",
    "preempted",
    "completed",
    "failed",
    "cancelled",
    "waiting",
)


@dataclass(frozen=True, slots=True)
class Change:
    """One thing that happened to a job. ``waiting`` carries a new pending reason (no status change).
    ``run``: the store's run of the job it was decided for (0: whichever run of the name is active); the
    runner sets it, so a change never lands on a newer run of a reused name."""

    job: str
    type: str
    time: float
    reason: str = ""
    message: str = ""
    placement: Placement | None = None
    exit_code: int | None = None
    run: int = 0


@dataclass(slots=True)
class LiveCounters:
    """What the runner did, counted for the API and Prometheus. GPU-seconds and bytes are in the
    simulator's KpiAccumulator (``LiveCluster.kpi``), so the KPIs have one definition everywhere."""

    cycles: int = 0
    preemption_victims: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    attempts: Counter[str] | None = None

    def __post_init__(self) -> None:
        self.attempts = Counter()


class LiveCluster:
    """Jobs queued or running, the cluster state, and the network they load."""

    def __init__(self, cluster: GPUCluster, *, policy: str = "rackscale", seed: int = 0) -> None:
        self.cluster = cluster
        self.state = ClusterState(cluster)
        self.sched = ResourceScheduler(profile=policy, seed=seed)
        self.monitor = NetworkMonitor(cluster)
        self.pending = PendingQueue()
        self.cycles = CycleDriver()
        self.specs: dict[str, JobSpec] = {}  # every job queued or running
        self.why: dict[str, Status] = {}  # the latest reason each queued job waits
        self.counters = LiveCounters()
        self.kpi = KpiAccumulator()  # GPU-seconds and bytes, as the simulator accounts them (DESIGN section 5)
        self.waiting_milli = 0
        self._unexplained: set[str] = set()  # queued jobs no cycle has given a reason yet
        self._last: float | None = None

    # ------------------------------------------------------------------ inputs
    def submit(self, spec: JobSpec) -> None:
        if spec.name in self.specs:
            raise ValueError(f"job {spec.name!r} is already queued or running")
        self.specs[spec.name] = spec
        self._enqueue(spec)

    def restore(self, spec: JobSpec, placement: Placement, *, started: float, now: float) -> None:
        """Put a job the store says is running back on its placement (after a restart)."""
        self.specs[spec.name] = spec
        self.state.allocate(spec, placement, now=started, expected_end=_expected_end(spec, started))
        self.monitor.add_job(spec, placement, steps_per_s=steps_per_s(self.cluster, spec, placement))

    def cancel(self, name: str, now: float) -> Change | None:
        if name not in self.specs:
            return None
        self._forget(name)
        self.counters.cancelled += 1
        return Change(name, CANCELLED, now, "Cancelled", "cancelled by a user")

    def exited(self, name: str, now: float, *, ok: bool, exit_code: int | None, reason: str) -> Change | None:
        """The backend saw a running job end."""
        if name not in self.state.running:
            return None
        self._forget(name)
        if ok:
            self.counters.completed += 1
            return Change(name, COMPLETED, now, "Completed", reason or "finished", exit_code=exit_code)
        self.counters.failed += 1
        return Change(name, FAILED, now, "BackendFailed", reason or "the job failed", exit_code=exit_code)

    # ------------------------------------------------------------------ the cycle
    def cycle(self, now: float) -> list[Change]:
        d = self.cycles.run(self.sched, self.state, self.pending, now)
        if d is None:
            return []
        self.counters.cycles += 1
        return self._apply(d, now)

    def _apply(self, d: Decisions, now: float) -> list[Change]:
        out: list[Change] = []
        attempts = self.counters.attempts
        assert attempts is not None
        for pre in d.preemptions:
            spec = self.specs[pre.victim]
            if pre.victim in self.monitor:
                self.monitor.remove_job(pre.victim)
            self.counters.preemption_victims += 1
            message = self._preempted_by(spec, pre.preemptor, pre.reason)
            out.append(Change(pre.victim, PREEMPTED, now, "Preempted", message))
            self._enqueue(spec)
        apply_decisions(self.state, d, now=now)
        for p in d.placed:
            name = p.spec.name
            self._dequeue(name)
            self.why.pop(name, None)
            self._unexplained.discard(name)
            attempts["scheduled"] += 1
            if p.scale_up:
                continue
            self.monitor.add_job(p.spec, p.placement, steps_per_s=steps_per_s(self.cluster, p.spec, p.placement))
            how = "backfilled" if p.backfilled else "placed"
            out.append(
                Change(name, SCHEDULED, now, "Scheduled", f"{how} on {_where(self.cluster, p.placement)}", p.placement)
            )
        for w in d.pending:
            name = w.spec.name
            if w.status.code is Code.UNRESOLVABLE and name not in self.state.running:
                attempts["unschedulable"] += 1
                self._forget(name)
                self.counters.failed += 1
                out.append(Change(name, FAILED, now, w.status.reason.value, w.status.message))
                continue
            attempts["unschedulable"] += 1
            self._explain(name, w.status, now, out)
        # Jobs the cycle skipped (nothing of their shape could fit) share one status; give it to the ones
        # that have no reason yet, so every waiting job says why.
        if d.not_examined_status is not None:
            for name in list(self._unexplained):
                if name in self.pending:
                    self._explain(name, d.not_examined_status, now, out)
        return out

    def _preempted_by(self, victim: JobSpec, preemptor: str, reason: str) -> str:
        """The victim's event: the preemptor is named only within one queue (its owner may see it); another
        tenant's job is never named to the victim's owner."""
        other = self.specs.get(preemptor)
        who = f"job {preemptor!r}" if other is not None and other.queue == victim.queue else "a job of another queue"
        return f"preempted by {who} ({reason})"

    def _explain(self, name: str, status: Status, now: float, out: list[Change]) -> None:
        """Keep the latest reason in memory (the API shows it). Only a job's first reason is a change, which
        is persisted and logged: later ones move with every cycle (messages carry times and counts, and a
        reservation coming or going flips thousands of jobs at once), too often to write down each."""
        self._unexplained.discard(name)
        first = name not in self.why
        self.why[name] = status
        if first:
            out.append(Change(name, WAITING, now, status.reason.value, status.message))

    # ------------------------------------------------------------------ accounting
    def account(self, now: float) -> None:
        """Add the interval since the last call to the cumulative counters (DESIGN section 5)."""
        last, self._last = self._last, now
        if last is None or now <= last:
            return
        dt = now - last
        self.kpi.interval(
            dt=dt,
            healthy=self.cluster.total_gpus - self.state.failed_gpus_count,
            allocated=self.state.used_milli / MILLI_PER_GPU,
            waiting_demand=self.waiting_milli / MILLI_PER_GPU,
        )
        totals = self.monitor.totals()
        self.kpi.bytes_nvlink += totals.nvlink_bytes_per_s * dt
        self.kpi.bytes_rdma += totals.rdma_bytes_per_s * dt
        self.kpi.bytes_backbone += totals.backbone_bytes_per_s * dt

    # ------------------------------------------------------------------ internals
    def _enqueue(self, spec: JobSpec) -> None:
        self.pending.add(spec)
        self.waiting_milli += spec.unit.gpu_demand_milli * spec.required_units
        self.cycles.arrived(spec.name)
        self._unexplained.add(spec.name)

    def _dequeue(self, name: str) -> None:
        spec = self.pending.get(name)
        if spec is not None:
            self.pending.remove(name)
            self.waiting_milli -= spec.unit.gpu_demand_milli * spec.required_units

    def _forget(self, name: str) -> None:
        """Drop a job from the queue or the cluster (cancelled, finished or failed)."""
        self._dequeue(name)
        self.why.pop(name, None)
        self._unexplained.discard(name)
        self.specs.pop(name, None)
        if name in self.state.running:
            self.state.release(name)
            self.cycles.freed = True
        if name in self.monitor:
            self.monitor.remove_job(name)


def _expected_end(spec: JobSpec, start: float) -> float | None:
    return start + spec.duration_estimate_s if spec.duration_estimate_s is not None else None


def steps_per_s(cluster: GPUCluster, spec: JobSpec, placement: Placement) -> float:
    """Uncontended steps per second at this placement (the simulator's performance model)."""
    if spec.kind is JobKind.TRAINING:
        return 1.0 / max(training_step(cluster, spec, Layout.of(cluster, placement)).total_s, 1e-9)
    return 1.0 / max(spec.comm.compute_s_per_step, 1e-9)


def _where(cluster: GPUCluster, placement: Placement) -> str:
    racks = sorted({cluster.racks[cluster.nodes[a.node].rack].name for a in placement.allocs})
    shown = ", ".join(racks[:4]) + (f" and {len(racks) - 4} more" if len(racks) > 4 else "")
    return f"{len(placement.allocs)} node(s) in rack(s) {shown}"
