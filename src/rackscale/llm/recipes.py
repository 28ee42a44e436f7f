"""A measured serving run's recipe through the model, and iso-interactivity read the way dashboards read it.

A benchmark's Pareto curve is not "what the hardware can do": it is the envelope of the recipes that were
run, each a prefill pool, a decode pool and a number of users, and its iso-interactivity figures are read
off that envelope by interpolation between runs (InferenceX reads them with a monotone cubic, d3's
``curveMonotoneX``; :func:`monotone_at` is that curve). To reproduce such a figure the model replays the same
recipes, not the best plan it could find, and reads its own envelope the same way.

A replayed run is a closed loop at steady state: ``concurrency`` users each send a request, wait for its
prefill (one pass of the prefill pool) and receive ``osl`` tokens at the decode pool's interactivity, then
send the next. With ``X`` requests/s and ``D = osl / interactivity`` seconds of decode per request, the
decode pool holds ``X * D`` users (Little's law) and ``X = concurrency / (prefill pass + D)``, unless the
prefill pool cannot take that many prompts (``X`` is capped at its rate and the other users queue for
prefill), or the decode pool is full (the runtime's batch cap: ``X = held users / D``, the others queue).
Interactivity depends on how many users decode together, so the two are solved together.

The throughput counted is the benchmark's: **input and output** tokens per second per GPU of both pools
(InferenceX's ``tput_per_gpu`` is ``total_token_throughput / total GPUs``); :attr:`RecipeOutcome.output_tok_s_gpu`
is the output tokens alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from rackscale.llm.decode import Efficiency, StepTerms, decode_step, expert_imbalance
from rackscale.llm.fabric import Span
from rackscale.llm.hardware import System
from rackscale.llm.kernels import MoeBackend
from rackscale.llm.plans import ServePlan, max_batch, max_tp
from rackscale.llm.serving import ServeWorkload, best_prefill, links_of
from rackscale.model.errors import RackscaleError

_SOLVE_STEPS = 48  # bisection steps on the decoding users: 2^-48 of the range


class RecipeError(RackscaleError, ValueError):
    """A recipe the model cannot run: pools that do not divide into instances, or weights that do not fit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DisaggRecipe:
    """A disaggregated serving run as benchmarks publish it."""

    concurrency: int  # users in the closed loop
    prefill_gpus: int
    prefill_tp: int  # GPUs per prefill worker (the model's plans up to this size are tried)
    decode_gpus: int
    decode_ep: int  # expert parallelism of a decode instance (its GPUs); 1: tensor-parallel instances
    attention_dp: bool | None = None  # attention data parallel on decode; None: the layout that serves faster
    mtp_drafts: int | None = None  # MTP drafts per step on decode; None: the workload's
    max_batch_per_rank: int | None = None  # the runtime's decode batch cap per attention rank (None: HBM's)
    eplb: bool = False  # the runtime's expert load balancer on decode
    moe_backend: MoeBackend | None = None  # the decode MoE kernel (None: the faster measured one)
    prefill_worker: ServePlan | None = None  # one prefill worker's layout (None: the best of up to prefill_tp GPUs)

    @property
    def gpus(self) -> int:
        return self.prefill_gpus + self.decode_gpus


@dataclass(frozen=True, slots=True, kw_only=True)
class RecipeOutcome:
    recipe: DisaggRecipe
    interactivity: float  # tok/s per user while decoding (1 / TPOT)
    total_tok_s_gpu: float  # input + output tokens/s per GPU of both pools (the benchmark's count)
    output_tok_s_gpu: float
    requests_s: float
    decoding_users: float  # users in the decode pool (the rest wait for or are in prefill)
    plan: ServePlan  # one decode instance, its batch the mean users per instance (rounded)
    step: StepTerms
    prefill_plan: ServePlan
    prefill_bound: bool  # the prefill pool's rate capped the request rate


