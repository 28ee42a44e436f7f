"""The published figures the performance model must reproduce, each with its source and conditions (data only).

Every number here was read from a document named in ``docs/perf-published.md``, which also says, per
condition, where it came from and which ones are assumptions. ``tests/bench/test_perf_published.py`` checks
the data against itself (ratios against values, costs against the TCO rates, GPU counts against the
parallel degrees). The benchmark (``rackscale.bench.perf_figures``) and the model's tests read the figures
from here so a number has one home.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType
from typing import TypeVar

from rackscale.llm.kernels import MoeBackend
from rackscale.llm.precision import Precision
from rackscale.llm.serving import ServingMode
from rackscale.model.errors import RackscaleError


class UnknownFigureError(RackscaleError, ValueError):
    """A figure key that is not in the catalogue."""


class TokenCount(StrEnum):
    """Which tokens a published tokens/s counts."""

    OUTPUT = "output"  # generated tokens only (MLPerf)
    TOTAL = "total"  # prompt and generated tokens (InferenceX's tput_per_gpu)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingFigure:
    key: str
    source: str
    url: str
    model: str  # a rackscale built-in model name
    precision: Precision
    isl: int  # input tokens per request (the dataset's mean where the source is a dataset)
    osl: int
    mode: ServingMode  # how A served
    mode_b: ServingMode | None = None  # how B served, where it differs from A (MLPerf 405B Interactive)
    mtp: bool  # speculative decoding with the model's MTP head
    ttft_s: float | None  # the scenario's p99 TTFT bound, if any
    interactivity: float | None  # tok/s/user at which the figure is read; None: each curve's peak
    tpot_s: float | None  # MLPerf's p99 TPOT bound (interactivity = 1 / tpot_s)
    system_a: str  # rackscale system names
    system_b: str
    value_a: float  # tok/s/GPU
    value_b: float
    ratio: float  # the published A/B, rounded as published
    conditions: str
    counts: TokenCount = TokenCount.OUTPUT

    @property
    def b_mode(self) -> ServingMode:
        return self.mode if self.mode_b is None else self.mode_b


@dataclass(frozen=True, slots=True, kw_only=True)
class QualitativeFigure:
    """A published claim with no pair of numbers to hold a model to."""

    key: str
    text: str
    url: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ParetoPoint:
    """One measured InferenceX run: the recipe (prefill and decode pools) and what it gave."""

    system: str
    conc: int
    prefill_gpus: int
    prefill_tp: int
    decode_gpus: int
    decode_ep: int
    tok_s_gpu: float
    tok_s_user: float
    tpot_ms: float
    usd_per_mtok: float
    attention_dp: bool  # decode attention data parallel (else tensor parallel over the EP group)
    mtp_drafts: int
    max_batch_per_rank: int  # decode max_batch_size per attention rank
    eplb: bool  # online expert load balancer on decode
    moe_backend: MoeBackend  # decode MoE kernel (CuteDSL recipes: CUTLASS, the nearest measured kernel)


@dataclass(frozen=True, slots=True, kw_only=True)
class GptArch:
    """A GPT's shape as the paper gives it (for models that are not rackscale built-ins)."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    params_b: float  # the paper's parameter count (its Eq. 2), billions


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingFigure:
    key: str
    source: str
    url: str
    model: str  # a built-in name, or the paper's name with ``arch`` set
    arch: GptArch | None
    system: str
    gpus: int
    tp: int
    pp: int
    dp: int
    cp: int = 1
    virtual_stages: int = 1  # interleaved 1F1B: model chunks per pipeline rank (1: not interleaved, or not published)
    global_batch: int  # sequences
    seq_len: int
    precision: Precision
    tflops_per_gpu: float  # achieved, counted as the source counts it
    peak_tflops: float  # the per-GPU peak the source divides by
    peak_fraction: float | None  # the published share of peak, if published (Megatron: hardware FLOPs utilisation)
    mfu: float | None  # model FLOPs utilisation, where the source reports one
    counts_recompute: bool
    # the attention kernels the run used: fused (FlashAttention) or not (the s x s scores go through HBM)
    fused_attention: bool = True
    aggregate_pflops: float | None = None
    conditions: str


