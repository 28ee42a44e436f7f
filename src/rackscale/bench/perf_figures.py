"""The performance model against every published figure in :mod:`rackscale.bench.perf_published`.

Serving, two ways:

- **InferenceX** publishes the runs behind its curves (each a recipe: prefill and decode pools, users, MTP
  drafts, batch cap, attention layout, EPLB) and reads its iso-interactivity figures off the envelope of
  those runs with a monotone cubic. The model replays the same recipes (:mod:`rackscale.llm.recipes`) and
  reads its own envelope the same way, counting what InferenceX counts (input + output tokens per GPU of both
  pools). Each run is also a prediction of its own (:func:`run_results`).
- **MLPerf** publishes totals, not recipes: both sides are the model's best plan at the figure's latency
  bound (or peak), counting output tokens as MLPerf does.

Training: the figure's TP x PP x DP plan on its chip, counted as the source counts. Only the calibration
runs (``rackscale.llm.calibration``) are fitted; the dominant term of each side is kept, so a ratio that comes
out right for the wrong reason shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from rackscale.bench.perf_published import (
    INFERENCEX_DSR1_POINTS,
    IX_MEAN_LENGTH,
    SERVING_FIGURES,
    TRAINING_FIGURES,
    ParetoPoint,
    ServingFigure,
    TokenCount,
    TrainingFigure,
)
from rackscale.llm.calibration import (
    SERVING_COMPUTE_RUN,
    SERVING_OVERHEAD_RUN,
    TRAINING_POINT,
    serving_efficiency,
    training_efficiency,
)
from rackscale.llm.decode import DEEPSEEK_MTP, NO_MTP, StepTerms
from rackscale.llm.hardware import system_named
from rackscale.llm.models import BUILTIN_MODELS, ModelSpec, model_named
from rackscale.llm.plans import ServePlan
from rackscale.llm.precision import Precision
from rackscale.llm.recipes import DisaggRecipe, RecipeOutcome, envelope, iso_interactivity, monotone_at, replay
from rackscale.llm.serving import ServeWorkload, ServingMode, serve_curve
from rackscale.llm.train_plans import train_step_on
from rackscale.llm.training import TrainPlan, TrainWorkload

# Figures the issue names as the ones to reproduce (the others are shown too, as further predictions).
HEADLINE = (
    "inferencex-dsr1-fp4-125",
    "inferencex-dsr1-fp4-peak",
    "inferencex-dsr1-fp4-275",
    "mlperf-v5.1-dsr1-server",
    "mlperf-v5.1-405b-interactive",
    "mlperf-v5.1-405b-server",
)
IX_FAMILY = "inferencex"
# Every published run's prefill pool is workers of 4 GPUs, attention data parallel with EP4 (IX_RECIPES).
IX_PREFILL_WORKER = ServePlan(tp=1, dp=4, ep=4)


# Where the model misses a published figure by more than 20 %, and why (docs/perf.md says more). The tests
# check both ways: every other figure is within 20 %, and each of these is still outside it (so the list
# cannot go stale when the model improves).
_STEEP = (
    "read on a steep segment between runs: a 10 % error in one published run's interactivity moves the "
    "published ratio itself by {cond} (iso_conditioning), more than the 20 % goal"
)
KNOWN_MISSES: dict[str, str] = {
    "inferencex-dsr1-fp4-45": "+22 %: GB200's compute-bound runs at concurrency 2,253 and 4,301 carry +22-26 % "
    "throughput in the model (the real runs queue for prefill: 793 users of 4,301 wait at 19k prompt tokens/s "
    "per prefill GPU), B200's +4 %",
    "inferencex-dsr1-fp4-60": "+26 %: as at 45",
    "inferencex-dsr1-fp4-75": "+22 %: as at 45; " + _STEEP.format(cond="25 %"),
    "inferencex-dsr1-fp4-90": "x4.4 vs x1.73: B200's run at concurrency 875 reaches 89 tok/s/user in the model "
    "(published 102, -12 %), so B200's envelope at 90 falls to its next run; " + _STEEP.format(cond="48 %"),
    "inferencex-dsr1-fp4-100": "x4.7 vs x2.23: as at 90",
    "inferencex-dsr1-fp4-150": "x7.3 vs x3.30: GB200's DEP32 run at concurrency 180 reaches 191 tok/s/user in the "
    "model (published 164, +16 %); " + _STEEP.format(cond="46 %"),
    "inferencex-dsr1-fp4-175": "as at 150; " + _STEEP.format(cond="69 %"),
    "inferencex-dsr1-fp4-275": "x1.12 vs x0.82: the model's fastest B200 run is 10 % slower than published (278 vs "
    "309 tok/s/user), so B200's envelope barely reaches 275; a 10 % error in either SKU's fastest run takes "
    "the published read off its curve",
    "mlperf-v5.1-dsr1-offline": "+20.4 %: both compute-bound at large batch (best plans); GB200's wider EP16 "
    "pool against B200's EP8 under the measured MoE kernels",
}
# Measured runs whose interactivity the model misses by more than 20 % (the tests check both ways).
KNOWN_RUN_MISSES: dict[tuple[str, int], str] = {}


@dataclass(frozen=True, slots=True, kw_only=True)
class Side:
    """One side of a figure as the model reproduces it."""

    value: float  # tok/s per GPU, counted as the figure counts
    plan: str  # the decode plan (InferenceX: the replayed run that sets the envelope there)
    dominant: str  # the term that sets that plan's decode step
    step: StepTerms


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingResult:
    figure: ServingFigure
    a: Side | None
    b: Side | None
    method: str  # "recipes": InferenceX's runs replayed; "best plan": the model's own best plan

    @property
    def ratio(self) -> float | None:
        return None if self.a is None or self.b is None else self.a.value / self.b.value

    @property
    def published_ratio(self) -> float:
        return self.figure.value_a / self.figure.value_b

    @property
    def error(self) -> float | None:
        r = self.ratio
        return None if r is None else r / self.published_ratio - 1.0

    @property
    def calibrated(self) -> bool:
        return False  # the calibration runs are single runs, not figures (see run_results)


def ix_workload() -> ServeWorkload:
    """InferenceX's DeepSeek-R1 FP4 "1k/1k": lengths uniform in [819, 1024], MTP as each recipe sets it."""
    return ServeWorkload(
        model=model_named("deepseek-r1"), precision=Precision.FP4, isl=IX_MEAN_LENGTH, osl=IX_MEAN_LENGTH,
        mtp=DEEPSEEK_MTP,
    )  # fmt: skip


