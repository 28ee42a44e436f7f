"""Least attained service: Tiresias' discretised 2D-LAS queue order, and preemption between equal priorities.

Tiresias (Gu et al., NSDI'19; its simulator: github.com/SymbioticLab/Tiresias, ``simulator/``) orders jobs
whose durations are unknown by the service they have had, in GPUs x time ("2D"), summed over all their
runs. Continuous LAS would preempt at every change of rank, so the service is discretised: a few queues
split at :data:`THRESHOLDS_GPU_S`, FIFO inside each; a job falls to the next queue when its service
crosses a threshold, and a job that waited too long for its service is promoted back to the first.

- ``priority-las`` (queue sort): priority first (the priority classes are never crossed); inside a
  priority level, the LAS queue; inside a LAS queue, fair share between tenants (the DRF merge of
  ``priority-fairshare``, :func:`~rackscale.scheduler.queue_order.fair_share_merge`), then submit time.
- ``las-victims`` (victim chooser): ``cheapest-victims`` (lower priorities), and also a running job of
  *equal* priority when it pays: the victim is in a strictly later LAS queue than the waiting job (it has
  had more service), has run at least ``min_run_s`` (doubled for each of its earlier runs) since its
  last (re)start and saved since (a run is never lost whole), is not inference (its users would see the
  stop), and loses at most ``max_lost_share`` of its attained service (the work since its last
  checkpoint; a job that saves on the stop signal loses ~its save). See docs/scheduler-las.md.

Only jobs that ran and stopped have a record in ``CycleContext.attained`` (the host's map, not a copy): a
cycle visits those, not the backlog, and the rest of each priority level is the pending queue's own
submit-ordered lists, so the order costs no sort of the backlog.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

from rackscale.model.running import RunningJob
from rackscale.model.topology import MILLI_PER_GPU
from rackscale.model.view import StateView
from rackscale.model.workload import JobKind, JobSpec
from rackscale.scheduler.framework import (
    PROFILES,
    QUEUE_SORTS,
    VICTIM_CHOOSERS,
    AttainedService,
    CycleContext,
    Profile,
)
from rackscale.scheduler.pending import PendingQueue
from rackscale.scheduler.preemption import CheapestVictims, last_checkpoint, lost_work
from rackscale.scheduler.queue_order import PriorityFairShare, fair_share_merge

# Tiresias' simulator, dlas-gpu (what the ElasticFlow simulator runs as its Tiresias baseline): three
# queues, ``queue_limit = [3250, 7200, 18000]`` GPU-seconds of which the first num_queue-1 are used
# (SymbioticLab/Tiresias simulator/jobs.py; pkusys/ElasticFlow ElasticFlow/scheduler/jobs.py).
THRESHOLDS_GPU_S: tuple[float, ...] = (3250.0, 7200.0)
# Promote a waiting job back to the first queue once it has waited STARVE_LIMIT times as long as it ran
# (the simulator's ``solve_starvation``, the paper's PROMOTEKNOB; its dlas-gpu-N variants sweep N from 0.5
# to 1000, plain dlas-gpu has it off). 4: a job that ran an hour waits at most about four for its turn.
STARVE_LIMIT = 4.0
# A run shorter than this is not stopped for a job of equal priority (as ``loans.MIN_LOAN_S``: a start
# costs minutes of loading and warm-up, a stop within minutes of it is mostly waste) ...
MIN_RUN_S = 600.0
# ... and it doubles with every earlier run of the job (as a multi-level feedback queue's quantum): a job
# of length T is stopped this way at most ~log2(T / MIN_RUN_S) times, not once per checkpoint.
RUN_BACKOFF = 2.0
# An equal-priority victim may lose at most this share of the service it has had (see the docs).
MAX_LOST_SHARE = 0.1
# What a job that saves on the stop signal loses: its save (as the host's ``RuntimeDefaults.save_s``,
# which the pure scheduler does not import).
SAVE_S = 60.0
# LAS decisions change with time alone (victims cross thresholds and their minimum run): the first cycle
# after this long without a full one is a full one (``cycles.CycleDriver``).
RECHECK_S = 300.0


@dataclass(frozen=True, slots=True, kw_only=True)
class LasConfig:
    thresholds_gpu_s: tuple[float, ...] = THRESHOLDS_GPU_S
    starve_limit: float = STARVE_LIMIT  # 0: no promotion
    min_run_s: float = MIN_RUN_S
    run_backoff: float = RUN_BACKOFF  # 1: the same minimum for every run
    max_lost_share: float = MAX_LOST_SHARE
    # Also ask that the waiting job keep its precedence over the victim for ``min_run_s`` of its own run
    # (a large job catches up with the victim's queue within seconds). Off: Tiresias has no such rule;
    # measured in docs/scheduler-las.md (less lost work, mean JCT no better).
    precedence: bool = False

    @property
    def levels(self) -> int:
        return len(self.thresholds_gpu_s) + 1

    def service(
        self, svc: AttainedService | None, now: float, running: RunningJob | None = None
    ) -> tuple[float, float, float]:
        """(GPU-seconds, run seconds, seconds waited since its first start) up to ``now``."""
        gpu_s, run_s, waited = (svc.gpu_s, svc.run_s, svc.waited_s) if svc is not None else (0.0, 0.0, 0.0)
        if running is not None:
            dt = max(now - running.started_at, 0.0)
            gpu_s += dt * running.placement.gpu_milli / MILLI_PER_GPU
            run_s += dt
        elif svc is not None:
            waited += max(now - svc.stopped_at, 0.0)
        return gpu_s, run_s, waited

    def level_after(self, svc: AttainedService | None, now: float, *, run_s: float, gpus: float) -> int:
        """The LAS queue of a waiting job once it has run ``run_s`` more on ``gpus`` GPUs from ``now``."""
        gpu_s, ran, waited = self.service(svc, now)
        return self._level(gpu_s + run_s * gpus, ran + run_s, waited)

    def _level(self, gpu_s: float, run_s: float, waited: float) -> int:
        if self.starve_limit > 0 and run_s > 0 and waited >= self.starve_limit * run_s:
            return 0
        return bisect.bisect_right(self.thresholds_gpu_s, gpu_s)

    def min_run(self, svc: AttainedService | None) -> float:
        """How long a run of the job lasts before a job of equal priority may stop it."""
        runs = min(svc.runs, 40) if svc is not None else 0  # (2**40 x 600 s: never, in practice)
        return self.min_run_s * self.run_backoff**runs

    def level(self, svc: AttainedService | None, now: float, running: RunningJob | None = None) -> int:
        """The job's LAS queue, 0 first. Tiresias resets a promoted job's service; a record the scheduler
        only reads cannot, so a job is promoted while it has waited ``starve_limit`` times as long as it
        ran (since its first start), running or not: a promoted job keeps queue 0 until its runs catch up."""
        if svc is None and running is None:
            return 0  # never ran
        return self._level(*self.service(svc, now, running))


def lost_on_preempt(rj: RunningJob, now: float) -> float:
    """GPU-seconds a preemption now costs ``rj``: the work since its last checkpoint, or its save if it
    saves on the stop signal."""
    lost = lost_work(rj, now)
    if rj.spec.checkpoint_on_preempt:
        return min(lost, SAVE_S * rj.placement.gpu_milli / MILLI_PER_GPU)
    return lost


def _loses(rj: RunningJob, now: float) -> str:
    """What the stop costs the victim, in its owner's words: a job that saves on the stop signal pays its
    save (``lost_on_preempt``), not the work since its last checkpoint."""
    gpu_h = lost_on_preempt(rj, now) / 3600
    if rj.spec.checkpoint_on_preempt and lost_work(rj, now) > gpu_h * 3600:
        return f"saves a checkpoint on the stop signal ({gpu_h:.2f} GPU-h)"
    return f"loses {gpu_h:.2f} GPU-h since its last checkpoint"


# Waiting jobs past the first LAS queue: priority -> LAS queue -> tenant -> jobs.
_Later = dict[int, dict[int, dict[str, list[JobSpec]]]]


def _submit_order(j: JobSpec) -> tuple[float, str]:
    return (j.submit_time, j.name)


def _without(jobs: Iterable[JobSpec], names: set[str]) -> Iterator[JobSpec]:
    return (j for j in jobs if j.name not in names)


class LeastAttainedService:
    """``priority-las``: priority, then LAS queue, then fair share between tenants, then submit time."""

    name = "priority-las"

    def __init__(self, config: LasConfig | None = None) -> None:
        self.config = config or LasConfig()
        self._fair = PriorityFairShare()  # its DRF shares, capacity cached per cluster

    def order(self, pending: PendingQueue, state: StateView, ctx: CycleContext) -> Iterator[JobSpec]:
        share = self._fair.shares(state, ctx)
        later, demoted = self._later(pending, ctx)
        for prio in pending.priorities():
            by_queue = pending.queues_at(prio)  # each in submit order
            levels = later.get(prio)
            if not levels:  # nobody here has had service: the first queue is the whole level
                yield from fair_share_merge(by_queue, share)
                continue
            # The first queue is each tenant's submit-ordered list less its later-queue jobs (a lazy filter:
            # the cycle stops early, and only tenants with such jobs are filtered).
            out = demoted.get(prio, {})
            first = {q: _without(js, out[q]) if q in out else js for q, js in by_queue.items()}
            yield from fair_share_merge(first, share)
            for lv in sorted(levels):
                yield from fair_share_merge({q: sorted(js, key=_submit_order) for q, js in levels[lv].items()}, share)

    def _later(self, pending: PendingQueue, ctx: CycleContext) -> tuple[_Later, dict[int, dict[str, set[str]]]]:
        """The waiting jobs past the first LAS queue, and their names per priority and tenant. Only jobs
        that ran have service, so only their records are visited."""
        later: _Later = {}
        demoted: dict[int, dict[str, set[str]]] = {}
        level, now = self.config.level, ctx.now
        for name, svc in ctx.attained.items():
            job = pending.get(name)
            if job is None:
                continue  # running (or ended): not to order
            lv = level(svc, now)
            if lv:
                later.setdefault(job.priority, {}).setdefault(lv, {}).setdefault(job.queue, []).append(job)
                demoted.setdefault(job.priority, {}).setdefault(job.queue, set()).add(name)
        return later, demoted


class LasVictims(CheapestVictims):
    """``las-victims``: ``cheapest-victims``, plus equal-priority jobs that had more service, within the
    bounds of :class:`LasConfig` (lower-priority victims still go first: they are cheaper)."""

    name = "las-victims"
    recheck_s = RECHECK_S

    def __init__(self, config: LasConfig | None = None) -> None:
        self.config = config or LasConfig()
        # Per instant: each running job's LAS queue as an equal-priority victim, or -1 when it cannot be one
        # whoever waits (too young a run, no save since its start, too much to lose, inference, not
        # preemptible), with the RunningJob it was read from. It reads only that job, its attained service
        # and the time, and a job's record changes only when a run of it stops (a new RunningJob), so a cycle
        # derives it once per running job instead of once per preemptor (12,700 per victim search at 1,389
        # racks: docs/benchmarks.md, "Service at cluster scale").
        self._fit_at: float | None = None
        self._fit: dict[str, tuple[RunningJob, int]] = {}
        # Per run, across instants: the time before which it cannot be such a victim, read from that run
        # alone (``_not_before_of``). A cycle at a new instant then skips the young runs and those that can
        # never be one (at cluster scale most of them) without deriving anything else.
        self._not_before: dict[str, tuple[RunningJob, float]] = {}
        # Per cycle: per priority, the latest of those queues among the running jobs (see _latest).
        self._latest_ctx: CycleContext | None = None
        self._latest_by_prio: dict[int, int] = {}

    def _at(self, now: float) -> None:
        """The per-instant memo holds ``now``'s answers (cleared at a new instant)."""
        if now != self._fit_at:
            self._fit.clear()
            self._fit_at = now

    def _fitness(self, rj: RunningJob, now: float, attained: Mapping[str, AttainedService]) -> int:
        self._at(now)
        spec = rj.spec
        got = self._fit.get(spec.name)
        if got is not None and got[0] is rj:
            return got[1]
        cfg, svc = self.config, attained.get(spec.name)
        young = self._not_before.get(spec.name)
        if young is None or young[0] is not rj:
            young = self._not_before[spec.name] = (rj, self._not_before_of(rj, svc))
        level = -1
        if (
            now >= young[1]  # preemptible, not inference, has run its minimum, and may have saved
            # It saved since its (re)start (or saves on the stop signal): a run is never lost whole.
            and (spec.checkpoint_on_preempt or last_checkpoint(rj, now) > rj.started_at)
            and lost_on_preempt(rj, now) <= cfg.max_lost_share * cfg.service(svc, now, rj)[0]
        ):
            level = cfg.level(svc, now, rj)
        self._fit[spec.name] = (rj, level)
        return level

    def _not_before_of(self, rj: RunningJob, svc: AttainedService | None) -> float:
        """When the run may first be an equal-priority victim: once it has run its minimum. Never (inf) when
        it is inference or may not be preempted, or when it can never have saved since its start (no
        checkpoint interval, none noted after its start, no save on the stop signal): ``_fitness``'s
        checkpoint test fails at every instant then, and a checkpoint the host notes makes a new
        ``RunningJob``, read again. (``attained`` holds the job's earlier runs: it does not change while
        this one runs.)"""
        spec = rj.spec
        if not spec.preemptible or spec.kind is JobKind.INFERENCE:
            return math.inf
        saved = rj.checkpointed_at is not None and rj.checkpointed_at > rj.started_at
        if not (spec.checkpoint_on_preempt or spec.checkpoint_interval_s or saved):
            return math.inf
        return rj.started_at + self.config.min_run(svc)

    def _latest(self, state: StateView, ctx: CycleContext) -> dict[int, int]:
        """Per priority, the latest LAS queue of a running job fit to be an equal-priority victim (absent:
        none). Read once per cycle, at its first use: a cycle only takes running jobs away (its victims) and
        adds its own placements, which are protected, so it bounds every later search of the cycle; when the
        waiting job's own queue is that late or later, no running job of its priority can be its victim and
        the search is skipped (at 1,389 racks with young runs, every search: docs/benchmarks.md)."""
        if self._latest_ctx is not ctx:
            latest: dict[int, int] = {}
            fitness, now, attained = self._fitness, ctx.now, ctx.attained
            self._at(now)
            # ``_fitness``'s two memos read inline: this visits every running job (20,000 at 100,000 GPUs),
            # and a call per job would cost as much as the rest of the loop. The runs that cannot be victims
            # yet (or ever) first: at cluster scale most are, at every instant.
            fit, young = self._fit.get, self._not_before.get
            for name, rj in state.running.items():
                y = young(name)
                if y is not None and y[0] is rj and now < y[1]:
                    continue
                got = fit(name)
                level = got[1] if got is not None and got[0] is rj else fitness(rj, now, attained)
                if level >= 0 and level > latest.get(rj.spec.priority, -1):
                    latest[rj.spec.priority] = level
            self._latest_ctx, self._latest_by_prio = ctx, latest
            if len(self._not_before) > 2 * len(state.running) + 1024:  # runs that ended: forget them
                running = state.running
                self._not_before = {n: y for n, y in self._not_before.items() if running.get(n) is y[0]}
        return self._latest_by_prio

    def may_take_equal(self, priority: int, state: StateView, ctx: CycleContext) -> bool:
        """Only if a running job of ``priority`` fit to be a victim is past the first LAS queue: a waiting job
        is in the first queue or later, and its victim must be in a strictly later one (``eligible``)."""
        return state.has_preemptible_below(priority + 1) and self._latest(state, ctx).get(priority, -1) > 0

    def eligible(
        self, job: JobSpec, state: StateView, ctx: CycleContext, *, protected: frozenset[str]
    ) -> Callable[[RunningJob], bool] | None:
        lower = super().eligible(job, state, ctx, protected=protected)
        cfg, now, attained, prio = self.config, ctx.now, ctx.attained, job.priority
        # (A running service asking for more replicas does not stop its peers for them.)
        if job.name in state.running or not state.has_preemptible_below(prio + 1):
            return lower
        mine = cfg.level(attained.get(job.name), now)
        if mine >= cfg.levels - 1:
            return lower  # in the last queue: nobody is in a later one

        # With ``precedence``: the LAS queue the waiting job is in after ``min_run_s`` of running (a victim
        # in it or an earlier one would be its equal by then, and would have lost its work for nothing).
        gpus = job.gpu_demand_milli / MILLI_PER_GPU
        reach = cfg.level_after(attained.get(job.name), now, run_s=cfg.min_run_s, gpus=gpus) if cfg.precedence else mine

        # A victim of equal priority is in a strictly later LAS queue than the waiting job will be in.
        bound, fitness = max(reach, mine), self._fitness
        if self._latest(state, ctx).get(prio, -1) <= bound:
            return lower

        def equal(rj: RunningJob) -> bool:
            spec = rj.spec
            return spec.priority == prio and spec.name not in protected and fitness(rj, now, attained) > bound

        if lower is None:
            return equal
        return lambda rj: lower(rj) or equal(rj)

    def explain(self, job: JobSpec, victim: RunningJob, ctx: CycleContext) -> str:
        if victim.spec.priority < job.priority:
            return super().explain(job, victim, ctx)
        cfg, now = self.config, ctx.now
        svc = ctx.attained.get(victim.spec.name)
        theirs = cfg.service(svc, now, victim)[0] / 3600
        mine = cfg.service(ctx.attained.get(job.name), now)[0] / 3600
        n = cfg.levels
        return (
            f"it has had more GPU time ({theirs:.1f} GPU-h over its runs, least-attained-service queue "
            f"{cfg.level(svc, now, victim) + 1} of {n}) than the waiting job of equal priority {job.priority} "
            f"({mine:.1f} GPU-h, queue {cfg.level(ctx.attained.get(job.name), now) + 1}), ran "
            f"{(now - victim.started_at) / 60:.0f} min since its last start and {_loses(victim, now)}"
        )