# --- SemiAnalysis InferenceX: GB200 NVL72 vs B200, DeepSeek-R1-0528 FP4, 1k/1k --------------------------------
IX_SOURCE = "SemiAnalysis InferenceX blog, 'GB200 NVL72 vs B200 on DeepSeek R1 670B' (2026-05-23; run 2026-05-22)"
IX_URL = "https://inferencex.semianalysis.com/blog/gb200-nvl72-vs-b200-disagg-deepseek-r1-fp4-dynamo-trt"
IX_CONDITIONS = (
    "Both Dynamo + TensorRT-LLM with MTP, disaggregated prefill/decode, ISL 1024 / OSL 1024 (post, 'The Numbers'). "
    "GB200 NVL72: one 72-GPU NVLink-5 domain, 900 GB/s per GPU per direction; B200: 8-GPU HGX nodes, ConnectX-7 "
    "400 Gb/s RoCEv2 per GPU (50 GB/s), pools span nodes (post, intro). InferenceX run 26306422380. Values "
    "at a fixed tok/s/user are read off each SKU's Pareto frontier by monotone cubic Hermite interpolation "
    "(post's FAQ), not single runs; the measured runs and their decode EP are INFERENCEX_DSR1_POINTS. B200 "
    "decode never exceeds EP=8 (one node) in the published runs (post's B200 table)."
)


def _ix(interactivity: int, a: float, b: float, ratio: float) -> ServingFigure:
    return ServingFigure(
        key=f"inferencex-dsr1-fp4-{interactivity}",
        source=IX_SOURCE,
        url=IX_URL,
        model="deepseek-r1",
        precision=Precision.FP4,
        isl=1024,
        osl=1024,
        mode=ServingMode.DISAGGREGATED,
        mtp=True,
        ttft_s=None,
        interactivity=float(interactivity),
        tpot_s=None,
        system_a="gb200",
        system_b="b200",
        value_a=a,
        value_b=b,
        ratio=ratio,
        conditions=IX_CONDITIONS,
        counts=TokenCount.TOTAL,
    )


# The post's 'Iso-Interactivity Throughput Comparison' table (the 300 row: GB200 unreachable, B200 67).
_IX_ISO = (
    (25, 14125, 12292, 1.15), (45, 12508, 10853, 1.15), (60, 11017, 9185, 1.20), (75, 9379, 6968, 1.35),
    (90, 7796, 4512, 1.73), (100, 6781, 3047, 2.23), (125, 4130, 941, 4.39), (150, 1922, 583, 3.30),
    (175, 826, 429, 1.93), (200, 432, 332, 1.30), (225, 262, 241, 1.09), (250, 186, 193, 0.97),
    (275, 103, 126, 0.82),
)  # fmt: skip

IX_PEAK = replace(
    _ix(0, 14659.4, 12515.7, 1.17),
    key="inferencex-dsr1-fp4-peak",
    interactivity=None,
    conditions=IX_CONDITIONS + " Peak of each curve, at different interactivities: GB200 conc 16,130 at 17.82 "
    "tok/s/user (prefill 12 GPUs TP12, decode 20 GPUs EP4), B200 conc 10,860 at 21.34 (same pools); the PR calls "
    "both 'narrow EP=4 + DP attention' (SemiAnalysisAI/InferenceX-app pull 381). These are measured runs.",
)