def decode_layouts(work: ServeWorkload, ep: int, attention_dp: bool | None = None) -> tuple[ServePlan, ...]:
    """The decode instances of an expert-parallel degree: attention data parallel over the EP group (each GPU
    its own sequences, TP 1) or attention tensor parallel over it (TP = EP, when the model is that wide), as
    TensorRT-LLM and SGLang lay them out; ``None`` gives both."""
    model = work.model
    if not model.is_moe or ep <= 1:
        return (ServePlan(tp=max(1, ep)),)
    if model.experts % ep:
        raise RecipeError(f"decode EP {ep} does not divide {model.name}'s {model.experts} experts")
    layouts = []
    if attention_dp is not False:
        layouts.append(ServePlan(tp=1, dp=ep, ep=ep))
    if attention_dp is not True and ep <= max_tp(model):
        layouts.append(ServePlan(tp=ep, dp=1, ep=ep))
    if not layouts:
        raise RecipeError(f"attention TP {ep} is wider than {model.name} allows (at most {max_tp(model)})")
    return tuple(layouts)


def replay(work: ServeWorkload, system: System, recipe: DisaggRecipe, *, eff: Efficiency) -> RecipeOutcome:
    """The model's steady state of ``recipe`` on ``system`` (the attention layout that serves it fastest)."""
    if recipe.concurrency < 1 or recipe.prefill_gpus < 1 or recipe.decode_gpus < 1:
        raise RecipeError(f"recipe {recipe}: concurrency and both pools must be at least 1")
    worker = recipe.prefill_worker
    if worker is not None and recipe.prefill_gpus % worker.gpus:
        raise RecipeError(f"{recipe.prefill_gpus} prefill GPUs do not divide into workers of {worker.gpus} GPUs")
    workers = None if worker is None else (worker,)
    prefill = best_prefill(work, system, eff=eff, max_gpus=max(1, recipe.prefill_tp), ttft_budget_s=None, plans=workers)
    if prefill is None:
        raise RecipeError(f"no prefill plan of up to {recipe.prefill_tp} GPUs holds {work.model.name}")
    prefill_rate = prefill.tok_s_gpu * recipe.prefill_gpus / max(work.isl, 1)  # requests/s the pool can take
    prefill_pass = prefill.terms.time_s
    if recipe.mtp_drafts is not None:
        if recipe.mtp_drafts < 0:
            raise RecipeError(f"recipe {recipe}: mtp_drafts must be 0 or more")
        work = replace(work, mtp=work.mtp.with_drafts(recipe.mtp_drafts))
    imbalance = expert_imbalance(work.model, recipe.decode_ep, eplb=recipe.eplb)
    best: RecipeOutcome | None = None
    for plan in decode_layouts(work, recipe.decode_ep, recipe.attention_dp):
        if recipe.decode_gpus % plan.gpus:
            raise RecipeError(f"{recipe.decode_gpus} decode GPUs do not divide into instances of {plan.gpus}")
        instances = recipe.decode_gpus // plan.gpus
        room = max_batch(work.model, work.precision, plan, context=work.max_context, hbm_bytes=system.gpu.hbm_bytes)
        if recipe.max_batch_per_rank is not None:
            room = min(room, recipe.max_batch_per_rank * plan.dp)
        if room < 1:
            continue
        span = Span.packed(plan.gpus, system.domain_gpus)
        solved = _steady_state(
            work, system, plan, span, eff=eff, recipe=recipe, instances=instances, room=float(room),
            prefill_pass_s=prefill_pass, prefill_rate=prefill_rate, imbalance=imbalance,
        )  # fmt: skip
        users, x, step = solved
        inter = work.mtp.tokens_emitted / step.step_s
        outcome = RecipeOutcome(
            recipe=recipe,
            interactivity=inter,
            total_tok_s_gpu=x * (work.isl + work.osl) / recipe.gpus,
            output_tok_s_gpu=x * work.osl / recipe.gpus,
            requests_s=x,
            decoding_users=users * instances,
            plan=plan.with_batch(max(1, round(users))),
            step=step,
            prefill_plan=prefill.plan,
            prefill_bound=x >= prefill_rate * (1.0 - 1e-9),
        )
        if best is None or outcome.interactivity > best.interactivity:
            best = outcome
    if best is None:
        raise RecipeError(f"no decode instance of EP {recipe.decode_ep} holds {work.model.name} on {system.name}")
    return best