def recipe_of(point: ParetoPoint) -> DisaggRecipe:
    return DisaggRecipe(
        concurrency=point.conc,
        prefill_gpus=point.prefill_gpus,
        prefill_tp=point.prefill_tp,
        decode_gpus=point.decode_gpus,
        decode_ep=point.decode_ep,
        attention_dp=point.attention_dp,
        mtp_drafts=point.mtp_drafts,
        max_batch_per_rank=point.max_batch_per_rank,
        eplb=point.eplb,
        moe_backend=point.moe_backend,
        prefill_worker=IX_PREFILL_WORKER,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """One measured InferenceX run against the model's replay of its recipe."""

    point: ParetoPoint
    model: RecipeOutcome

    @property
    def interactivity_error(self) -> float:
        return self.model.interactivity / self.point.tok_s_user - 1.0

    @property
    def throughput_error(self) -> float:
        return self.model.total_tok_s_gpu / self.point.tok_s_gpu - 1.0

    @property
    def calibrated(self) -> str | None:
        """Which constant this run calibrates, if any."""
        for run, constant in ((SERVING_OVERHEAD_RUN, "step overhead"), (SERVING_COMPUTE_RUN, "compute share")):
            if run.system == self.point.system and run.recipe.concurrency == self.point.conc:
                return constant
        return None


@lru_cache(maxsize=1)
def run_results() -> tuple[RunResult, ...]:
    """Every published InferenceX run, replayed."""
    work = ix_workload()
    out = []
    for point in INFERENCEX_DSR1_POINTS:
        system = system_named(point.system)
        outcome = replay(work, system, recipe_of(point), eff=serving_efficiency(system.gpu))
        out.append(RunResult(point=point, model=outcome))
    return tuple(out)


def _replayed(system: str) -> tuple[RecipeOutcome, ...]:
    return tuple(r.model for r in run_results() if r.point.system == system)


def _ix_side(fig: ServingFigure, system: str) -> Side | None:
    runs = _replayed(system)
    if fig.interactivity is None:  # the curve's peak
        top = max(runs, key=lambda o: o.total_tok_s_gpu, default=None)
        return None if top is None else _side(top.total_tok_s_gpu, top)
    value = iso_interactivity(runs, fig.interactivity)
    if value is None:
        return None
    # the run that bounds the envelope's segment from above in interactivity: the recipe in force there
    frontier = envelope((o.interactivity, o.total_tok_s_gpu) for o in runs)
    target = min((x for x, _ in frontier if x >= fig.interactivity), default=fig.interactivity)
    near = min(runs, key=lambda o: abs(o.interactivity - target))
    return _side(value, near)


def _side(value: float, run: RecipeOutcome) -> Side:
    plan = f"{run.plan.label()} (conc {run.recipe.concurrency:,})"
    return Side(value=value, plan=plan, dominant=run.step.dominant, step=run.step)


def _best_plan_side(fig: ServingFigure, system_name: str, mode: ServingMode) -> Side | None:
    work = ServeWorkload(
        model=model_named(fig.model),
        precision=fig.precision,
        isl=fig.isl,
        osl=fig.osl,
        mtp=DEEPSEEK_MTP if fig.mtp else NO_MTP,
        ttft_s=fig.ttft_s,
    )
    system = system_named(system_name)
    curve = serve_curve(work, system, eff=serving_efficiency(system.gpu), mode=mode)
    point = curve.peak if fig.interactivity is None else curve.best_at(fig.interactivity)
    if point is None:
        return None
    scale = (fig.isl + fig.osl) / fig.osl if fig.counts is TokenCount.TOTAL else 1.0
    return Side(value=point.tok_s_gpu * scale, plan=point.plan.label(), dominant=point.step.dominant, step=point.step)


RUN_ERROR = 0.10  # the run error the conditioning of an iso figure is measured against


def iso_conditioning(fig: ServingFigure, run_error: float = RUN_ERROR) -> float | None:
    """How much the *published* ratio of an InferenceX iso figure moves when one published run's interactivity
    is off by ``run_error`` (either way; the worst run): what a model's per-run error of that size can do to
    the figure. ``inf`` when the read leaves a curve; ``None`` for a figure that is not an iso read."""
    if not fig.key.startswith(IX_FAMILY) or fig.interactivity is None:
        return None
    x = fig.interactivity

    def ratio(points: list[tuple[str, float, float]]) -> float | None:
        a = monotone_at(envelope((u, t) for s, u, t in points if s == fig.system_a), x)
        b = monotone_at(envelope((u, t) for s, u, t in points if s == fig.system_b), x)
        return None if a is None or b is None or b <= 0 else a / b

    runs = [(p.system, p.tok_s_user, p.tok_s_gpu) for p in INFERENCEX_DSR1_POINTS]
    base = ratio(runs)
    if base is None:
        return None
    worst = 0.0
    for i, (system, user, tok) in enumerate(runs):
        for sign in (-1.0, 1.0):
            moved = ratio([*runs[:i], (system, user * (1.0 + sign * run_error), tok), *runs[i + 1 :]])
            worst = max(worst, float("inf") if moved is None else abs(moved / base - 1.0))
    return worst


def evaluate_serving(fig: ServingFigure) -> ServingResult:
    if fig.key.startswith(IX_FAMILY):
        return ServingResult(figure=fig, a=_ix_side(fig, fig.system_a), b=_ix_side(fig, fig.system_b), method="recipes")
    return ServingResult(
        figure=fig,
        a=_best_plan_side(fig, fig.system_a, fig.mode),
        b=_best_plan_side(fig, fig.system_b, fig.mode_b or fig.mode),
        method="best plan",
    )


def serving_results() -> tuple[ServingResult, ...]:
    return tuple(evaluate_serving(f) for f in SERVING_FIGURES)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingResult:
    figure: TrainingFigure
    tflops_per_gpu: float | None  # counted as the source counts (None: a condition the model lacks)
    mfu: float | None
    dominant: str | None
    note: str = ""

    @property
    def error(self) -> float | None:
        if self.tflops_per_gpu is None:
            return None
        return self.tflops_per_gpu / self.figure.tflops_per_gpu - 1.0

    @property
    def calibrated(self) -> bool:
        return self.figure.key == TRAINING_POINT.key


def _model_of(fig: TrainingFigure) -> ModelSpec:
    if fig.arch is None or fig.model in BUILTIN_MODELS:
        return model_named(fig.model)
    a = fig.arch
    # The paper's GPT: MHA, a 4h GELU MLP, tied input/output embeddings.
    return ModelSpec(
        name=fig.model,
        layers=a.layers,
        hidden=a.hidden,
        heads=a.heads,
        kv_heads=a.heads,
        head_dim=a.hidden // a.heads,
        ffn=4 * a.hidden,
        vocab=a.vocab,
        tied_embeddings=True,
        gated_ffn=False,
        source=fig.source,
    )


def evaluate_training(fig: TrainingFigure) -> TrainingResult:
    system = system_named(fig.system)
    work = TrainWorkload(
        model=_model_of(fig),
        precision=fig.precision,
        seq_len=fig.seq_len,
        global_batch=fig.global_batch,
        fused_attention=fig.fused_attention,
    )
    plan = TrainPlan(
        tp=fig.tp,
        cp=fig.cp,
        pp=fig.pp,
        dp=fig.dp,
        micro_batch=1,
        virtual_stages=fig.virtual_stages,
        recompute=fig.counts_recompute,
    )
    step = train_step_on(system, work, plan, training_efficiency(system.gpu))
    return TrainingResult(figure=fig, tflops_per_gpu=step.achieved_tflops_per_gpu, mfu=step.mfu, dominant=step.dominant)


def training_results() -> tuple[TrainingResult, ...]:
    return tuple(evaluate_training(f) for f in TRAINING_FIGURES)