# --- MLPerf Inference v5.1, closed, datacenter: NVIDIA's GB200 NVL72 (72 GPUs) vs DGX B200 (8 GPUs) ------------
ML_SOURCE = "MLPerf Inference v5.1 (Aug 2025) closed datacenter results, NVIDIA submissions, per GPU = total / GPUs"
ML_URL = "https://github.com/mlcommons/submissions_inference_v5.1/tree/main/closed/NVIDIA/results"
ML_SYSTEMS = (
    "A: NVIDIA 'GB200-NVL72_GB200-186GB_aarch64x72_TRT' (72 GB200 in one NVLink domain, 4 ConnectX-7 per 4-GPU "
    "tray); B: 'B200-SXM-180GBx8_TRT' (NVIDIA DGX B200, 8 GPUs on NVLink, 10x 400G InfiniBand). Both TensorRT "
    "10.11, CUDA 12.9 (results pages). NVFP4 weights (NVIDIA's MLPerf v5.1 blog). No speculative decoding: "
    "MLPerf's first speculative-decoding rule came in v6.0 (MLCommons gpt-oss/DeepSeek-R1 v6.0 post)."
)
DSR1_DATASET = (
    "4,388 samples (loadgen mlperf.conf); mean output 3,886 tokens (reference run, mlcommons/inference "
    "language/deepseek-r1 README; submissions must reach 90 %: TOKENS_PER_SAMPLE 3,497.6); mean input 800 is an "
    "ASSUMPTION (no stored source gives it)."
)
L405_DATASET = (
    "8,313 samples (mlperf.conf); input 476-19,988 tokens, mean 9,428; output 3-2,000, mean 684 (AMD's "
    "'Technical Dive into AMD's MLPerf Inference v5.1 Submission'; reference tokens_per_sample 684.68 in the "
    "language/llama3.1-405b README)."
)


def _ml(
    key: str, model: str, *, isl: int, osl: int, bounds: tuple[float, float] | None, totals: tuple[float, float],
    ratio: float, conditions: str, mode: ServingMode = ServingMode.AGGREGATED, mode_b: ServingMode | None = None,
) -> ServingFigure:  # fmt: skip
    a, b = totals[0] / 72, totals[1] / 8
    return ServingFigure(
        key=key,
        source=ML_SOURCE,
        url=ML_URL,
        model=model,
        precision=Precision.FP4,
        isl=isl,
        osl=osl,
        mode=mode,
        mode_b=mode_b,
        mtp=False,
        ttft_s=None if bounds is None else bounds[0],
        interactivity=None if bounds is None else 1.0 / bounds[1],
        tpot_s=None if bounds is None else bounds[1],
        system_a="gb200",
        system_b="b200",
        value_a=round(a, 2),
        value_b=round(b, 2),
        ratio=ratio,
        conditions=f"{conditions} Totals {totals[0]:,} vs {totals[1]:,} tok/s. {ML_SYSTEMS}",
    )


MLPERF = (
    _ml("mlperf-v5.1-dsr1-server", "deepseek-r1", isl=800, osl=3886, bounds=(2.0, 0.080),
        totals=(167_578.0, 18_592.2), ratio=1.00,
        conditions=f"Server: p99 TTFT 2 s, p99 TPOT 80 ms (mlperf.conf). {DSR1_DATASET} Serving mode "
        "ASSUMED aggregated (in-flight batching); the submission's configs were not read."),
    _ml("mlperf-v5.1-405b-server", "llama-3.1-405b", isl=9428, osl=684, bounds=(6.0, 0.175),
        totals=(11_614.3, 1_240.42), ratio=1.04,
        conditions=f"Server: p99 TTFT 6 s, p99 TPOT 175 ms (mlperf.conf). {L405_DATASET} Mode ASSUMED "
        "aggregated on both."),
    _ml("mlperf-v5.1-405b-interactive", "llama-3.1-405b", isl=9428, osl=684, bounds=(4.5, 0.080),
        totals=(9_921.02, 751.37), ratio=1.47, mode=ServingMode.DISAGGREGATED, mode_b=ServingMode.AGGREGATED,
        conditions=f"Interactive: p99 TTFT 4.5 s, p99 TPOT 80 ms (mlperf.conf). {L405_DATASET} GB200 "
        "disaggregated (NVIDIA's blog: 'nearly 1.5x' per GPU over aggregated DGX B200); the recipe stored in "
        "ASUSTeK's copy of NVIDIA's code: 14 context servers TP4 + 2 generation servers TP8 = 72 GPUs."),
    _ml("mlperf-v5.1-dsr1-offline", "deepseek-r1", isl=800, osl=3886, bounds=None,
        totals=(289_712.0, 33_379.0), ratio=0.96,
        conditions=f"Offline (no latency bound). {DSR1_DATASET} Ratio computed here from the totals."),
    _ml("mlperf-v5.1-405b-offline", "llama-3.1-405b", isl=9428, osl=684, bounds=None,
        totals=(14_774.3, 1_624.11), ratio=1.01,
        conditions=f"Offline (no latency bound). {L405_DATASET} Ratio computed here from the totals."),
)  # fmt: skip