def _steady_state(
    work: ServeWorkload,
    system: System,
    plan: ServePlan,
    span: Span,
    *,
    eff: Efficiency,
    recipe: DisaggRecipe,
    instances: int,
    room: float,
    prefill_pass_s: float,
    prefill_rate: float,
    imbalance: float,
) -> tuple[float, float, StepTerms]:
    """(users per decode instance, requests/s, the step at that load): where the decode pool holds what
    Little's law puts there. Bisection: more users per instance slow every user, so fewer arrive per second."""
    links = links_of(system)

    def at(users: float) -> tuple[float, float, StepTerms]:
        step = decode_step(
            work.model, work.precision, plan, gpu=system.gpu, links=links, span=span,
            context=work.decode_context, eff=eff, mtp=work.mtp, batch=max(users, 1e-9), imbalance=imbalance,
            moe_backend=recipe.moe_backend,
        )  # fmt: skip
        decode_s = work.osl * step.step_s / work.mtp.tokens_emitted
        x = min(recipe.concurrency / (prefill_pass_s + decode_s), prefill_rate)
        return x, x * decode_s / instances, step

    lo, hi = 0.0, min(recipe.concurrency / instances, room)
    for _ in range(_SOLVE_STEPS):
        mid = (lo + hi) / 2.0
        if at(mid)[1] > mid:
            lo = mid
        else:
            hi = mid
    users = (lo + hi) / 2.0
    x, held, step = at(users)
    # capped by the runtime's batch (or HBM), the decode pool holds ``users`` and the rest wait their turn
    x *= min(1.0, users / held) if held > 0 else 1.0
    return users, x, step


def envelope(points: Iterable[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """The Pareto frontier of (interactivity, throughput) points, by rising interactivity."""
    frontier: list[tuple[float, float]] = []
    best = float("-inf")
    for x, y in sorted(points, key=lambda p: (-p[0], -p[1])):
        if y > best:
            frontier.append((x, y))
            best = y
    return tuple(reversed(frontier))


def monotone_at(points: Sequence[tuple[float, float]], x: float) -> float | None:
    """The monotone cubic through ``points`` (sorted by x) at ``x``: Steffen's tangents (1990), as d3's
    ``curveMonotoneX`` draws it, so a value read here matches a value read off such a chart. ``None`` outside
    the points' range."""
    n = len(points)
    if n == 0 or not points[0][0] <= x <= points[-1][0]:
        return None
    if n == 1:
        return points[0][1]
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    h = [xs[i + 1] - xs[i] for i in range(n - 1)]
    s = [(ys[i + 1] - ys[i]) / h[i] if h[i] else 0.0 for i in range(n - 1)]
    m = [0.0] * n
    for i in range(1, n - 1):
        if h[i - 1] + h[i] <= 0:
            continue
        p = (s[i - 1] * h[i] + s[i] * h[i - 1]) / (h[i - 1] + h[i])
        sign = (s[i - 1] > 0) - (s[i - 1] < 0) + (s[i] > 0) - (s[i] < 0)
        m[i] = sign * min(abs(s[i - 1]), abs(s[i]), 0.5 * abs(p))
    if n == 2:
        m[0] = m[1] = s[0]
    else:  # d3's end tangents: a parabola through the end point and its neighbour's tangent
        m[0] = (3 * s[0] - m[1]) / 2
        m[-1] = (3 * s[-1] - m[-2]) / 2
    k = next(i for i in range(n - 1) if x <= xs[i + 1])
    if h[k] == 0:
        return ys[k]
    t = (x - xs[k]) / h[k]
    return (
        (2 * t**3 - 3 * t**2 + 1) * ys[k]
        + (t**3 - 2 * t**2 + t) * h[k] * m[k]
        + (-2 * t**3 + 3 * t**2) * ys[k + 1]
        + (t**3 - t**2) * h[k] * m[k + 1]
    )


def iso_interactivity(outcomes: Iterable[RecipeOutcome], interactivity: float) -> float | None:
    """Total tokens/s per GPU at ``interactivity`` on the envelope of ``outcomes`` (``None`` outside it)."""
    frontier = envelope((o.interactivity, o.total_tok_s_gpu) for o in outcomes)
    return monotone_at(frontier, interactivity)


__all__ = [
    "DisaggRecipe",
    "RecipeError",
    "RecipeOutcome",
    "decode_layouts",
    "envelope",
    "iso_interactivity",
    "monotone_at",
    "replay",
]
