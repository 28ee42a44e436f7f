"""Serving curves: tokens/s per GPU against tokens/s per user, over plans and batch sizes.

For every plan that fits HBM and every batch, one point: the decode step time gives the interactivity
(tokens/s a user sees) and the decode throughput; prefill adds its GPU time per output token:

- **aggregated** (one pool does both): ``tok/s/GPU = 1 / (1/D + (ISL/OSL)/P)`` with ``D`` decode and ``P``
  prefill tokens/s per GPU of the same plan; prefill chunks stretch the decode steps by the same share, so
  the user sees ``interactivity x decode share``;
- **disaggregated** (separate prefill and decode pools): the same formula with ``P`` from the best prefill
  plan (rate-matched pool), while the user sees the decode pool's interactivity unchanged; the KV cache
  moves from prefill to decode over NVLink when both fit one domain, else over the NIC.

TTFT is twice the prefill of the request's batch (a request waits, on average, for the batch in service,
then its own) plus the KV transfer; a TTFT bound keeps the points that meet it. The curve keeps the Pareto
frontier; ``best_at(x)`` is the best tokens/s per GPU at an interactivity of at least ``x``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from rackscale.llm.decode import (
    NO_MTP,
    Efficiency,
    Mtp,
    PrefillTerms,
    StepTerms,
    decode_step,
    expert_imbalance,
    prefill,
)
from rackscale.llm.fabric import Links, Span
from rackscale.llm.hardware import System
from rackscale.llm.models import ModelSpec
from rackscale.llm.plans import KV_PRECISION, ServePlan, candidate_plans, max_batch
from rackscale.llm.precision import Precision

PREFILL_TOKENS_PER_PASS = (1024, 2048, 4096, 8192, 16384, 32768)  # prefill batch sizes tried, in tokens
TTFT_WAIT_FACTOR = 2.0
BATCH_STEP = 1.25  # geometric batch sweep


class ServingMode(StrEnum):
    AGGREGATED = "aggregated"
    DISAGGREGATED = "disaggregated"
    BEST = "best"


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeWorkload:
    model: ModelSpec
    precision: Precision
    isl: int
    osl: int
    mtp: Mtp = NO_MTP
    ttft_s: float | None = None

    @property
    def decode_context(self) -> float:
        return self.isl + self.osl / 2.0

    @property
    def max_context(self) -> float:
        return float(self.isl + self.osl)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServePoint:
    interactivity: float  # tokens/s per user
    tok_s_gpu: float  # output tokens/s per GPU, prefill GPUs (or time) included
    ttft_s: float
    plan: ServePlan  # the decode plan
    mode: ServingMode
    step: StepTerms
    prefill_plan: ServePlan | None = None
    prefill_share: float = 0.0  # share of GPUs (disaggregated) or GPU time (aggregated) spent on prefill
    mtp: Mtp = NO_MTP  # the draft count this point speculates with

    def as_dict(self) -> dict[str, object]:
        return {
            "interactivity_tok_s_user": self.interactivity,
            "tok_s_gpu": self.tok_s_gpu,
            "ttft_s": self.ttft_s,
            "plan": self.plan.as_dict(),
            "mode": str(self.mode),
            "prefill_plan": None if self.prefill_plan is None else self.prefill_plan.as_dict(),
            "prefill_share": self.prefill_share,
            "mtp_drafts": self.mtp.drafts,
            "dominant": self.step.dominant,
            "step": self.step.as_dict(),
        }


@dataclass(frozen=True, slots=True)
class ServeCurve:
    """The Pareto frontier, highest interactivity first."""

    points: tuple[ServePoint, ...]
    evaluated: int = field(default=0, compare=False)

    def best_at(self, interactivity: float) -> ServePoint | None:
        best: ServePoint | None = None
        for p in self.points:
            if p.interactivity >= interactivity and (best is None or p.tok_s_gpu > best.tok_s_gpu):
                best = p
        return best

    @property
    def peak(self) -> ServePoint | None:
        return max(self.points, key=lambda p: p.tok_s_gpu, default=None)


def links_of(system: System) -> Links:
    nic = system.nic_bytes_per_s
    return Links(nvlink_bytes_s=system.gpu.nvlink_bytes_per_s, nic_bytes_s=nic, backbone_bytes_s=nic)


def _batches(limit: int) -> Iterable[int]:
    b = 1.0
    seen = -1
    while int(b) <= limit:
        if int(b) != seen:
            seen = int(b)
            yield seen
        b *= BATCH_STEP
    if limit > seen:
        yield limit


def _draws(mtp: Mtp, limit: int) -> Iterable[tuple[Mtp, int]]:
    """(draft count, batch per attention group) pairs to try: with an MTP head, every draft count up to its
    maximum (more drafts pay at small batch, where steps are bound by weights, not compute)."""
    counts = range(1, mtp.drafts + 1) if mtp.drafts > 0 else (0,)
    for d in counts:
        m = mtp.with_drafts(d) if d else mtp
        for b in _batches(limit):
            yield m, b


def _pareto(points: list[ServePoint]) -> tuple[ServePoint, ...]:
    points.sort(key=lambda p: (-p.interactivity, -p.tok_s_gpu))
    out: list[ServePoint] = []
    best = -1.0
    for p in points:
        if p.tok_s_gpu > best:
            out.append(p)
            best = p.tok_s_gpu
    return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Prefill:
    plan: ServePlan
    tok_s_gpu: float
    ttft_s: float
    terms: PrefillTerms


def best_prefill(
    work: ServeWorkload,
    system: System,
    *,
    eff: Efficiency,
    max_gpus: int,
    ttft_budget_s: float | None,
    plans: Iterable[ServePlan] | None = None,
) -> _Prefill | None:
    """The prefill plan (of ``plans``, default every plan up to ``max_gpus``) and pass size with the most prompt
    tokens/s per GPU whose TTFT meets the budget."""
    links = links_of(system)
    best: _Prefill | None = None
    for plan in candidate_plans(work.model, max_gpus=max_gpus) if plans is None else plans:
        if max_batch(work.model, work.precision, plan, context=work.isl, hbm_bytes=system.gpu.hbm_bytes) < 1:
            continue
        span = Span.packed(plan.gpus, system.domain_gpus)
        for tokens in PREFILL_TOKENS_PER_PASS:
            requests = max(1, tokens // max(work.isl, 1))
            terms = prefill(
                work.model,
                work.precision,
                plan,
                gpu=system.gpu,
                links=links,
                span=span,
                isl=work.isl,
                requests=requests,
                eff=eff,
            )
            ttft = TTFT_WAIT_FACTOR * terms.time_s
            if ttft_budget_s is not None and ttft > ttft_budget_s:
                continue
            rate = requests * work.isl / terms.time_s / plan.gpus
            if best is None or rate > best.tok_s_gpu:
                best = _Prefill(plan=plan.with_batch(requests), tok_s_gpu=rate, ttft_s=ttft, terms=terms)
    return best


def serve_curve(
    work: ServeWorkload,
    system: System,
    *,
    eff: Efficiency,
    mode: ServingMode = ServingMode.BEST,
    max_gpus: int | None = None,
    max_decode_ep: int | None = None,
) -> ServeCurve:
    """Every plan (instances up to ``max_gpus``, default two NVLink domains or 64 GPUs) and batch, as a curve.

    ``max_decode_ep`` holds decode to the expert parallelism a published run used (e.g. 8: one B200 node).
    """
    limit = max_gpus if max_gpus is not None else max(64, min(2 * system.domain_gpus, 72))
    links = links_of(system)
    model, prec = work.model, work.precision
    ratio = work.isl / max(work.osl, 1)
    kv_bytes = work.isl * model.kv_bytes_per_token(KV_PRECISION[prec])
    disagg = None
    if mode in (ServingMode.DISAGGREGATED, ServingMode.BEST):
        disagg = best_prefill(work, system, eff=eff, max_gpus=limit, ttft_budget_s=work.ttft_s)
    points: list[ServePoint] = []
    evaluated = 0
    for plan in candidate_plans(model, max_gpus=limit):
        if max_decode_ep is not None and plan.ep > max_decode_ep:
            continue
        top = max_batch(model, prec, plan, context=work.max_context, hbm_bytes=system.gpu.hbm_bytes)
        if top < 1:
            continue
        span = Span.packed(plan.gpus, system.domain_gpus)
        # a best plan balances its experts (the runtime's EPLB); a recipe without it is replayed as it ran
        imbalance = expert_imbalance(model, plan.ep, eplb=True)
        agg_prefill = None
        if mode in (ServingMode.AGGREGATED, ServingMode.BEST):
            requests = max(1, 8192 // max(work.isl, 1))
            agg_prefill = prefill(
                model, prec, plan, gpu=system.gpu, links=links, span=span, isl=work.isl, requests=requests, eff=eff
            )
            agg_rate = requests * work.isl / agg_prefill.time_s / plan.gpus
            agg_ttft = prefill(
                model, prec, plan, gpu=system.gpu, links=links, span=span, isl=work.isl, requests=1, eff=eff
            ).time_s
        for mtp, per_rank in _draws(work.mtp, min(top, 1 << 14) // plan.dp):
            batch = per_rank * plan.dp
            p = plan.with_batch(batch)
            step = decode_step(
                model,
                prec,
                p,
                gpu=system.gpu,
                links=links,
                span=span,
                context=work.decode_context,
                eff=eff,
                mtp=mtp,
                imbalance=imbalance,
            )
            evaluated += 1
            inter = mtp.tokens_emitted / step.step_s
            decode_rate = batch * inter / p.gpus
            if agg_prefill is not None:
                t_dec, t_pre = 1.0 / decode_rate, ratio / agg_rate
                share = t_pre / (t_dec + t_pre)
                ttft = agg_ttft + step.step_s
                if work.ttft_s is None or ttft <= work.ttft_s:
                    points.append(
                        ServePoint(
                            interactivity=inter * (1.0 - share),
                            tok_s_gpu=1.0 / (t_dec + t_pre),
                            ttft_s=ttft,
                            plan=p,
                            mode=ServingMode.AGGREGATED,
                            step=step,
                            prefill_share=share,
                            mtp=mtp,
                        )
                    )
            if disagg is not None:
                t_dec, t_pre = 1.0 / decode_rate, ratio / disagg.tok_s_gpu
                same_domain = disagg.plan.gpus + p.gpus <= system.domain_gpus
                transfer = kv_bytes / (links.nvlink_bytes_s if same_domain else links.nic_bytes_s)
                points.append(
                    ServePoint(
                        interactivity=inter,
                        tok_s_gpu=1.0 / (t_dec + t_pre),
                        ttft_s=disagg.ttft_s + transfer,
                        plan=p,
                        mode=ServingMode.DISAGGREGATED,
                        step=step,
                        prefill_plan=disagg.plan,
                        mtp=mtp,
                        prefill_share=t_pre / (t_dec + t_pre),
                    )
                )
    return ServeCurve(_pareto(points), evaluated)