SERVING_FIGURES: tuple[ServingFigure, ...] = (*(_ix(*row) for row in _IX_ISO), IX_PEAK, *MLPERF)

QUALITATIVE: tuple[QualitativeFigure, ...] = (
    QualitativeFigure(
        key="inferencex-dsr1-fp4-b200-wins-high-interactivity",
        text="Above ~250 tok/s/user B200 wins by about 1.2x (x0.82 at 275); GB200 NVL72 has no recipe faster "
        "than 286 tok/s/user, B200 still reaches 67 tok/s/GPU at 300 (post's table and FAQ).",
        url=IX_URL,
    ),
    QualitativeFigure(
        key="inferencex-dsr1-fp4-network-bound-band",
        text="75-175 tok/s/user is where decode is network-bound on the EP dispatch/combine; GB200 runs decode "
        "EP16/EP32 there, B200 stays at EP8 inside a node (post, 'Why GB200 NVL72 Wins' and the recipe tables).",
        url=IX_URL,
    ),
    QualitativeFigure(
        key="inferencex-dsr1-fp4-cost",
        text="Per million tokens the gap is x3.87 at 125 tok/s/user (B200 $0.5755 vs GB200 $0.1486), "
        "x1.01-1.06 at 25-60, and B200 is cheaper from 225 up (x0.96 at 225, x0.85 at 250).",
        url=IX_URL,
    ),
)

# $/GPU-hour the post prices with (SemiAnalysis AI Cloud TCO Model); $/M tok = rate * 1e6 / (3600 * tok/s/GPU).
TCO_USD_PER_GPU_HOUR: Mapping[str, float] = MappingProxyType({"b200": 1.95, "gb200": 2.21})


def _points(system: str, rows: tuple[tuple[float, ...], ...]) -> tuple[ParetoPoint, ...]:
    return tuple(
        ParetoPoint(
            system=system,
            conc=int(c),
            prefill_gpus=int(pg),
            prefill_tp=int(pt),
            decode_gpus=int(dg),
            decode_ep=int(de),
            tok_s_gpu=t,
            tok_s_user=u,
            tpot_ms=ms,
            usd_per_mtok=usd,
            attention_dp=bool(adp),
            mtp_drafts=int(mtp),
            max_batch_per_rank=int(mb),
            eplb=bool(lb),
            moe_backend=MoeBackend.TRTLLM if adp == 0 else MoeBackend.CUTLASS,
        )
        for c, pg, pt, dg, de, t, u, ms, usd, adp, mtp, mb, lb in rows
    )


