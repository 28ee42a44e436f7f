"""An LLM job resolved on a system: its plan, its batch, and its step on any placement shape, cached.

The cluster-facing API is :mod:`rackscale.llm.jobs`; this module holds what it resolves a job into:

- :class:`TrainingJob`: the plan (the given ``tp/pp/dp``, the rest the fastest that fits HBM at the best
  placement), and the step on a layout. Contention (``slowdown``) stretches only the inter-rack part of
  the DP all-reduce, linearly, so a step is cached per shape as ``compute, comm, d comm / d slowdown``.
- :class:`ServingJob`: the replica's plan and batch, fixed at its best placement (the largest batch whose
  interactivity meets the SLO; with none, the HBM limit capped at :data:`DEFAULT_MAX_BATCH`), and a
  :class:`ReplicaServing` per layout shape: the decode step there at 1/4 .. 4/4 of the batch.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rackscale.llm.decode import ACT_BYTES, Efficiency, StepTerms, decode_step, prefill
from rackscale.llm.fabric import Links, Span
from rackscale.llm.hardware import System
from rackscale.llm.models import ModelSpec
from rackscale.llm.plans import ServePlan, candidate_plans, max_batch
from rackscale.llm.serving import ServeWorkload
from rackscale.llm.train_plans import HBM_USABLE, best_train_plan
from rackscale.llm.training import TrainEfficiency, TrainPlan, TrainStep, TrainWorkload, train_step
from rackscale.model.errors import RackscaleError
from rackscale.model.workload import LlmWork
from rackscale.network.collectives import StepTime

DEFAULT_MAX_BATCH = 256  # no interactivity SLO: vLLM's default max_num_seqs
MAX_BATCH = 4096
PREFILL_PASS_TOKENS = 8192  # prompt tokens per prefill pass between decode steps (as serving.py's aggregated mode)
LOAD_LEVELS = 4  # a replica's step is known at 1/4, 2/4, 3/4 and 4/4 of its batch

Shape = tuple[tuple[int, ...], int]
"""A placement's shape: GPUs per rack (largest first) and the regions it touches."""


class LlmJobError(RackscaleError, ValueError):
    """An LLM job the cluster cannot run as asked (the model does not fit, no plan matches)."""


@dataclass(frozen=True, slots=True, eq=False)
class JobContext:
    """A chip with the cluster's links, and its calibrated efficiencies. Compared (and hashed, as a cache
    key) by identity: one per (tiers, domain, GPU model), made once by ``jobs._context``."""

    system: System
    links: Links
    serving: Efficiency
    training: TrainEfficiency


def _degrees(llm: LlmWork) -> str:
    given = [f"{k}={v}" for k in ("tp", "pp", "dp", "ep") if (v := getattr(llm, k)) is not None]
    return ", ".join(given) if given else "any plan"


