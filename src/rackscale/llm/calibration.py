"""The fitted constants of the model, and the one published point each is fitted on.

Everything else in ``rackscale.llm`` is first principles: FLOPs and bytes from the model's configuration,
peaks and bandwidths from datasheets, and stated measurements or assumptions (``Efficiency``'s memory share
and per-layer overhead, the collectives' latencies, MTP acceptance, expert load imbalance: docs/perf.md says
where each comes from). What no datasheet gives is how close real kernels come to the compute peak, and how
long a serving stack's step takes when it has nothing to compute. Those are fitted, on one published
measurement per GPU type, each a run whose recipe is known (so the model replays that very run):

- **B200** (serving): ``Efficiency.compute`` on InferenceX's B200 peak-throughput run (DeepSeek-R1 FP4,
  concurrency 10,860, decode 5 x EP4 with attention DP, batch cap 512 per rank, one MTP draft): its
  interactivity, 21.34 tok/s/user, where decode is compute-bound (the point tests the term it fits);
- **GB200** (serving): ``Efficiency.step_overhead_s`` on InferenceX's fastest GB200 run (concurrency 4,
  decode 4 x TP8/EP8, three MTP drafts): 286.4 tok/s/user, one user per decode instance, where the step is
  nearly all fixed cost;
- **A100** (training): ``TrainEfficiency.compute`` on one row of Megatron-LM (Narayanan et al. 2021, Table 2:
  GPT-3 175B on 384 A100, TP 8 x PP 12, batch 1,536: 153 TFLOP/s per GPU as the paper counts).

The two serving constants are fitted together (each fit holds the other), and every chip shares them (the
same serving stack and kernels: B200 and GB200 are one die); every chip trains with the A100 value. Every
other published figure, and every other measured run, is a prediction. ``tests/llm/test_calibration.py``
re-runs the fits and checks the stored constants are what they give, so none can drift to make some other
test pass; ``tests/bench/test_perf_published.py`` checks the two runs below are the post's own rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from rackscale.llm.decode import DEEPSEEK_MTP, Efficiency
from rackscale.llm.hardware import GpuSpec, system_named
from rackscale.llm.kernels import MoeBackend
from rackscale.llm.models import model_named
from rackscale.llm.plans import ServePlan
from rackscale.llm.precision import Precision
from rackscale.llm.recipes import DisaggRecipe, replay
from rackscale.llm.serving import ServeWorkload
from rackscale.llm.train_plans import train_step_on
from rackscale.llm.training import TrainEfficiency, TrainPlan, TrainWorkload


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingRun:
    """One measured serving run the model replays: its recipe and the interactivity it reached."""

    key: str
    system: str
    model: str
    precision: Precision
    length: int  # mean input and output tokens of the run's requests
    recipe: DisaggRecipe
    tok_s_user: float  # measured: 1 / TPOT


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingPoint:
    key: str
    system: str
    model: str
    gpus: int
    tp: int
    pp: int
    global_batch: int
    seq_len: int
    virtual_stages: int
    tflops_per_gpu: float  # as the paper counts: recomputation included
    fused_attention: bool  # the run's attention kernels (``TrainWorkload.fused_attention``)


# InferenceX's runs (perf_published.INFERENCEX_DSR1_POINTS, docs/perf-published.md): lengths uniform in
# [819, 1024] (mean 922), FP8 KV cache, TensorRT-LLM with MTP.
SERVING_OVERHEAD_RUN = ServingRun(
    key="inferencex-dsr1-fp4-gb200-conc4",
    system="gb200",
    model="deepseek-r1",
    precision=Precision.FP4,
    length=922,
    recipe=DisaggRecipe(
        concurrency=4,
        prefill_gpus=4,
        prefill_tp=4,
        decode_gpus=32,
        decode_ep=8,
        attention_dp=False,
        mtp_drafts=3,
        max_batch_per_rank=8,
        moe_backend=MoeBackend.TRTLLM,
        prefill_worker=ServePlan(tp=1, dp=4, ep=4),
    ),
    tok_s_user=286.40,
)
SERVING_COMPUTE_RUN = ServingRun(
    key="inferencex-dsr1-fp4-b200-conc10860",
    system="b200",
    model="deepseek-r1",
    precision=Precision.FP4,
    length=922,
    recipe=DisaggRecipe(
        concurrency=10860,
        prefill_gpus=12,
        prefill_tp=12,
        decode_gpus=20,
        decode_ep=4,
        attention_dp=True,
        mtp_drafts=1,
        max_batch_per_rank=512,
        moe_backend=MoeBackend.CUTLASS,
        prefill_worker=ServePlan(tp=1, dp=4, ep=4),
    ),
    tok_s_user=21.34,
)
TRAINING_POINT = TrainingPoint(
    key="megatron-t2-175b-384",
    system="a100",
    model="gpt3-175b",
    gpus=384,
    tp=8,
    pp=12,
    global_batch=1536,
    seq_len=2048,
    virtual_stages=1,
    tflops_per_gpu=153.0,
    fused_attention=False,  # 2021: before FlashAttention (perf_published.MEGATRON_CONDITIONS)
)

# The fitted values (what fit_serving() and fit_training_compute() return; the tests re-derive them).
SERVING_COMPUTE = 0.4741
SERVING_STEP_OVERHEAD_S = 1.714e-3
TRAINING_COMPUTE = 0.5836


def serving_efficiency(gpu: GpuSpec) -> Efficiency:
    """Every chip serves with the fitted compute share and step overhead (see the module's docstring)."""
    return Efficiency(compute=SERVING_COMPUTE, step_overhead_s=SERVING_STEP_OVERHEAD_S)


# The share of the dense BF16 peak a fused attention kernel reaches, measured, per chip (a chip not listed
# runs attention at the fitted compute share). H100: FlashAttention-2, "only 35% utilization on the H100 GPU"
# (Shah et al., "FlashAttention-3", arXiv 2407.08608, abstract; FlashAttention-3 itself reaches 75 %, in
# July 2024, after Llama 3's pre-training). Measured, not fitted: docs/perf.md.
FUSED_ATTENTION_SHARE: dict[str, tuple[float, str]] = {
    "H100": (0.35, "FlashAttention-2's measured share on H100, FlashAttention-3 paper"),
}


def training_efficiency(gpu: GpuSpec) -> TrainEfficiency:
    measured = FUSED_ATTENTION_SHARE.get(gpu.name)
    return TrainEfficiency(compute=TRAINING_COMPUTE, attention=measured[0] if measured else None)


def attention_note(gpu: GpuSpec) -> str:
    """Where a chip's fused-attention share comes from (for the CLI's assumptions)."""
    measured = FUSED_ATTENTION_SHARE.get(gpu.name)
    if measured is None:
        return "attention at the same share (no measurement of a fused kernel on this chip)"
    return f"its fused attention at {measured[0]:.0%} ({measured[1]})"


def _bisect(f: Callable[[float], float], lo: float, hi: float, target: float, *, steps: int = 40) -> float:
    """The x in [lo, hi] where the increasing function ``f`` reaches ``target``."""
    for _ in range(steps):
        mid = (lo + hi) / 2.0
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def run_interactivity(run: ServingRun, eff: Efficiency) -> float:
    """The model's interactivity (tok/s/user) of ``run`` replayed with ``eff``."""
    work = ServeWorkload(
        model=model_named(run.model), precision=run.precision, isl=run.length, osl=run.length, mtp=DEEPSEEK_MTP
    )
    return replay(work, system_named(run.system), run.recipe, eff=eff).interactivity


def _fit_overhead(compute: float) -> float:
    def slower(o: float) -> float:  # increasing in the overhead: minus the run's interactivity
        return -run_interactivity(SERVING_OVERHEAD_RUN, Efficiency(compute=compute, step_overhead_s=o))

    return _bisect(slower, 0.0, 0.03, -SERVING_OVERHEAD_RUN.tok_s_user)


def _fit_compute(overhead: float) -> float:
    def faster(c: float) -> float:
        return run_interactivity(SERVING_COMPUTE_RUN, Efficiency(compute=c, step_overhead_s=overhead))

    return _bisect(faster, 0.01, 1.0, SERVING_COMPUTE_RUN.tok_s_user)


def fit_serving(rounds: int = 3) -> tuple[float, float]:
    """(compute share, step overhead): each fitted on its one run, the other held, until both settle."""
    compute, overhead = SERVING_COMPUTE, SERVING_STEP_OVERHEAD_S
    for _ in range(rounds):
        overhead = _fit_overhead(compute)
        compute = _fit_compute(overhead)
    return compute, overhead


def training_tflops(point: TrainingPoint, compute: float) -> float:
    system = system_named(point.system)
    work = TrainWorkload(
        model=model_named(point.model),
        precision=Precision.BF16,
        seq_len=point.seq_len,
        global_batch=point.global_batch,
        fused_attention=point.fused_attention,
    )
    plan = TrainPlan(
        tp=point.tp,
        pp=point.pp,
        dp=point.gpus // (point.tp * point.pp),
        micro_batch=1,
        virtual_stages=point.virtual_stages,
        recompute=True,
    )
    # the chip's own efficiency (its measured attention share, if any) with the compute share being fitted
    step = train_step_on(system, work, plan, replace(training_efficiency(system.gpu), compute=compute))
    return step.achieved_tflops_per_gpu


def fit_training_compute(point: TrainingPoint = TRAINING_POINT) -> float:
    return _bisect(lambda c: training_tflops(point, c), 0.05, 1.0, point.tflops_per_gpu)