# The post's two recipe tables: conc, prefill GPUs/TP, decode GPUs/EP, tok/s/GPU, tok/s/user, TPOT ms, $/M tok;
# then each run's decode settings from its recipe (IX_RECIPES): attention data parallel, MTP drafts, the decode
# batch cap per attention rank, online EPLB. Every TP8/EP8 recipe (no attention DP) runs TensorRT-LLM's
# min-latency MoE (backend TRTLLM); every attention-DP one CUTLASS or CuteDSL.
INFERENCEX_DSR1_POINTS: tuple[ParetoPoint, ...] = _points("gb200", (
    (4, 4, 4, 32, 8, 60.7, 286.40, 3.49, 10.12, 0, 3, 8, 0),
    (8, 4, 4, 32, 8, 111.8, 272.64, 3.67, 5.49, 0, 3, 8, 0),
    (12, 4, 4, 32, 8, 165.2, 257.11, 3.89, 3.72, 0, 3, 8, 0),
    (24, 4, 4, 32, 8, 274.8, 222.28, 4.50, 2.23, 0, 3, 8, 0),
    (48, 4, 4, 32, 8, 363.3, 207.30, 4.82, 1.69, 0, 3, 8, 0),
    (180, 4, 4, 32, 32, 1149.1, 164.37, 6.08, 0.53, 1, 3, 4, 0),
    (2253, 12, 12, 32, 32, 7698.0, 90.99, 10.99, 0.08, 1, 1, 64, 1),
    (4301, 8, 8, 16, 16, 12659.7, 43.29, 23.10, 0.05, 1, 1, 256, 1),
    (16130, 12, 12, 20, 4, 14659.4, 17.82, 56.11, 0.04, 1, 1, 768, 0),
)) + _points("b200", (
    (6, 4, 4, 40, 8, 49.3, 309.17, 3.23, 10.99, 0, 3, 1, 0),
    (10, 4, 4, 40, 8, 118.7, 277.39, 3.61, 4.56, 0, 3, 32, 0),
    (15, 4, 4, 40, 8, 168.9, 261.09, 3.83, 3.21, 0, 3, 32, 0),
    (25, 4, 4, 40, 8, 242.4, 224.59, 4.45, 2.23, 0, 3, 32, 0),
    (45, 4, 4, 40, 8, 369.9, 191.18, 5.23, 1.46, 0, 3, 32, 0),
    (90, 4, 4, 40, 8, 577.3, 150.56, 6.64, 0.94, 0, 3, 32, 0),
    (180, 4, 4, 40, 8, 897.9, 126.42, 7.91, 0.60, 0, 3, 32, 0),
    (875, 4, 4, 40, 8, 2832.9, 101.79, 9.82, 0.19, 1, 3, 16, 0),
    (1214, 4, 4, 16, 8, 7111.4, 74.04, 13.51, 0.08, 1, 2, 64, 0),
    (4968, 12, 12, 32, 8, 9660.7, 56.35, 17.75, 0.06, 1, 1, 128, 0),
    (10860, 12, 12, 20, 4, 12515.7, 21.34, 46.86, 0.04, 1, 1, 512, 0),
))  # fmt: skip

# Where the runs' settings were read, and how the benchmark counts (docs/perf-published.md says more).
IX_RECIPES = (
    "SemiAnalysisAI/InferenceX .github/configs/nvidia-master.yaml (commit 48f302c): entries dsr1-fp4-gb200-dynamo-trt "
    "and dsr1-fp4-b200-dynamo-trt list each concurrency's prefill and decode workers (TP/EP, dp-attn) and recipe file "
    "(e.g. recipes/trtllm/gb200-fp4/1k1k/mtp/ctx3_gen1_dep32_batch64_eplb288_mtp1.yaml). The recipe files were read "
    "in the fork connorcarpenter15/srt-slurm (commit 5a156f6): decode max_batch_size (per attention rank), "
    "num_nextn_predict_layers, enable_attention_dp, load_balancer num_slots; FP8 KV cache on both. ASSUMPTION: the "
    "branch the 2026-05-22 run cloned (cquil11/srt-slurm-nv cam/sa-submission-q2-2026) was not readable; names, "
    "shapes and concurrencies match. The client (srt-slurm sa-bench benchmark_serving.py): random lengths uniform "
    "in [0.8 L, L] (mean 922 for 1024), ignore-eos, 10 x concurrency prompts; total_token_throughput counts input "
    "plus output tokens and InferenceX utils/process_result.py divides it by prefill + decode GPUs (tput_per_gpu); "
    "interactivity is 1000 / TPOT, TPOT = (latency - TTFT) / (output tokens - 1)."
)
IX_MEAN_LENGTH = 922  # tokens in and out: uniform integers in [819, 1024] (random range ratio 0.8)


