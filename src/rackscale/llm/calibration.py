"""The fitted constants of the model, and the one published point each is fitted on.

Everything else in ``rackscale.llm`` is first principles: FLOPs and bytes from the model's configuration,
peaks and bandwidths from datasheets, and a handful of stated assumptions (``Efficiency``'s memory share and
per-layer overhead, the collectives' latencies, MTP acceptance: docs/perf.md says where each comes from).
What no datasheet gives is how close real kernels come to the compute peak, and how long a serving stack's
step takes when it has nothing to compute. Those are fitted, on one published point per GPU type:

- **B200** (serving): ``Efficiency.compute`` on InferenceX's B200 peak throughput, DeepSeek-R1 FP4 1k/1k
  (12,515.7 tok/s/GPU), where decode is compute-bound (the point tests the term it fits);
- **GB200** (serving): ``Efficiency.step_overhead_s`` on InferenceX's fastest GB200 run, 286.4 tok/s/user
  (4 sequences: the step is all fixed cost there);
- **A100** (training): ``TrainEfficiency.compute`` on one row of Megatron-LM (Narayanan et al. 2021, Table 2:
  GPT-3 175B on 384 A100, TP 8 x PP 12, batch 1,536: 153 TFLOP/s per GPU as the paper counts).

The two serving constants are fitted together (each fit holds the other), and every chip shares them (the
same serving stack and kernels: B200 and GB200 are one die); every chip trains with the A100 value. Every
other published figure is a prediction. ``tests/llm/test_calibration.py`` re-runs the fits and checks the
stored constants are what they give, so none can drift to make some other test pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rackscale.llm.decode import DEEPSEEK_MTP, Efficiency
from rackscale.llm.hardware import GpuSpec, system_named
from rackscale.llm.models import model_named
from rackscale.llm.precision import Precision
from rackscale.llm.serving import ServeCurve, ServeWorkload, ServingMode, serve_curve
from rackscale.llm.train_plans import train_step_on
from rackscale.llm.training import TrainEfficiency, TrainPlan, TrainWorkload


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingPoint:
    key: str
    system: str
    model: str
    precision: Precision
    isl: int
    osl: int
    tok_s_gpu: float  # the published peak tokens/s per GPU


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


SERVING_OVERHEAD_POINT = ServingPoint(
    key="inferencex-dsr1-fp4-gb200-fastest",
    system="gb200",
    model="deepseek-r1",
    precision=Precision.FP4,
    isl=1024,
    osl=1024,
    tok_s_gpu=60.7,  # the run's throughput; the fit reads its interactivity
)
SERVING_OVERHEAD_INTERACTIVITY = 286.4  # tok/s/user of GB200's fastest published run (conc 4, decode EP8)
SERVING_POINT = ServingPoint(
    key="inferencex-dsr1-fp4-peak",
    system="b200",
    model="deepseek-r1",
    precision=Precision.FP4,
    isl=1024,
    osl=1024,
    tok_s_gpu=12_515.7,
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
)

# The fitted values (what fit_serving() and fit_training_compute() return; the tests re-derive them).
SERVING_COMPUTE = 0.3166
SERVING_STEP_OVERHEAD_S = 4.716e-3
TRAINING_COMPUTE = 0.5470


def serving_efficiency(gpu: GpuSpec) -> Efficiency:
    """Every chip serves with the fitted compute share and step overhead (see the module's docstring)."""
    return Efficiency(compute=SERVING_COMPUTE, step_overhead_s=SERVING_STEP_OVERHEAD_S)


def training_efficiency(gpu: GpuSpec) -> TrainEfficiency:
    return TrainEfficiency(compute=TRAINING_COMPUTE)


def _bisect(f: Callable[[float], float], lo: float, hi: float, target: float, *, steps: int = 40) -> float:
    """The x in [lo, hi] where the increasing function ``f`` reaches ``target``."""
    for _ in range(steps):
        mid = (lo + hi) / 2.0
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def _curve(point: ServingPoint, eff: Efficiency, *, max_decode_ep: int | None = None) -> ServeCurve:
    work = ServeWorkload(
        model=model_named(point.model), precision=point.precision, isl=point.isl, osl=point.osl, mtp=DEEPSEEK_MTP
    )
    return serve_curve(
        work, system_named(point.system), eff=eff, mode=ServingMode.DISAGGREGATED, max_decode_ep=max_decode_ep
    )


def serving_peak(point: ServingPoint, eff: Efficiency) -> float:
    """The curve's peak tok/s/GPU (B200's decode held to one node, as the published runs were)."""
    peak = _curve(point, eff, max_decode_ep=8 if point.system == "b200" else None).peak
    return 0.0 if peak is None else peak.tok_s_gpu


def fastest(point: ServingPoint, eff: Efficiency) -> float:
    """The curve's highest interactivity (tok/s/user)."""
    return max((p.interactivity for p in _curve(point, eff).points), default=0.0)


def _fit_overhead(compute: float) -> float:
    def slower(o: float) -> float:  # increasing in the overhead: minus the fastest interactivity
        return -fastest(SERVING_OVERHEAD_POINT, Efficiency(compute=compute, step_overhead_s=o))

    return _bisect(slower, 0.0, 0.02, -SERVING_OVERHEAD_INTERACTIVITY)


def _fit_compute(overhead: float) -> float:
    def peak(c: float) -> float:
        return serving_peak(SERVING_POINT, Efficiency(compute=c, step_overhead_s=overhead))

    return _bisect(peak, 0.01, 1.0, SERVING_POINT.tok_s_gpu)


def fit_serving(rounds: int = 3) -> tuple[float, float]:
    """(compute share, step overhead): each fitted on its one point, the other held, until both settle."""
    compute, overhead = SERVING_COMPUTE, SERVING_STEP_OVERHEAD_S
    for _ in range(rounds):
        overhead = _fit_overhead(compute)
        compute = _fit_compute(overhead)
    return compute, overhead


def training_tflops(point: TrainingPoint, compute: float) -> float:
    system = system_named(point.system)
    work = TrainWorkload(
        model=model_named(point.model), precision=Precision.BF16, seq_len=point.seq_len, global_batch=point.global_batch
    )
    plan = TrainPlan(
        tp=point.tp,
        pp=point.pp,
        dp=point.gpus // (point.tp * point.pp),
        micro_batch=1,
        virtual_stages=point.virtual_stages,
        recompute=True,
    )
    step = train_step_on(system, work, plan, TrainEfficiency(compute=compute))
    return step.achieved_tflops_per_gpu


def fit_training_compute(point: TrainingPoint = TRAINING_POINT) -> float:
    return _bisect(lambda c: training_tflops(point, c), 0.05, 1.0, point.tflops_per_gpu)
