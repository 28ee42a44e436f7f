"""The performance model against every published figure in :mod:`rackscale.bench.perf_published`.

Serving: both curves are computed under the figure's conditions (precision, ISL/OSL, MTP, TTFT bound, the
serving mode on each side; InferenceX's B200 decode held to EP 8, one node, as every published B200 run
was) and read at the figure's interactivity (or at each curve's peak). Training: the figure's TP x PP x DP
plan on its chip, counted as the source counts. Every ratio is a prediction except the two calibration
points (``rackscale.llm.calibration``); the dominant term of each side's step is kept, so a ratio that
comes out right for the wrong reason shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from rackscale.bench.perf_published import SERVING_FIGURES, TRAINING_FIGURES, ServingFigure, TrainingFigure
from rackscale.llm.calibration import SERVING_POINT, TRAINING_POINT, serving_efficiency, training_efficiency
from rackscale.llm.decode import DEEPSEEK_MTP, NO_MTP
from rackscale.llm.hardware import system_named
from rackscale.llm.models import BUILTIN_MODELS, ModelSpec, model_named
from rackscale.llm.serving import ServePoint, ServeWorkload, ServingMode, serve_curve
from rackscale.llm.train_plans import train_step_on
from rackscale.llm.training import TrainPlan, TrainWorkload

# The published InferenceX B200 runs keep decode inside one 8-GPU node (perf-published.md).
PUBLISHED_MAX_DECODE_EP = {("inferencex", "b200"): 8}
# Figures the issue names as the ones to reproduce (the others are shown too, as further predictions).
HEADLINE = (
    "inferencex-dsr1-fp4-125",
    "inferencex-dsr1-fp4-peak",
    "inferencex-dsr1-fp4-275",
    "mlperf-v5.1-dsr1-server",
    "mlperf-v5.1-405b-interactive",
    "mlperf-v5.1-405b-server",
)


# Where the model misses a published figure by more than 20 %, and why (docs/perf.md says more). The tests
# check both ways: every other figure is within 20 %, and each of these is still outside it (so the list
# cannot go stale when the model improves).
KNOWN_MISSES: dict[str, str] = {
    "inferencex-dsr1-fp4-75": "-21 %: from 75 tok/s/user on the published B200 curve falls faster than the model's",
    "inferencex-dsr1-fp4-90": "-37 %: as at 75",
    "inferencex-dsr1-fp4-100": "-29 %: as at 75",
    "inferencex-dsr1-fp4-125": "x6.4 vs x4.39: the cause is right (B200, EP held to a node, streams its experts "
    "from HBM every step and is down to 86 sequences; GB200 keeps EP32 on NVLink, compute-bound) and B200's figure "
    "is near the published one (1,321 vs 941), but the model's GB200 keeps 2x the published throughput",
    "inferencex-dsr1-fp4-150": "the model's GB200 runs EP32-64 pools of thousands of sequences here; the published "
    "GB200 recipes run wide EP at a few sequences per GPU (the benchmark's envelope is over the recipes it ran, the "
    "model's over every plan), or wide EP at small batch costs more than the model charges",
    "inferencex-dsr1-fp4-175": "as at 150",
    "inferencex-dsr1-fp4-200": "as at 150",
    "inferencex-dsr1-fp4-275": "x1.00 vs x0.82: both run TP8 at a few sequences in the model; B200's published "
    "lead there is not modelled",
    "megatron-t1-1.7b": "+23 %: a 1.7B model's small GEMMs run below the 175B-fitted efficiency",
    "llama3-405b-8192-8k": "-22 %: H100 trains with the A100-fitted efficiency, and DP gradients are not "
    "overlapped with backward (Llama 3 overlaps them)",
    "llama3-405b-16384-8k": "-36 %: as above, with twice the DP ranks",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingResult:
    figure: ServingFigure
    a: ServePoint | None
    b: ServePoint | None

    @property
    def ratio(self) -> float | None:
        return None if self.a is None or self.b is None else self.a.tok_s_gpu / self.b.tok_s_gpu

    @property
    def published_ratio(self) -> float:
        return self.figure.value_a / self.figure.value_b

    @property
    def error(self) -> float | None:
        r = self.ratio
        return None if r is None else r / self.published_ratio - 1.0

    @property
    def calibrated(self) -> bool:
        return self.figure.key == SERVING_POINT.key


def _max_ep(fig: ServingFigure, system: str) -> int | None:
    family = fig.key.split("-", 1)[0]
    return PUBLISHED_MAX_DECODE_EP.get((family, system))


def _point(fig: ServingFigure, system_name: str, mode: ServingMode) -> ServePoint | None:
    work = ServeWorkload(
        model=model_named(fig.model),
        precision=fig.precision,
        isl=fig.isl,
        osl=fig.osl,
        mtp=DEEPSEEK_MTP if fig.mtp else NO_MTP,
        ttft_s=fig.ttft_s,
    )
    system = system_named(system_name)
    curve = serve_curve(
        work, system, eff=serving_efficiency(system.gpu), mode=mode, max_decode_ep=_max_ep(fig, system_name)
    )
    return curve.peak if fig.interactivity is None else curve.best_at(fig.interactivity)


def evaluate_serving(fig: ServingFigure) -> ServingResult:
    return ServingResult(
        figure=fig,
        a=_point(fig, fig.system_a, fig.mode),
        b=_point(fig, fig.system_b, fig.mode_b or fig.mode),
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
    if fig.cp > 1:
        return TrainingResult(
            figure=fig, tflops_per_gpu=None, mfu=None, dominant=None, note="context parallelism is not modelled"
        )
    system = system_named(fig.system)
    work = TrainWorkload(
        model=_model_of(fig), precision=fig.precision, seq_len=fig.seq_len, global_batch=fig.global_batch
    )
    plan = TrainPlan(tp=fig.tp, pp=fig.pp, dp=fig.dp, micro_batch=1, recompute=fig.counts_recompute)
    step = train_step_on(system, work, plan, training_efficiency(system.gpu))
    return TrainingResult(figure=fig, tflops_per_gpu=step.achieved_tflops_per_gpu, mfu=step.mfu, dominant=step.dominant)


def training_results() -> tuple[TrainingResult, ...]:
    return tuple(evaluate_training(f) for f in TRAINING_FIGURES)
