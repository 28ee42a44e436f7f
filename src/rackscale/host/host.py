"""The host: one cluster's state, its pending queue, the network it loads, the KPIs, and the application of
the scheduler's decisions — the same code under the simulator's virtual clock and the service's wall clock.

No I/O and no clock: every call takes ``now``. What differs between the two clocks is only who calls:
- the simulator (:mod:`rackscale.sim.simulator`) calls :meth:`ClusterHost.submit` at each arrival event,
  :meth:`finish` when the performance model's announced end comes, and runs :meth:`cycle` once per
  instant; it reads the job runs at the end.
- the service's runner (:mod:`rackscale.service.runner`) calls :meth:`submit` and :meth:`cancel` for what
  the API took, :meth:`finish` for the exits its backend saw, and :meth:`cycle` every step; it persists the
  :class:`Change` values they return, then starts and stops work on the backend.

Every running job's progress is modelled (:class:`rackscale.host.progress.Progress`): the simulator needs
it to know when a job ends, and both need it for the bytes each tier carried (the intra-rack share).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from rackscale.host.changes import Change, ChangeKind
from rackscale.host.drains import DrainsMixin
from rackscale.host.kpis import KpiAccumulator
from rackscale.host.parts import PartsMixin
from rackscale.host.perf import samples_per_step
from rackscale.host.predicted import PredictionRatios
from rackscale.host.progress import BytesMoved, EndSink, Progress, ignore_ends
from rackscale.host.runs import Estimates, JobRun, RunStatus, RuntimeDefaults
from rackscale.host.scaling_host import ScalingMixin
from rackscale.host.serve_batch import ServeBatch
from rackscale.host.services import ServicesMixin
from rackscale.llm.jobs import LlmJobError, elastic_llm
from rackscale.model.placement import Placement
from rackscale.model.state import ClusterState
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.model.workload import JobKind, JobSpec
from rackscale.scheduler import (
    Code,
    Decisions,
    PendingQueue,
    PreemptionCause,
    Reason,
    ResourceScheduler,
    Status,
    apply_decisions,
)
from rackscale.scheduler.cycles import CycleDriver
from rackscale.scheduler.framework import AttainedService, Profile
from rackscale.scheduler.pending import fewest_units
from rackscale.scheduler.predictor import GroupLevel, Prediction, RuntimePredictor
from rackscale.scheduler.status import duration_words


@dataclass(frozen=True, slots=True, kw_only=True)
class HostOptions:
    """What differs between the simulator's host and the service's, beyond the clock.

    - ``explain``: keep each waiting job's latest reason and report its first one as a WAITING change (the
      service shows them; a simulation of a million jobs would only pay for them).
    - ``keep_ended``: keep the runs of ended jobs (the simulator's result; the service's store has them).
    - ``max_restarts``: a job stopped more often than this (preempted, a failed part) fails; None: never.
    - ``batch_serving``: the services' accounting of many consecutive instants is added in one numpy pass
      (``host/serve_batch.py``); the serving KPIs lag until ``flush_serving`` (the simulator's, which reads
      its KPIs once, at the end; the service reads them live).
    - ``services_start_at_model``: a service whose replicas follow its model starts at the replicas the
      model asks for at that instant (``ServicesMixin._start_request``; the simulator's, whose autoscaler
      follows the model at every tick); otherwise at its ``replicas``, as a Deployment does.
    """

    explain: bool = True
    keep_ended: bool = False
    estimates: Estimates = Estimates.GIVEN
    max_restarts: int | None = None
    defaults: RuntimeDefaults = field(default_factory=RuntimeDefaults)
    batch_serving: bool = False
    services_start_at_model: bool = False


class ClusterHost(DrainsMixin, PartsMixin, ServicesMixin, ScalingMixin):
    def __init__(
        self,
        cluster: GPUCluster,
        *,
        policy: str | Profile = "rackscale",
        seed: int = 0,
        options: HostOptions | None = None,
        on_end: EndSink = ignore_ends,
    ) -> None:
        self.options = options or HostOptions()
        # Learns from the jobs that complete; fills the estimates the scheduler plans with (``Estimates``).
        self.predictor = RuntimePredictor()
        self.cluster = cluster
        self.state = ClusterState(cluster)
        self.sched = ResourceScheduler(profile=policy, seed=seed)
        self.policy = self.sched.profile.name
        self.pending = PendingQueue(elastic=self.sched.profile.elastic)
        self.cycles = CycleDriver()  # what the next cycle must look at (everything, or the jobs queued since)
        self.kpi = KpiAccumulator()
        self.runs: dict[str, JobRun] = {}  # every job queued or running (and ended ones, with keep_ended)
        self.specs: dict[str, JobSpec] = {}  # every job queued or running
        # Service of the earlier runs of every queued or running job that ran before (least attained service
        # reads it): replaced when a run stops or starts, passed to each cycle as it is.
        self.attained: dict[str, AttainedService] = {}
        self.progress = Progress(cluster, runs=self.runs, kpi=self.kpi, on_end=on_end, defaults=self.options.defaults)
        self.monitor = self.progress.monitor
        self.waiting_milli = 0  # GPU demand of the queued jobs (for the idle rate)
        self._rack_gpus = max(r.gpus for r in cluster.racks)  # the largest NVLink domain (locality KPIs)
        self.serving_jobs: set[str] = set()  # running services (the per-instant accounting visits only these)
        self.why: dict[str, Status] = {}  # the latest reason each queued job waits (with ``explain``)
        self._held: list[Change] = []  # what happened outside a cycle (a job failed on arrival): the next one says it
        self.attempts: Counter[str] = Counter()  # jobs looked at by cycles, by result
        self.preempted_by: Counter[PreemptionCause] = Counter()  # jobs stopped for others, by mechanism
        self.ended = 0  # jobs completed, failed or cancelled
        self._unexplained: set[str] = set()  # queued jobs no cycle has given a reason yet
        self._predicted: dict[str, Prediction] = {}  # queued or running jobs planned with history's estimate
        self.prediction_ratios = PredictionRatios()  # completed jobs of those: their run over the prediction
        self._holder: str | None = None  # the job the last cycle's reservation was for (its reason says so)
        self._last: float | None = None
        if self.options.batch_serving:
            self._serve_batch = ServeBatch()

    # ------------------------------------------------------------------ inputs
    def submit(self, spec: JobSpec) -> JobRun:
        """A job arrives and waits."""
        if spec.name in self.specs:
            raise ValueError(f"job {spec.name!r} is already queued or running")
        try:
            spec = self._elastic_llm(spec)
            work = self.progress.work_of(spec)
        except LlmJobError as err:  # its model cannot run on this cluster: the job fails, the others go on
            r = JobRun(spec, 0.0)
            self.runs[spec.name] = r
            self.specs[spec.name] = spec
            self._fail(r, str(err), spec.submit_time)
            self._held.append(Change(spec.name, ChangeKind.FAILED, spec.submit_time, "Unrunnable", str(err)))
            return r
        spec = self._planned(spec)  # after work_of: the work is the job's own (in the simulator, the truth)
        r = JobRun(spec, work)
        self.runs[spec.name] = r
        self.specs[spec.name] = spec
        self._enqueue(self._start_request(r, spec.submit_time))
        return r

    def _elastic_llm(self, spec: JobSpec) -> JobSpec:
        """An elastic LLM gang resizes in whole data-parallel ranks: its shard is fixed at admission
        (``elastic_llm``), where the profile resizes gangs. A profile that runs every gang at its size runs it
        as the fixed job it asked for, its plan chosen for each placement like any LLM job's."""
        return elastic_llm(self.cluster, spec) if self.sched.profile.elastic else spec

    def restore(self, spec: JobSpec, placement: Placement, *, started: float, now: float) -> None:
        """Put a job the store says is running back on its placement (after a restart): it goes on from
        ``now`` at its modelled speed."""
        spec = self._elastic_llm(spec)  # (as it was admitted: the same plan on the same cluster)
        work = self.progress.work_of(spec)
        spec = self._planned(spec)
        r = JobRun(spec, work, status=RunStatus.RUNNING, run_start=started, since=now, first_start=started)
        self.state.allocate(spec, placement, now=started, expected_end=_expected_end(spec, started))
        self.runs[spec.name] = r
        self.specs[spec.name] = spec
        self._run_on(r, placement, now)

    def finish(
        self, name: str, now: float, *, ok: bool = True, exit_code: int | None = None, reason: str = ""
    ) -> Change | None:
        """A running job ended: completed (its work is done, or its backend says it exited 0), or failed."""
        r = self.runs.get(name)
        if r is None or r.status is not RunStatus.RUNNING:
            return None
        self.progress.advance(r, now)
        if not ok:
            why = reason or "the job failed"
            self._fail(r, why, now)
            return Change(name, ChangeKind.FAILED, now, "BackendFailed", why, exit_code=exit_code)
        self._stop(r, now)
        self._dequeue(name)  # a service's scale-up still waiting: nothing is left to scale
        # Completed jobs only: a failed or cancelled run says nothing of how long the job needs.
        ran = self.attained.get(name)
        run_s = ran.run_s if ran is not None else now - r.run_start
        self.predictor.observe(r.spec, runtime_s=run_s)
        if (pred := self._predicted.get(name)) is not None:
            self.prediction_ratios.observe(run_s=run_s, predicted_s=pred.estimate_s)
        r.status, r.end = RunStatus.COMPLETED, now
        self._ended(r)
        self.kpi.finished(r.spec.kind, jct=now - r.spec.submit_time)
        if r.spec.kind is JobKind.TRAINING and r.layout is not None:
            # An elastic gang keeps the global batch of the size it asked for, whatever it ran on.
            gpus = r.spec.total_gpus if r.spec.is_elastic else r.layout.gpus
            self.kpi.samples += r.work * samples_per_step(r.spec, gpus)
        return Change(name, ChangeKind.COMPLETED, now, "Completed", reason or "finished", exit_code=exit_code)

    def cancel(self, name: str, now: float) -> Change | None:
        r = self.runs.get(name)
        if r is None or r.status.ended:
            return None
        if r.status is RunStatus.RUNNING:
            self.progress.advance(r, now)
            self._stop(r, now)
        self._dequeue(name)
        r.status, r.reason, r.end = RunStatus.CANCELLED, "cancelled by a user", now
        self.kpi.cancelled += 1
        self._ended(r)
        return Change(name, ChangeKind.CANCELLED, now, "Cancelled", "cancelled by a user")

    # ------------------------------------------------------------------ the cycle
    def cycle(self, now: float) -> list[Change]:
        """Run this instant's scheduling cycle (if anything could newly fit) and apply its decisions."""
        held, self._held = self._held + self.drains_due(now), []  # drains whose grace ran out stop first
        d = self.cycles.run(self.sched, self.state, self.pending, now, attained=self.attained)
        return held if d is None else held + self.apply(d, now)

    def apply(self, d: Decisions, now: float) -> list[Change]:
        out: list[Change] = []
        self.kpi.cycles += 1
        for pre in d.preemptions:
            r = self.runs[pre.victim]
            self.progress.advance(r, now)
            self.progress.lose_since_checkpoint(r, now, gpus=self._gpus_of(r), told=True)
            self._stop(r, now, release=False)  # apply_decisions releases it from the state
            self.kpi.preemptions += 1
            self.preempted_by[pre.cause] += 1
            out.append(
                Change(
                    pre.victim,
                    ChangeKind.PREEMPTED,
                    now,
                    "Preempted",
                    self._preempted_by(r.spec, pre.preemptor, pre.reason),
                )
            )
            self._requeue(r, now, why="preempted")
        apply_decisions(self.state, d, now=now)
        for z in d.resized:
            self.progress.resize(self.runs[z.spec.name], z.placement, now)
            self.kpi.resizes += 1
            self.cycles.freed = True  # a shrink may leave GPUs free for the next cycle
            where = _where(self.cluster, z.placement)
            out.append(Change(z.spec.name, ChangeKind.RESIZED, now, "Resized", f"{z.reason}; on {where}", z.placement))
        for p in d.placed:
            name = p.spec.name
            run = self.runs.get(name)
            if run is None or run.status.ended:
                # A job moved by consolidation that its stop made give up (``max_restarts``): not started.
                if name in self.state.running:
                    self.state.release(name)
                continue
            r = run
            self._dequeue(name)
            self.attempts["scheduled"] += 1
            if p.scale_up:
                self._rescale(r, now)
                continue
            self._start_run(r, p.placement, now)
            how = "moved (consolidation)" if p.moved else "backfilled" if p.backfilled else "placed"
            if p.placement.opportunistic:
                how = "backfilled on loan (GPUs reserved for a waiting job; stopped when it can start)"
            where = (
                _where(self.cluster, p.placement)
                + _smaller(r.spec, p.placement)
                + _planned_with(self._predicted.get(name))
            )
            out.append(Change(name, ChangeKind.SCHEDULED, now, "Scheduled", f"{how} on {where}", p.placement))
        for w in d.pending:
            name = w.spec.name
            self.attempts["unschedulable"] += 1
            if w.status.code is Code.UNRESOLVABLE and name not in self.state.running:
                self._dequeue(name)
                self._fail(self.runs[name], f"{w.status.reason.value}: {w.status.message}", now)
                out.append(Change(name, ChangeKind.FAILED, now, w.status.reason.value, w.status.message))
            elif self.options.explain:
                self._explain(name, w.status, now, out)
        # Jobs the cycle skipped (nothing of their shape could fit) share one status; give it to the ones
        # that have no reason yet, so every waiting job says why.
        if self.options.explain and d.not_examined_status is not None:
            for name in sorted(self._unexplained):
                if name in self.pending:
                    self._explain(name, d.not_examined_status, now, out)
        if self.options.explain:
            self._lost_reservation(d, now, out)
        return out

    def _lost_reservation(self, d: Decisions, now: float, out: list[Change]) -> None:
        """A job whose reason says racks are reserved for it, when the reservation went to another job and
        this cycle did not look at it (it stopped before: nothing of its shape could fit), would keep saying
        so: it is told the cycle's reason for the jobs it did not examine instead."""
        holder = d.reservation.job if d.reservation is not None else None
        old, self._holder = self._holder, holder
        if old is None or old == holder or old not in self.pending:
            return
        if any(w.spec.name == old for w in d.pending):
            return  # examined: its reason is this cycle's
        self._explain(old, d.not_examined_status or _RESERVATION_LOST, now, out)

    # ------------------------------------------------------------------ accounting
    def account(self, now: float) -> None:
        """Add the interval since the last call to the KPIs (DESIGN section 5), at the state it had."""
        last, self._last = self._last, now
        if last is None or now <= last:
            return
        dt = now - last
        # Failed GPUs, and cordoned ones no job holds, are out of service: neither available nor idle.
        healthy = self.cluster.total_gpus - self.state.failed_gpus_count - self.state.cordoned_idle_count
        allocated = self.state.used_milli / MILLI_PER_GPU
        self.kpi.interval(
            dt=dt,
            healthy=healthy,
            allocated=allocated,
            waiting_demand=self.waiting_milli / MILLI_PER_GPU,
            # Could the smallest waiting job have started on the free GPUs (by count)? Else the idle GPUs
            # wait for a gang to drain them.
            smallest_fits=bool(self.pending) and self.pending.min_whole_demand() <= healthy - allocated,
        )
        self._serve(dt, (now + last) / 2)

    def bytes_moved(self, now: float) -> BytesMoved:
        """Bytes per tier so far, including the running jobs' since their last update (no state changes)."""
        running = self.state.running
        return self.progress.bytes_moved(now, (self.runs[n] for n in self.progress.movers if n in running))

    # ------------------------------------------------------------------ failures of parts
    def stop_hit(self, names: set[str], now: float, *, why: str) -> None:
        """Jobs that lost GPUs to a failed part (already released from the state): back to the queue."""
        for name in sorted(names):
            r = self.runs[name]
            self.progress.advance(r, now)
            self.progress.lose_since_checkpoint(r, now, gpus=self._gpus_of(r))
            self._stop(r, now)
            self._requeue(r, now, why=why)

    # ------------------------------------------------------------------ internals
    def _planned(self, spec: JobSpec) -> JobSpec:
        """The spec with the duration estimate the scheduler plans with (see :class:`Estimates`)."""
        how = self.options.estimates
        if how is Estimates.GIVEN and spec.duration_estimate_s is not None:
            return spec
        if how is Estimates.NONE:
            return spec if spec.duration_estimate_s is None else replace(spec, duration_estimate_s=None)
        pred = self.predictor.predict(spec)
        guess = pred.estimate_s if pred is not None else None
        if pred is not None and self.options.explain:
            self._predicted[spec.name] = pred  # (its Scheduled event says what it is planned with, and whence)
        return spec if guess == spec.duration_estimate_s else replace(spec, duration_estimate_s=guess)

    def _start_run(self, r: JobRun, placement: Placement, now: float) -> None:
        spec = r.spec
        r.status, r.run_start, r.since = RunStatus.RUNNING, now, now
        if r.first_start is None:
            r.first_start = now
            self.kpi.started(spec.kind, wait=now - spec.submit_time)
        elif (svc := self.attained.get(spec.name)) is not None:
            self.attained[spec.name] = svc.restarted(now)
        self._run_on(r, placement, now)

    def _run_on(self, r: JobRun, placement: Placement, now: float) -> None:
        self.progress.place(r, placement)
        assert r.layout is not None
        if r.spec.kind is JobKind.TRAINING and r.layout.gpus > 1:
            # A gang that fits one rack counts for the single-rack share; a larger one cannot be in one
            # rack, so it counts for the share placed in the fewest racks it could take.
            fewest = -(-r.layout.gpus // self._rack_gpus)
            if fewest == 1:
                self.kpi.multi_gpu_starts += 1
                self.kpi.single_rack_starts += r.layout.racks == 1
            else:
                self.kpi.multi_rack_starts += 1
                self.kpi.fewest_racks_starts += r.layout.racks == fewest
        self.progress.attach(r, placement)
        if r.spec.kind is JobKind.INFERENCE:
            self.serving_jobs.add(r.spec.name)
            self._rescale(r, now)
        self.progress.set_rate(r, now)
        if r.traffic is not None and r.traffic.inter_rack > 0:
            self.progress.refresh_neighbours(r, now)

    def _stop(self, r: JobRun, now: float, *, release: bool = True) -> None:
        name = r.spec.name
        svc = self.attained.get(name, AttainedService())
        self.attained[name] = svc.after_run(started=r.run_start, now=now, gpus=self._gpus_of(r))
        if release and name in self.state.running:
            self.state.release(name)
            self.cycles.freed = True
        self.progress.detach(r, now)
        self.serving_jobs.discard(name)
        r.status = RunStatus.STOPPED
        r.generation += 1

    def _gpus_of(self, r: JobRun) -> float:
        rj = self.state.running.get(r.spec.name)
        if rj is not None:
            return rj.placement.gpu_milli / MILLI_PER_GPU
        return r.layout.gpus if r.layout else 0

    def _requeue(self, r: JobRun, now: float, *, why: str) -> None:
        r.restarts += 1
        self.kpi.restarts += 1
        cap = self.options.max_restarts
        if cap is not None and r.restarts > cap:
            self._fail(r, f"stopped {r.restarts} times (last: {why}); gave up", now)
            return
        r.status = RunStatus.PENDING
        self._enqueue(self._start_request(r, now))

    def _fail(self, r: JobRun, reason: str, now: float) -> None:
        if r.status.ended:
            return
        if r.status is RunStatus.RUNNING:
            self._stop(r, now)
        self._dequeue(r.spec.name)
        r.status, r.reason, r.end = RunStatus.FAILED, reason, now
        self.kpi.failed += 1
        self._ended(r)

    def _ended(self, r: JobRun) -> None:
        name = r.spec.name
        self.ended += 1
        self.specs.pop(name, None)
        self.attained.pop(name, None)
        self.why.pop(name, None)
        self._unexplained.discard(name)
        self._predicted.pop(name, None)
        if not self.options.keep_ended:
            self.runs.pop(name, None)

    def _enqueue(self, spec: JobSpec) -> None:
        old = self.pending.get(spec.name)
        if old is not None:
            self.waiting_milli -= _demand_milli(old, elastic=self.pending.elastic)
        self.pending.add(spec)
        self.waiting_milli += _demand_milli(spec, elastic=self.pending.elastic)
        self.cycles.arrived(spec.name)
        if self.options.explain:
            self._unexplained.add(spec.name)

    def _dequeue(self, name: str) -> None:
        spec = self.pending.get(name)
        if spec is not None:
            self.pending.remove(name)
            self.waiting_milli -= _demand_milli(spec, elastic=self.pending.elastic)
            self.why.pop(name, None)
            self._unexplained.discard(name)

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
            out.append(Change(name, ChangeKind.WAITING, now, status.reason.value, status.message))


_RESERVATION_LOST = Status(
    Code.UNSCHEDULABLE,
    Reason.INSUFFICIENT_GPUS,
    "waiting for GPUs: the racks reserved for it are now reserved for a job ahead of it in the queue "
    "(not examined in detail this cycle)",
    "backfill",
)


def _demand_milli(spec: JobSpec, *, elastic: bool) -> int:
    """What a waiting job asks for, for the idle rate: at least its minimum where the profile resizes gangs."""
    return spec.unit.gpu_demand_milli * fewest_units(spec, elastic=elastic)


def _expected_end(spec: JobSpec, start: float) -> float | None:
    return start + spec.duration_estimate_s if spec.duration_estimate_s is not None else None


def _smaller(spec: JobSpec, placement: Placement) -> str:
    """What an elastic gang started below its request is told (start smaller): the size, and why."""
    if not spec.is_elastic or placement.units >= spec.units:
        return ""
    g = spec.unit.gpus
    return (
        f"; started on {placement.units * g} of the {spec.units * g} GPUs it asked for (minGpus "
        f"{spec.required_units * g}): no more were free; it may grow when GPUs free up"
    )


_LEVEL_WORDS = {
    GroupLevel.QUEUE_KIND_SIZE: "of its queue, kind and size",
    GroupLevel.QUEUE_KIND: "of its queue and kind",
    GroupLevel.KIND_SIZE: "of its kind and size, in any queue",
    GroupLevel.KIND: "of its kind, in any queue",
}


def _planned_with(pred: Prediction | None) -> str:
    """What a job planned with the runtime predictor's estimate (it gave none) is told: the estimate, and
    from what history (no other job is named)."""
    if pred is None:
        return ""
    return (
        f"; planned to run about {duration_words(pred.estimate_s)}, predicted from {pred.history} completed "
        f"job(s) {_LEVEL_WORDS.get(pred.level, pred.level.value)}"
    )


def _where(cluster: GPUCluster, placement: Placement) -> str:
    racks = sorted({cluster.racks[cluster.nodes[a.node].rack].name for a in placement.allocs})
    shown = ", ".join(racks[:4]) + (f" and {len(racks) - 4} more" if len(racks) > 4 else "")
    return f"{len(placement.allocs)} node(s) in rack(s) {shown}"


__all__ = ["ClusterHost", "Estimates", "HostOptions"]