# ---------------------------------------------------------------------------------------------- training
def train_layout(plan: TrainPlan, counts: Sequence[int], regions: int = 1) -> tuple[int, Span]:
    """What a layout means for a training plan: the NVLink domain its TP and PP groups see, and the span
    of its slowest DP group.

    Ranks fill the racks in order, TP fastest, then PP, then DP (Megatron-LM's order): a TP group straddles
    racks when a rack's count is not a multiple of ``tp`` (its slowest member then sets the pace); PP
    stages cross racks unless every rack holds whole model copies. There are ``tp x pp`` DP groups, one per
    position in a model copy, all-reducing at once: the one spread over the most racks (then with the
    fewest members in one rack) sets the step.
    """
    shard = plan.shard_gpus
    straddle = next((n % plan.tp for n in counts if n % plan.tp), 0)
    if straddle:
        domain = max(straddle, plan.tp - straddle)  # the split TP group's larger part: TP and PP on the NIC
    elif all(n % shard == 0 for n in counts):
        domain = min(counts, default=shard)
    else:
        domain = plan.tp  # TP inside racks, pipeline stages across them
    ends = list(itertools.accumulate(counts))
    worst: tuple[int, ...] = (plan.dp,)
    # A group's racks change only where some rack boundary falls at that position of a copy: one
    # position per interval between those residues covers every distinct group.
    locals_ = sorted({0, *(e % shard for e in ends[:-1])}) if len(counts) > 1 else []
    if len(counts) > _VECTOR_RACKS:  # up to ``shard`` positions x the racks: vectorised over the racks
        return domain, _worst_group_many_racks(plan, ends, locals_, regions)
    for local in locals_:
        members, start = [], 0
        for end in ends:  # copies j with start <= j * shard + local < end, within the dp copies
            lo = max(0, -(-(start - local) // shard))
            hi = min(plan.dp, -(-(end - local) // shard))
            if hi > lo:
                members.append(hi - lo)
            start = end
        if members and (len(members), -min(members)) > (len(worst), -min(worst)):
            worst = tuple(members)
    return domain, Span(worst, max(regions, 1) if len(worst) > 1 else 1)


# Above this many racks a layout's DP groups are counted with numpy: a million-GPU gang (14,564 racks, 128
# positions a copy) took 39 s of plan search in the loop above, on the API's worker thread and the host's.
_VECTOR_RACKS = 64


def _worst_group_many_racks(plan: TrainPlan, ends: list[int], positions: list[int], regions: int) -> Span:
    """:func:`train_layout`'s slowest DP group, the same rule, over many racks at once."""
    shard = plan.shard_gpus
    stop = np.asarray(ends, dtype=np.int64)
    start = np.concatenate((np.zeros(1, dtype=np.int64), stop[:-1]))
    worst: tuple[int, ...] = (plan.dp,)
    for local in positions:
        lo = np.maximum(0, -((local - start) // shard))  # ceil((start - local) / shard), at least 0
        hi = np.minimum(plan.dp, -((local - stop) // shard))
        held = hi - lo
        members = held[held > 0]
        if members.size and (members.size, -int(members.min())) > (len(worst), -min(worst)):
            worst = tuple(int(m) for m in members)
    return Span(worst, max(regions, 1) if len(worst) > 1 else 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingJob:
    work: TrainWorkload
    plan: TrainPlan
    ctx: JobContext
    _steps: dict[Shape, tuple[float, float, float]] = field(default_factory=dict, compare=False, repr=False)

    def step(self, shape: Shape, slowdown: float = 1.0) -> StepTime:
        got = self._steps.get(shape)
        if got is None:
            one, two = self.terms(shape, 1.0), self.terms(shape, 2.0)
            comm = one.tp_comm_s + one.pp_comm_s + one.dp_comm_s
            got = self._steps[shape] = (one.compute_s + one.bubble_s, comm, two.dp_comm_s - one.dp_comm_s)
        compute, comm, slope = got
        return StepTime(compute, comm + (slope * (max(slowdown, 1.0) - 1.0) if slope > 0 else 0.0))

    def terms(self, shape: Shape, slowdown: float = 1.0) -> TrainStep:
        counts, regions = shape
        domain, dp = train_layout(self.plan, counts, regions)
        c = self.ctx
        return train_step(
            self.work,
            self.plan,
            gpu=c.system.gpu,
            links=c.links,
            domain_gpus=domain,
            eff=c.training,
            dp_layout=dp,
            slowdown=slowdown,
        )


def train_job(work: TrainWorkload, llm: LlmWork, gpus: int, ctx: JobContext) -> TrainingJob:
    """The fastest plan that fits HBM on the job's best placement (packed racks), among those its given
    degrees allow: timed on that placement, so a TP group that would straddle two racks there loses."""
    model = work.model
    usable = ctx.system.gpu.hbm_bytes * HBM_USABLE
    packed = Span.packed(gpus, ctx.system.domain_gpus).per_domain
    layouts: dict[tuple[int, int, int], tuple[int, Span]] = {}

    def layout(plan: TrainPlan) -> tuple[int, Span]:  # (the micro-batch and recomputation variants share one)
        key = (plan.tp, plan.shard_gpus, plan.dp)
        got = layouts.get(key)
        if got is None:
            got = layouts[key] = train_layout(plan, packed)
        return got

    choice = best_train_plan(
        work, ctx.system, gpus=gpus, links=ctx.links, eff=ctx.training, tp=llm.tp, pp=llm.pp, dp=llm.dp,
        ep=llm.ep, search_ep=False, layout=layout,
    )  # fmt: skip
    best = None if choice is None else choice.plan
    if best is None:
        raise LlmJobError(
            f"llm.model: {model.name} at {work.precision} does not train on {gpus} {ctx.system.gpu.name} GPU(s) "
            f"with {_degrees(llm)}: no plan fits {usable / 1e9:.0f} GB of HBM per GPU "
            f"(~{model.total_params() * 16.0 / 1e9:.0f} GB of weights, gradients and optimizer states in all); "
            "give the job more GPUs, or leave tp/pp/dp for rackscale to choose"
        )
    return TrainingJob(work=work, plan=best, ctx=ctx)


# ---------------------------------------------------------------------------------------------- serving
@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaServing:
    """One replica on one layout: full-load speed, and the decode step at fractions of its batch."""

    plan: ServePlan  # with the batch it was configured for
    step: StepTerms  # the decode step at the full batch
    tokens_per_s: float  # output tokens/s at full load, prefill included (aggregated serving)
    prefill_share: float  # share of its time spent on prefill at full load
    prefill_s: float  # one request's prefill
    level_steps: tuple[float, ...]  # decode step seconds at 1/LOAD_LEVELS .. all of the batch
    emitted: float  # tokens a sequence gains per step (more than 1 with MTP)

    @property
    def interactivity(self) -> float:
        """Tokens/s a user sees at full load."""
        return self.at_load(1.0)[0]

    def at_load(self, load: float) -> tuple[float, float]:
        """``(tokens/s per user, TTFT s)`` at ``load`` = demand / capacity.

        The running batch scales with the load (Little's law: sequences in flight = arrival rate x time in
        service), rounded up to a quarter of the batch; prefill takes ``load x prefill_share`` of the time.
        TTFT is an M/M/1 sojourn whose service is one prefill plus one decode step: infinite at a load >= 1.
        """
        x = min(max(load, 0.0), 1.0)
        step = self.level_steps[max(1, math.ceil(x * LOAD_LEVELS)) - 1]
        inter = self.emitted / step * (1.0 - x * self.prefill_share)
        ttft = (self.prefill_s + step) / (1.0 - load) if load < 1.0 else math.inf
        return inter, ttft

    def traffic_bytes(self, model: ModelSpec) -> float:
        """Bytes one TP group all-reduces per decode step (two all-reduces per layer)."""
        p = self.plan
        if p.tp < 2:
            return 0.0
        return 2.0 * model.layers * p.batch * self.emitted / p.dp * model.hidden * ACT_BYTES


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingJob:
    work: ServeWorkload
    plan: ServePlan
    ctx: JobContext
    _replicas: dict[Shape, ReplicaServing] = field(default_factory=dict, compare=False, repr=False)

    def replica(self, shape: Shape) -> ReplicaServing:
        got = self._replicas.get(shape)
        if got is None:
            got = self._replicas[shape] = replica_on(self.work, self.plan, self.ctx, Span(*shape))
        return got

    def step(self, shape: Shape) -> StepTime:
        s = self.replica(shape).step
        return StepTime(s.step_s - s.tp_comm_s, s.tp_comm_s)


def _decode(work: ServeWorkload, plan: ServePlan, ctx: JobContext, span: Span) -> StepTerms:
    return decode_step(
        work.model,
        work.precision,
        plan,
        gpu=ctx.system.gpu,
        links=ctx.links,
        span=span,
        context=work.decode_context,
        eff=ctx.serving,
        mtp=work.mtp,
    )


def _prefill(work: ServeWorkload, plan: ServePlan, ctx: JobContext, span: Span, requests: int) -> float:
    return prefill(
        work.model,
        work.precision,
        plan,
        gpu=ctx.system.gpu,
        links=ctx.links,
        span=span,
        isl=work.isl,
        requests=requests,
        eff=ctx.serving,
    ).time_s


def _prefill_rate(work: ServeWorkload, plan: ServePlan, ctx: JobContext, span: Span) -> float:
    """Prompt tokens per second of a replica, in passes of :data:`PREFILL_PASS_TOKENS`."""
    requests = max(1, PREFILL_PASS_TOKENS // max(work.isl, 1))
    return requests * work.isl / _prefill(work, plan, ctx, span, requests)


def _aggregated(work: ServeWorkload, batch: int, step_s: float, prefill_rate: float) -> tuple[float, float]:
    """``(output tokens/s, prefill share)`` of a replica serving both phases (serving.py's aggregated mode)."""
    t_dec = step_s / (batch * work.mtp.tokens_emitted)
    t_pre = work.isl / max(work.osl, 1) / prefill_rate
    return 1.0 / (t_dec + t_pre), t_pre / (t_dec + t_pre)


def replica_on(work: ServeWorkload, plan: ServePlan, ctx: JobContext, span: Span) -> ReplicaServing:
    full = _decode(work, plan, ctx, span)
    tokens, share = _aggregated(work, plan.batch, full.step_s, _prefill_rate(work, plan, ctx, span))
    levels = []
    for q in range(1, LOAD_LEVELS + 1):
        b = max(plan.dp, math.ceil(plan.batch * q / LOAD_LEVELS / plan.dp) * plan.dp)
        levels.append(full.step_s if b >= plan.batch else _decode(work, plan.with_batch(b), ctx, span).step_s)
    return ReplicaServing(
        plan=plan,
        step=full,
        tokens_per_s=tokens,
        prefill_share=share,
        prefill_s=_prefill(work, plan, ctx, span, 1),
        level_steps=tuple(levels),
        emitted=work.mtp.tokens_emitted,
    )


def _matches(plan: ServePlan, llm: LlmWork) -> bool:
    return all(getattr(llm, k) is None or getattr(llm, k) == getattr(plan, k) for k in ("tp", "pp", "dp", "ep"))


def _candidates(model: ModelSpec, llm: LlmWork, gpus: int) -> list[ServePlan]:
    plans = [p for p in candidate_plans(model, max_gpus=gpus) if p.gpus == gpus and _matches(p, llm)]
    if plans:
        return plans
    pp, dp = llm.pp or 1, llm.dp or 1
    tp = llm.tp or max(1, gpus // (pp * dp))
    ep = llm.ep or (tp * dp if model.is_moe and dp > 1 else 1)
    return [ServePlan(tp=tp, dp=dp, pp=pp, ep=ep)] if tp * dp * pp == gpus else []


def _slo_batch(work: ServeWorkload, plan: ServePlan, ctx: JobContext, span: Span, top: int, slo: float | None) -> int:
    """The largest batch (a multiple of ``dp``) whose interactivity at full load meets ``slo``."""
    cap = min(top, MAX_BATCH)
    if slo is None:
        return max(plan.dp, min(cap, DEFAULT_MAX_BATCH) // plan.dp * plan.dp)
    rate = _prefill_rate(work, plan, ctx, span)

    def meets(units: int) -> bool:
        b = units * plan.dp
        step = _decode(work, plan.with_batch(b), ctx, span).step_s
        share = _aggregated(work, b, step, rate)[1]
        return work.mtp.tokens_emitted / step * (1.0 - share) >= slo

    lo, hi = 1, max(1, cap // plan.dp)
    if not meets(lo):
        return plan.dp
    while lo < hi:  # the largest that meets it: interactivity falls as the batch grows
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if meets(mid) else (lo, mid - 1)
    return lo * plan.dp


def serve_job(work: ServeWorkload, llm: LlmWork, gpus: int, ctx: JobContext) -> ServingJob:
    """The replica plan with the most tokens/s per GPU at its SLO batch, at the best placement (SLO-meeting
    plans first); the given degrees restrict the plans tried."""
    span = Span.packed(gpus, ctx.system.domain_gpus)
    hbm = ctx.system.gpu.hbm_bytes
    best: tuple[tuple[bool, float], ServePlan] | None = None
    for plan in _candidates(work.model, llm, gpus):
        top = max_batch(work.model, work.precision, plan, context=work.max_context, hbm_bytes=hbm)
        if top < plan.dp:
            continue
        sized = plan.with_batch(_slo_batch(work, plan, ctx, span, top, llm.interactivity_slo))
        r = replica_on(work, sized, ctx, span)
        slo = llm.interactivity_slo
        score = (slo is None or r.interactivity >= slo * (1 - 1e-9), r.tokens_per_s / gpus)
        if best is None or score > best[0]:
            best = (score, sized)
    if best is None:
        raise LlmJobError(
            f"llm.model: {work.model.name} at {work.precision} does not fit one replica of {gpus} "
            f"{ctx.system.gpu.name} GPU(s) ({hbm / 1e9:.0f} GB each) with {_degrees(llm)}: weights "
            f"{work.model.weight_bytes(work.precision) / 1e9:.0f} GB; give more gpusPerReplica or a narrower "
            "llm.precision (fp8, fp4)"
        )
    return ServingJob(work=work, plan=best[1], ctx=ctx)


__all__ = [
    "DEFAULT_MAX_BATCH",
    "JobContext",
    "LlmJobError",
    "ReplicaServing",
    "ServingJob",
    "Shape",
    "TrainingJob",
    "serve_job",
    "train_job",
    "train_layout",
]