# --- Training ---------------------------------------------------------------------------------------------------
MEGATRON_SOURCE = (
    "Narayanan et al., 'Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM', SC21"
)
MEGATRON_URL = "https://arxiv.org/abs/2104.04473"
MEGATRON_CONDITIONS = (
    "Selene: DGX A100 80 GB nodes (8 GPUs on NVLink/NVSwitch, 8x 200 Gb/s HDR InfiniBand each), mixed precision, "
    "vocabulary 51,200, sequence 2,048, activation recomputation on, interleaved 1F1B schedule with "
    "scatter/gather; TFLOP/s counted by the paper's Eq. 3, F = 96 B s l h^2 (1 + s/6h + V/16lh), which "
    "includes the recomputation forward pass, so the share of the 312 TFLOP/s peak is hardware, not model, "
    "utilisation (paper, sections 5 and 5.1). Attention unfused: the paper (2021) predates FlashAttention, and "
    "Megatron-LM then ran QK^T, a fused scale-mask-softmax, dropout and x V as separate kernels."
)


def _megatron(
    key: str, table: str, *, arch: GptArch, gpus: int, tp: int, pp: int, batch: int, tflops: float, share: float | None,
    aggregate: float | None, model: str | None = None,
) -> TrainingFigure:  # fmt: skip
    return TrainingFigure(
        key=key,
        source=f"{MEGATRON_SOURCE}, {table}",
        url=MEGATRON_URL,
        model=model or f"megatron-gpt-{arch.params_b}b",
        arch=arch,
        system="a100",
        gpus=gpus,
        tp=tp,
        pp=pp,
        dp=gpus // (tp * pp),
        global_batch=batch,
        seq_len=2048,
        precision=Precision.BF16,
        tflops_per_gpu=tflops,
        peak_tflops=312.0,
        peak_fraction=share,
        mfu=None,
        counts_recompute=True,
        fused_attention=False,
        aggregate_pflops=aggregate,
        conditions=MEGATRON_CONDITIONS,
    )


# Table 1 (weak scaling): params, heads, hidden, layers, TP, PP, GPUs, batch, TFLOP/s/GPU, % of peak, PFLOP/s.
_TABLE1 = (
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 0.44, 4.4),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 0.44, 8.8),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 0.46, 18.2),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 0.43, 34.6),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 0.44, 70.8),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 0.45, 143.8),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 0.47, 227.1),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 0.50, 297.4),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 0.52, 410.2),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 0.52, 502.0),
)
_GPT3 = GptArch(layers=96, hidden=12288, heads=96, vocab=51200, params_b=174.6)

LLAMA3_CONDITIONS = (
    "Llama 3 405B pre-training stages, 16M tokens per batch; H100 80 GB (700 W) in 8-GPU Grand Teton servers on "
    "NVLink, 400 Gb/s RoCE (Arista 7800 / Minipack2) between them (paper, section 3.3). The 989 TFLOP/s BF16 "
    "dense peak is the H100 SXM datasheet's: an ASSUMPTION, the paper does not state its peak; MFU is the "
    "paper's 'BF16 MFU' (how it counts attention is not stated). The 131k row prints DP 4, which contradicts "
    "its own GPUs (8*16*16*4 = 8,192) and tokens per batch; DP 8 fits both. The paper names no attention kernel: "
    "an ASSUMPTION that it was fused and reached FlashAttention-2's 35 % of H100's peak (FlashAttention-3, 75 %, "
    "came out in July 2024, after the pre-training)."
)


def _table1(
    p: float, a: int, h: int, layers: int, t: int, pp: int, n: int, b: int, f: float, s: float, agg: float
) -> TrainingFigure:
    arch = GptArch(layers=layers, hidden=h, heads=a, vocab=51200, params_b=p)
    return _megatron(
        f"megatron-t1-{p}b", "Table 1", arch=arch, gpus=n, tp=t, pp=pp, batch=b, tflops=f, share=s, aggregate=agg
    )


def _table2(n: int, f: float) -> TrainingFigure:
    return _megatron(
        f"megatron-t2-175b-{n}",
        "Table 2 (PTD-P)",
        arch=_GPT3,
        gpus=n,
        tp=8,
        pp=12,
        batch=1536,
        tflops=f,
        share=None,
        aggregate=None,
        model="gpt3-175b",
    )


