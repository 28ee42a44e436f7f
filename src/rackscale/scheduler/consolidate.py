"""Consolidation: move small running jobs out of one rack so that a waiting gang gets the rack.

KAI-Scheduler's consolidation action (NVIDIA/KAI-Scheduler ``pkg/scheduler/actions/consolidation/
consolidation.go``): for a pending job that nothing else could place, while the cluster has enough free
GPUs for it in total, evict running preemptible jobs and keep the scenario only if every evicted job is
placed again at once (``allPodsReallocated``: no victim left releasing), at most 16 of them
(``--max-consolidation-preemptees``). Here, the same rule for a gang that fits in one NVLink rack but finds
the free GPUs scattered over several:

- **who asks**: a pending training or batch job of whole GPUs that prefers or requires one rack, fits in the
  largest allowed rack, may preempt, and finds at least its GPUs free in total on the racks it may use;
- **who moves**: running jobs with GPUs in the candidate rack, preemptible and movable, not inference
  (its users would see the stop), of no higher priority than the gang, not placed this cycle, each smaller
  than the gang, stopped fewer than :data:`MAX_MOVER_RUNS` times; a job on loan may move too;
- **where**: the allowed racks where the fewest GPUs must move, then the cheapest; at most :data:`MAX_RACKS`;
- **only if it pays**: the gang's GPUs x the wait it is spared (its reservation's start, ``backfill.
  plan_reservation``; :data:`UNKNOWN_WAIT_S` without an estimate) must exceed the movers' cost: the work each
  loses since its last checkpoint (its save, with ``checkpoint_on_preempt``) plus :data:`RESTART_S` of its GPUs;
- **all or nothing**: in the cycle's transaction, release the movers, place the gang on the rack, place each
  mover elsewhere (off the rack, off racks the reservation holds from it, on no more racks than it had);
  any failure rolls everything back and the next rack is tried, so nobody is moved for nothing;
- **within the budgets**: with disruption budgets (``budgets.py``), no move takes one past what it allows
  (a preemption may, when nothing else frees the room: a move is never needed, the gang may wait).

A mover is a preemption (``Preemption``: the host stops it, counts its lost work, requeues it) followed by
its placement in the same cycle (``Placed(moved=True)``: the host starts it again at once). KAI runs
consolidation right after allocate; here it comes after preempt (``scheduler.py``), which stops only
lower-priority jobs, while a move restarts jobs of up to the gang's own priority. See
docs/scheduler-consolidation.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rackscale.model.running import RunningJob
from rackscale.model.topology import MILLI_PER_GPU, Rack
from rackscale.model.workload import JobKind, JobSpec, Level
from rackscale.scheduler.backfill import plan_reservation
from rackscale.scheduler.cycle import Attempt, Cycle
from rackscale.scheduler.decisions import Placed, Preemption, PreemptionCause
from rackscale.scheduler.filters import allowed_models
from rackscale.scheduler.framework import PROFILES
from rackscale.scheduler.gang import GangPlacement
from rackscale.scheduler.las import RECHECK_S, lost_on_preempt
from rackscale.scheduler.preemption import _healthy_whole_by_node
from rackscale.scheduler.status import Code
from rackscale.scheduler.waiting import rack_names

# The default profile with consolidation: not the default, measured (docs/scheduler-consolidation.md): on the
# embedded default it moves 3 jobs in 10 seeds (mean JCT -0.45 %); on Philly x8 it lowers the idle rate 2.23
# -> 0.46 % but raises mean JCT 1.5 % and lost work 27 %, and the simulation takes 2.2x as long.
PROFILES["rackscale-consolidate"] = replace(
    PROFILES["rackscale"],
    name="rackscale-consolidate",
    consolidate=True,
    summary="rackscale plus consolidation: moves small jobs to free a whole rack for a waiting gang",
)

# What a restart costs a moved job beyond its lost work, in seconds of its GPUs: relaunching its processes,
# loading the checkpoint and re-forming the collective (NCCL) groups take about a minute at rack scale
# (an assumption, as ``RuntimeDefaults.save_s`` is; the simulator does not charge it, so the rule errs
# towards not moving).
RESTART_S = 60.0
# The wait a gang is spared when its reservation has no start estimate (or one already past: the jobs it
# waits for overran theirs). Unknown, so taken as the period after which a least-attained-service profile
# looks at everything again (``las.RECHECK_S``, 5 min): low on purpose, so that without an estimate only
# moves cheaper than 5 min of the gang's GPUs are made.
UNKNOWN_WAIT_S = RECHECK_S
# Candidate racks tried per gang, best first (each try is a transaction of a few placements).
MAX_RACKS = 3
# Jobs moved for one gang at most: KAI-Scheduler's default ``--max-consolidation-preemptees``
# (cmd/scheduler/app/options/options.go, ``defaultMaxConsolidationPreemptees = 16``).
MAX_MOVERS = 16
# A job already stopped this often (moved, preempted, hit by a failed part) is not moved again: moves must
# not bounce one job around, nor bring it to the host's ``max_restarts``.
MAX_MOVER_RUNS = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class RackPlan:
    """Moving ``movers`` out of ``rack`` leaves room for the gang there."""

    rack: int
    movers: tuple[RunningJob, ...]
    gpus: int  # the GPUs the movers hold (in all their racks)
    cost: float  # GPU-seconds the moves cost (see ``move_cost``)


def move_cost(rj: RunningJob, now: float) -> float:
    """GPU-seconds a move costs ``rj``: its lost work (or save) plus a restart."""
    return lost_on_preempt(rj, now) + RESTART_S * rj.placement.gpu_milli / MILLI_PER_GPU


def spared_wait_s(job: JobSpec, cycle: Cycle) -> float:
    """How long the gang would wait without a move: until its reservation would start."""
    now = cycle.ctx.now
    r = plan_reservation(job, cycle.state, cycle.ctx)
    if r is None or r.start is None or r.start < now:
        return UNKNOWN_WAIT_S
    return r.start - now


class Consolidate:
    name = "consolidate"

    def __init__(self, gang: GangPlacement) -> None:
        self.gang = gang

    def run(self, cycle: Cycle, attempt: Attempt) -> bool:
        job = attempt.job
        racks = self._asks(cycle, attempt)
        if not racks:
            return False
        # Never a job placed or resized (``elastic.py``) this cycle: its place is decided.
        protected = cycle.protected()
        plans = sorted(
            (p for r in racks if (p := self._plan(cycle, job, r, protected)) is not None),
            key=lambda p: (p.gpus, p.cost, p.rack),
        )[:MAX_RACKS]
        if not plans:
            return False
        gain = job.total_gpus * spared_wait_s(job, cycle)
        for plan in plans:
            if plan.cost >= gain:
                continue
            done = self._move(cycle, attempt, plan)
            if done is not None:
                return done  # placed, or a placer's error (in the job's status: no further tries)
        return False

    def _asks(self, cycle: Cycle, attempt: Attempt) -> list[Rack]:
        """The racks the gang may take whole, or none when consolidation is not for it."""
        job, state = attempt.job, cycle.state
        topo = job.topology
        if (
            job.kind is JobKind.INFERENCE
            or job.unit.gpus == 0
            or Level.RACK not in (topo.required, topo.preferred)
            or not attempt.may_preempt
            or (attempt.status is not None and attempt.status.code is Code.ERROR)
            or job.name in state.running
        ):
            return []
        need = job.total_gpus
        if need > state.cluster.max_rack_gpus:
            return []  # no rack can hold it (most of the gangs that get here on a busy cluster): O(1)
        models = allowed_models(job, cycle.ctx)
        # KAI's first test (``IsEnoughGPUsAllocatableForJob``): enough free GPUs in total, else no moving
        # helps; first by the per-model counts (no rack visited), then without the racks it must keep off.
        if sum(state.model_free_whole[m] for m in models) < need:
            return []
        allowed = [r for r in state.cluster.racks if r.gpu_model in models and r.index not in attempt.exclude]
        if sum(state.rack_whole[r.index] for r in allowed) < need:
            return []
        return [r for r in allowed if r.gpus >= need]

    def _plan(self, cycle: Cycle, job: JobSpec, rack: Rack, protected: frozenset[str]) -> RackPlan | None:
        """The cheapest movers that leave room for the gang's units in ``rack`` (by count of whole GPUs per
        node: the placement attempt is the real check), or None."""
        state, now = cycle.state, cycle.ctx.now
        w, units = job.unit.gpus, job.units
        free = {n: state.node_whole[n] for n in rack.nodes}
        if sum(f // w for f in free.values()) >= units:
            return None  # it fits by count: allocate failed for another reason, which moving will not fix
        attained = cycle.ctx.attained
        limit = job.total_gpus * MILLI_PER_GPU
        cands: list[tuple[float, RunningJob]] = []
        for name in state.rack_jobs[rack.index]:
            rj = state.running[name]
            spec = rj.spec
            if (
                spec.kind is JobKind.INFERENCE
                or not spec.preemptible
                or not spec.movable
                or spec.priority > job.priority
                or name in protected
                or rj.placement.gpu_milli >= limit
                # An elastic gang running at another size than its spec's: placing the spec again would
                # resize it too (``elastic.py`` resizes; a move keeps the size).
                or rj.placement.units != spec.units
            ):
                continue
            svc = attained.get(name)
            if svc is not None and svc.runs >= MAX_MOVER_RUNS:
                continue
            cands.append((move_cost(rj, now), rj))
        cands.sort(key=lambda c: (c[0], -c[1].placement.gpu_milli, c[1].spec.name))
        gives = [_healthy_whole_by_node(state, rj, rack.index) for _, rj in cands]

        def room(picked: list[int]) -> int:
            node_free = dict(free)
            for i in picked:
                for n, k in gives[i].items():
                    node_free[n] += k
            return sum(f // w for f in node_free.values())

        # With disruption budgets (``budgets.py``), a job whose move would take one past what it allows is not
        # moved: a move is an optimisation that the gang's wait makes unnecessary, not a need of a higher priority.
        ledger = cycle.ctx.budgets
        taken: dict[str, int] = {}
        picked: list[int] = []
        for i in range(min(len(cands), MAX_MOVERS)):
            if ledger is not None:
                name = cands[i][1].spec.name
                if not ledger.within(name, taken):
                    continue
                ledger.take(name, taken)
            picked.append(i)
            if room(picked) >= units:
                break
        else:
            return None
        # Keep only the movers that are needed, giving back the most expensive first.
        for i in sorted(picked, key=lambda i: cands[i][0], reverse=True):
            rest = [j for j in picked if j != i]
            if rest and room(rest) >= units:
                picked = rest
        movers = tuple(cands[i][1] for i in picked)
        return RackPlan(
            rack=rack.index,
            movers=movers,
            gpus=sum(rj.placement.whole_gpus for rj in movers),
            cost=sum(cands[i][0] for i in picked),
        )

    def _move(self, cycle: Cycle, attempt: Attempt, plan: RackPlan) -> bool | None:
        """Carry the plan out in the cycle's transaction: True when done; None when it does not work out
        (rolled back: try the next rack); False on a placer's error (rolled back, in ``attempt.status``)."""
        job, tx, state, ctx = attempt.job, cycle.tx, cycle.state, cycle.ctx
        before = tx.checkpoint()
        for rj in plan.movers:
            tx.release(rj.spec.name)
        got = self.gang.place(tx, job, ctx, exclude=attempt.exclude, only=frozenset({plan.rack}))
        if not isinstance(got, Placed):
            tx.rollback(before)
            if got.code is Code.ERROR:
                attempt.status = got
                return False
            return None
        moved: list[tuple[Placed, tuple[int, ...]]] = []
        # The largest first: they are the hardest to place again.
        for rj in sorted(plan.movers, key=lambda rj: (-rj.placement.gpu_milli, rj.spec.name)):
            away = frozenset({plan.rack}) | attempt.exclude | _fenced(cycle, rj.spec)
            again = self.gang.place(tx, rj.spec, ctx, exclude=away, only=None)
            if not isinstance(again, Placed):
                tx.rollback(before)
                if again.code is Code.ERROR:
                    attempt.status = again
                    return False
                return None
            now_on = state.running[rj.spec.name].racks
            if len(now_on) > len(rj.racks):
                tx.rollback(before)  # a move must not split a job over more racks than it had
                return None
            moved.append((again, now_on))
        if ctx.budgets is not None:
            ctx.budgets.spend(rj.spec.name for rj in plan.movers)  # within them: _plan took no other
        freed = state.cluster.racks[plan.rack].name
        for p, now_on in moved:
            cycle.preempted.append(
                Preemption(
                    victim=p.spec.name,
                    preemptor=job.name,
                    # No job names: the host shows this to the mover's owner, who may be another tenant.
                    reason=f"moved to rack(s) {rack_names(state, set(now_on))} to free rack {freed} whole for a "
                    "waiting gang (checkpoint and restart)",
                    cause=PreemptionCause.CONSOLIDATION,
                )
            )
            cycle.placed.append(Placed(p.spec, p.placement, p.expected_end, moved=True))
        cycle.placed.append(got)
        # Nothing is freed in net, but the GPUs in use are placed differently now: the movers' lumpy sizes
        # can leave the rack with more free GPUs than before, and a mover split over racks frees nodes
        # elsewhere. A failure remembered for a shape may not hold any more, so forget them (a move is
        # rare: re-examining a few shapes costs little).
        cycle.room_was_freed()
        return True


def _fenced(cycle: Cycle, spec: JobSpec) -> frozenset[int]:
    """The racks a reservation holds that ``spec``, placed again now, would have to keep off (as admission
    fences a pending job: no higher priority than the holder's, and not ending before its start)."""
    r = cycle.reservation
    if r is None or spec.name == r.job or spec.priority > r.priority:
        return frozenset()
    now = cycle.ctx.now
    if spec.duration_estimate_s is not None and r.start is not None and now + spec.duration_estimate_s <= r.start:
        return frozenset()
    return r.racks


__all__ = ["MAX_MOVERS", "MAX_RACKS", "RESTART_S", "UNKNOWN_WAIT_S", "Consolidate", "RackPlan", "move_cost"]
