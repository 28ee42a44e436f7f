"""Training plans that fit HBM, and the fastest of them on a system.

Memory per GPU (mixed precision with a distributed optimizer, as Megatron-LM trains):
``params / (tp x pp) x (2 weights + 2 gradients + 12 / dp optimizer: FP32 master, momentum, variance)``
plus activations: with full recomputation one BF16 layer input per layer and micro-batch sequence
(``2 s h`` bytes); without, ``34 s h / tp`` bytes per layer (Korthikanti et al. 2022: eq. 2 with tensor and
sequence parallelism is ``s h (34 + 5 a s / h) / tp``; the second term is the attention scores, softmax
and dropout mask, ``a s^2`` per layer, which a fused attention kernel never stores: FlashAttention, Dao
et al. 2022, as every current training stack runs; the paper's selective recomputation drops the same
term; a workload whose attention is not fused, ``TrainWorkload.fused_attention`` False, keeps it), times the
micro-batches in flight (``pp`` under 1F1B). Context parallelism keeps ``s / cp`` of each sequence
on a rank and shards the optimizer over ``dp x cp``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace

from rackscale.llm.fabric import Links, Span
from rackscale.llm.hardware import System
from rackscale.llm.serving import links_of
from rackscale.llm.training import TrainEfficiency, TrainPlan, TrainStep, TrainWorkload, train_step

HBM_USABLE = 0.9
# Korthikanti et al. 2022 (eq. 2, tensor + sequence parallel): bytes a layer keeps per token and hidden unit
# for its backward pass, attention scores excluded (a fused attention kernel keeps none).
ACT_BYTES_PER_TOKEN_HIDDEN = 34.0
SCORE_BYTES = 5.0  # the same paper's 5 a s^2 term: per score, BF16 softmax input and output and a 1-byte mask
TP_CHOICES = (1, 2, 4, 8, 16, 32, 64)
PP_CHOICES = (1, 2, 4, 8, 16, 32)
EP_CHOICES = (1, 2, 4, 8, 16, 32, 64)


def train_memory_bytes(work: TrainWorkload, plan: TrainPlan) -> float:
    model = work.model
    shard = (model.total_params() - model.expert_params_total() * (1.0 - 1.0 / plan.ep)) / (plan.tp * plan.pp)
    states = shard * (2.0 + 2.0 + 12.0 / (plan.dp * plan.cp))
    local, h = work.seq_len / plan.cp, model.hidden
    layers = model.layers / plan.pp
    if plan.recompute:
        act = 2.0 * local * h * plan.micro_batch * layers
    else:
        per_layer = local * h * ACT_BYTES_PER_TOKEN_HIDDEN
        if not work.fused_attention:  # scores, softmax and dropout mask of each head: 5 bytes a score
            per_layer += SCORE_BYTES * model.heads * local * work.seq_len
        act = per_layer / plan.tp * plan.micro_batch * layers
    in_flight = min(plan.pp, max(1, work.global_batch // (plan.dp * plan.micro_batch)))
    return states + act * in_flight


def train_step_on(system: System, work: TrainWorkload, plan: TrainPlan, eff: TrainEfficiency) -> TrainStep:
    """``plan``'s step on ``system`` laid out in its packed NVLink domains (what a published run reports)."""
    return train_step(work, plan, gpu=system.gpu, links=links_of(system), domain_gpus=system.domain_gpus, eff=eff)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainChoice:
    plan: TrainPlan
    step: TrainStep
    memory_bytes: float


def best_train_plan(
    work: TrainWorkload,
    system: System,
    *,
    gpus: int,
    links: Links,
    eff: TrainEfficiency,
    tp: int | None = None,
    pp: int | None = None,
    dp: int | None = None,
    ep: int | None = None,
    search_ep: bool = True,
    layout: Callable[[TrainPlan], tuple[int, Span | None]] | None = None,
) -> TrainChoice | None:
    """The fastest plan on ``gpus`` GPUs of ``system`` that fits HBM (None if none fits).

    ``tp``/``pp``/``dp``/``ep``: degrees the caller fixes (the rest are searched; EP only if ``search_ep``).
    ``layout``: the NVLink domain and DP-group span a plan sees on a real placement (the simulator's racks);
    by default the system's packed domains.
    """
    model = work.model
    best: TrainChoice | None = None
    for t in (tp,) if tp else TP_CHOICES:
        for p in (pp,) if pp else PP_CHOICES:
            if gpus % (t * p) or (dp and gpus // (t * p) != dp):
                continue
            if (not tp and t > model.heads) or (not pp and p > model.layers):
                continue
            d = gpus // (t * p)
            eps = (ep,) if ep else EP_CHOICES if (model.is_moe and search_ep) else (1,)
            for e, micro, recompute in itertools.product(eps, (1, 2, 4, 8), (False, True)):
                if work.global_batch % (d * micro) or d % e or (e > 1 and model.experts % e):
                    continue
                plan = TrainPlan(tp=t, pp=p, dp=d, ep=e, micro_batch=micro, recompute=recompute)
                best = _faster(best, _timed(work, plan, system, links=links, eff=eff, layout=layout))
    return best


def _timed(
    work: TrainWorkload,
    plan: TrainPlan,
    system: System,
    *,
    links: Links,
    eff: TrainEfficiency,
    layout: Callable[[TrainPlan], tuple[int, Span | None]] | None,
) -> TrainChoice | None:
    """``plan``'s step on ``system`` (laid out by ``layout``, else in packed domains); None if it does not fit
    HBM."""
    mem = train_memory_bytes(work, plan)
    if mem > system.gpu.hbm_bytes * HBM_USABLE:
        return None
    domain, dp_layout = layout(plan) if layout else (system.domain_gpus, None)
    step = train_step(work, plan, gpu=system.gpu, links=links, domain_gpus=domain, eff=eff, dp_layout=dp_layout)
    return TrainChoice(plan=plan, step=step, memory_bytes=mem)


def _faster(best: TrainChoice | None, other: TrainChoice | None) -> TrainChoice | None:
    """The faster of two choices (the first on a tie, as the searches keep the first they found)."""
    if other is None or (best is not None and other.step.step_s >= best.step.step_s):
        return best
    return other


def padded(work: TrainWorkload, rows: int) -> TrainWorkload:
    """``work`` with its global batch rounded up to a multiple of ``rows`` sequences (``dp x micro_batch``):
    where the batch does not divide, some ranks run one more micro-batch, and the step waits for them."""
    batch = -(-work.global_batch // rows) * rows
    return work if batch == work.global_batch else replace(work, global_batch=batch)


def best_resized_plan(
    work: TrainWorkload,
    plan: TrainPlan,
    system: System,
    *,
    dp: int,
    links: Links,
    eff: TrainEfficiency,
    layout: Callable[[TrainPlan], tuple[int, Span | None]] | None = None,
) -> TrainChoice | None:
    """``plan`` resized to ``dp`` data-parallel ranks (its model shard, TP x PP x EP, kept, as an elastic
    restart keeps it): the fastest micro-batch size and recomputation that fit HBM, at ``work``'s global batch
    (None if none fits). Each micro-batch size times its own padded batch (:func:`padded`)."""
    if dp < 1 or dp % plan.ep:
        return None
    best: TrainChoice | None = None
    for micro, recompute in itertools.product((1, 2, 4, 8), (False, True)):
        cand = replace(plan, dp=dp, micro_batch=micro, recompute=recompute)
        best = _faster(best, _timed(padded(work, dp * micro), cand, system, links=links, eff=eff, layout=layout))
    return best