QUEUE_SORTS[LeastAttainedService.name] = LeastAttainedService
VICTIM_CHOOSERS[LasVictims.name] = LasVictims

# Tiresias as published: 2D-LAS order, preemptive, consolidated placement. Its placement packs a job on as
# few machines as it can; topology-pack packs a gang into the fewest NVLink racks, the nearest equivalent.
# No reservations: Tiresias starts, queue by queue, every job that fits (backfill=False).
PROFILES["tiresias"] = Profile(
    name="tiresias",
    queue_sort=LeastAttainedService.name,
    victims=LasVictims.name,
    placer="topology-pack",
    backfill=False,
    summary="Tiresias (NSDI'19): discretised 2D-LAS by GPU-time, preempts equal priorities, packs into few racks",
)
# The rackscale profile before issue 13's queue order (kept to compare): priority, fair share, submit time,
# and preemption of lower priorities only.
PROFILES["rackscale-fairshare"] = replace(
    PROFILES["rackscale"],
    name="rackscale-fairshare",
    queue_sort=PriorityFairShare.name,
    victims=CheapestVictims.name,
    summary="rackscale with its earlier order: priority, fair share, submit time; preempts lower priorities only",
)

__all__ = [
    "MAX_LOST_SHARE",
    "MIN_RUN_S",
    "RUN_BACKOFF",
    "STARVE_LIMIT",
    "THRESHOLDS_GPU_S",
    "LasConfig",
    "LasVictims",
    "LeastAttainedService",
    "lost_on_preempt",
]