# Llama 3 runs an interleaved schedule, V chunks per pipeline rank (section 3.3.2), V not printed: its first
# chunk holds only the embedding, its last only the output projection and loss, one transformer layer each was
# taken from the first and last stages to make room for them; 126 layers + 2 = 128 chunks = PP 16 x V only at
# V = 8 (one layer per chunk). Derived, not published: docs/perf-published.md.
LLAMA3_VIRTUAL_STAGES = 8


def _llama3(n: int, cp: int, dp: int, seq: int, per_dp: int, f: float, mfu: float) -> TrainingFigure:
    return TrainingFigure(
        key=f"llama3-405b-{n}-{seq // 1024}k",
        source="Llama Team, AI @ Meta, 'The Llama 3 Herd of Models' (arXiv 2407.21783), Table 4",
        url="https://arxiv.org/abs/2407.21783",
        model="llama-3.1-405b",
        arch=None,
        system="h100",
        gpus=n,
        tp=8,
        pp=16,
        dp=dp,
        cp=cp,
        virtual_stages=LLAMA3_VIRTUAL_STAGES,
        global_batch=dp * per_dp,
        seq_len=seq,
        precision=Precision.BF16,
        tflops_per_gpu=f,
        peak_tflops=989.0,
        peak_fraction=mfu,
        mfu=mfu,
        counts_recompute=False,
        conditions=LLAMA3_CONDITIONS,
    )


# Table 2's PTD-P rows for GPT-3 175B: model-parallel size 96 = TP 8 x PP 12, batch 1536, microbatch 1.
# Table 4: GPUs, CP, DP, sequence, batch per DP replica, TFLOP/s per GPU, BF16 MFU (TP 8, PP 16 throughout).
TRAINING_FIGURES: tuple[TrainingFigure, ...] = (
    *(_table1(*row) for row in _TABLE1),
    *(_table2(n, f) for n, f in ((384, 153.0), (768, 149.0), (1536, 141.0))),
    _llama3(8192, 1, 64, 8192, 32, 430.0, 0.43),
    _llama3(16384, 1, 128, 8192, 16, 400.0, 0.41),
    _llama3(16384, 16, 8, 131072, 16, 380.0, 0.38),
)

_SERVING: Mapping[str, ServingFigure] = MappingProxyType({f.key: f for f in SERVING_FIGURES})
_TRAINING: Mapping[str, TrainingFigure] = MappingProxyType({f.key: f for f in TRAINING_FIGURES})


_T = TypeVar("_T")


def _lookup(table: Mapping[str, _T], key: str, what: str) -> _T:
    if isinstance(key, str) and key in table:
        return table[key]
    shown = repr(key[:60]) if isinstance(key, str) else type(key).__name__
    raise UnknownFigureError(f"unknown {what} figure {shown}: choose one of {', '.join(table)}")


def serving_figure(key: str) -> ServingFigure:
    return _lookup(_SERVING, key, "serving")


def training_figure(key: str) -> TrainingFigure:
    return _lookup(_TRAINING, key, "training")


def megatron_flops(*, arch: GptArch, global_batch: int, seq_len: int, recompute: bool) -> float:
    """FLOPs of one training iteration as Narayanan et al. count them (Eq. 3 with recomputation; without it
    the transformer layers run 3 passes instead of 4 and the logit layer, never recomputed, is unchanged)."""
    b, s, layers, h, v = global_batch, seq_len, arch.layers, arch.hidden, arch.vocab
    passes = 4 if recompute else 3
    return 24 * passes * b * s * layers * h * h * (1 + s / (6 * h)) + 6 * b * s * h * v


def model_flops_utilisation(fig: TrainingFigure) -> float | None:
    """The MFU a figure implies: the source's own where it gives one, else Megatron's rate without the
    recomputation pass (the same step time, fewer FLOPs counted)."""
    if fig.mfu is not None or fig.arch is None:
        return fig.mfu
    arch, batch, seq = fig.arch, fig.global_batch, fig.seq_len
    without = megatron_flops(arch=arch, global_batch=batch, seq_len=seq, recompute=False)
    with_recompute = megatron_flops(arch=arch, global_batch=batch, seq_len=seq, recompute=True)
    return fig.tflops_per_gpu / fig.peak_tflops * without / with_recompute
