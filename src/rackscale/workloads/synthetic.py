"""The embedded default workload: a seeded synthetic mix calibrated on public traces.

- Training sizes follow the Philly 2017 ``num_gpus`` histogram (../shared/traces/README.md), plus an
  LLM-era tail of multi-rack gangs (Seren/Kalos 2023 reach 1,024 GPUs), capped to the cluster's size.
- Durations are log-normal around Philly's median (1,144 s) with a heavy tail.
- Inference services (replicas of 1-8 GPUs) and batch jobs (whole or shared GPUs) complete the mix.
- A share (``llm_share``) of the training gangs of 8 GPUs or more and of the services run a real model
  (:data:`LLM_TRAINING`, :data:`LLM_SERVICES`): Llama-3.1-8B/70B/405B pre-training sized to the gang,
  Llama-3.1-8B/70B and DeepSeek-R1 (FP4, with MTP) serving with interactivity and TTFT SLOs. The
  simulator times them with ``rackscale.llm``; every configuration fits 80 GB GPUs, so the mix runs on
  A100/H100 clusters too. A service's peak demand is what its replicas serve at 60 % load on the default
  rack (GB200 NVL72, the default links), so the autoscaler keeps about ``replicas`` of them at the peak.
  The choices come from a second random stream: the rest of the mix is what it was without them.

Pure: the same config and seed give the same jobs.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache

from rackscale.llm.jobs import replica_serving
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import CommProfile, JobSpec, LlmWork, ServingProfile, batch, inference, training
from rackscale.network.collectives import Layout

# Philly 2017, jobs per num_gpus (82,247 jobs).
PHILLY_SIZE_COUNTS: dict[int, int] = {
    1: 76_627,
    2: 1_818,
    4: 1_870,
    8: 1_643,
    12: 7,
    16: 199,
    24: 7,
    32: 67,
    64: 6,
    128: 3,
}
# LLM-era tail (AcmeTrace: Seren and Kalos reach 1,024 GPUs); drawn with these weights.
LARGE_TAIL: dict[int, int] = {144: 4, 256: 3, 512: 2, 1024: 1}

# LLM pre-training by gang size: (smallest gang, model choices). Sequences of 8,192 tokens as Llama 3.1's
# pre-training ran them (Llama 3 paper, section 3.4); the global batch is the 4M-token default.
LLM_TRAINING: tuple[tuple[int, tuple[str, ...]], ...] = (
    (256, ("llama-3.1-70b", "llama-3.1-405b")),
    (64, ("llama-3.1-70b",)),
    (8, ("llama-3.1-8b",)),
)
LLM_TRAIN_SEQ_LEN = 8192


@dataclass(frozen=True, slots=True, kw_only=True)
class LlmService:
    """A served model: GPUs per replica and what its users ask for (sources: docs/workloads.md)."""

    gpus: int
    llm: LlmWork


LLM_SERVICES: tuple[LlmService, ...] = (
    # Assumptions (no benchmark fixes them for 8B chat): 100 tokens/s per user, TTFT 0.5 s.
    LlmService(gpus=1, llm=LlmWork(model="llama-3.1-8b", interactivity_slo=100.0, ttft_slo_s=0.5)),
    # MLPerf Inference v5.0 "Llama 2 70B Interactive": TTFT 450 ms, TPOT 40 ms (25 tokens/s per user).
    LlmService(gpus=8, llm=LlmWork(model="llama-3.1-70b", interactivity_slo=25.0, ttft_slo_s=0.45)),
    # InferenceX's DeepSeek-R1 set-up (FP4, 1k/1k, MTP); 50 tokens/s per user and TTFT 2 s are assumptions.
    LlmService(
        gpus=8, llm=LlmWork(model="deepseek-r1", precision="fp4", mtp=True, interactivity_slo=50.0, ttft_slo_s=2.0)
    ),
)
TARGET_LOAD = 0.6  # ServingProfile's default target utilisation


@dataclass(frozen=True, slots=True, kw_only=True)
class SyntheticConfig:
    jobs: int = 600
    duration_s: float = 24 * 3600.0  # arrivals spread over this window
    training_share: float = 0.75
    inference_share: float = 0.10  # the rest is batch
    large_tail_share: float = 0.03  # of training jobs
    max_gpus: int | None = None  # cap gang sizes (the cluster's size)
    # Size weights are Philly's, but Philly's 1-GPU majority is tempered: on an NVL72 cluster users run
    # multi-GPU jobs; ``single_gpu_weight`` scales the count of 1-GPU jobs.
    single_gpu_weight: float = 0.25
    queues: tuple[str, ...] = ("research", "production", "interns")
    median_duration_s: float = 1144.0
    llm_share: float = 0.5  # of the training gangs of >= 8 GPUs, and of the services: a real model
    # Of the training gangs of >= 2 GPUs, LLM ones included: elastic ones (minGpus = half, maxGpus = twice the
    # size asked, within the cluster). 0 in the embedded default (no published trace says how many jobs are
    # elastic).
    elastic_share: float = 0.0
    seed: int = 0


def _weighted(rng: random.Random, table: dict[int, float]) -> int:
    keys = list(table)
    return rng.choices(keys, weights=[table[k] for k in keys])[0]


@lru_cache(maxsize=16)
def _replica_tokens_per_s(service: LlmService) -> float:
    """Output tokens/s one replica serves at full load on the default rack (GB200 NVL72, default links)."""
    rack = GPUCluster.uniform(racks_per_region=1)
    probe = inference("probe", 1, gpus_per_replica=service.gpus, llm=service.llm)
    return replica_serving(rack, probe, Layout(((0, 0, service.gpus),))).tokens_per_s


def _llm_training(rng: random.Random, gpus: int) -> LlmWork:
    models = next(names for smallest, names in LLM_TRAINING if gpus >= smallest)
    return LlmWork(model=rng.choice(models), seq_len=LLM_TRAIN_SEQ_LEN)


def synthetic_jobs(cfg: SyntheticConfig) -> list[JobSpec]:
    rng = random.Random(cfg.seed)
    llm_rng = random.Random(f"rackscale-llm-{cfg.seed}")  # its own stream: the rest of the mix is unchanged
    elastic_rng = random.Random(f"rackscale-elastic-{cfg.seed}")  # likewise
    elastic_llm_rng = random.Random(f"rackscale-elastic-llm-{cfg.seed}")
    sizes: dict[int, float] = {k: float(v) for k, v in PHILLY_SIZE_COUNTS.items()}
    sizes[1] *= cfg.single_gpu_weight
    cap = cfg.max_gpus
    tail = {k: float(v) for k, v in LARGE_TAIL.items() if cap is None or k <= cap}
    out: list[JobSpec] = []
    sigma = 1.6  # Philly: p50 1,144 s, p90 11,265 s → sigma ≈ ln(9.85)/1.28
    for i in range(cfg.jobs):
        submit = rng.uniform(0.0, cfg.duration_s)
        duration = min(cfg.median_duration_s * math.exp(rng.gauss(0.0, sigma)), 7 * 24 * 3600.0)
        queue = rng.choice(cfg.queues)
        draw = rng.random()
        common: dict[str, object] = {
            "queue": queue,
            "submit_time": round(submit, 3),
            "duration_estimate_s": round(duration, 3),
        }
        if draw < cfg.training_share:
            gpus = _weighted(rng, tail) if tail and rng.random() < cfg.large_tail_share else _weighted(rng, sizes)
            if cap is not None:
                gpus = min(gpus, cap)
            # Bytes all-reduced per step grow with the model, which grows with the job.
            comm = CommProfile(bytes_per_step=2e8 * max(1, gpus) ** 0.5 * 4, compute_s_per_step=0.5)
            llm = _llm_training(llm_rng, gpus) if gpus >= 8 and llm_rng.random() < cfg.llm_share else None
            sizes_kw: dict[str, int] = {}
            # An LLM gang draws from its own stream: the other gangs are elastic exactly as they were before
            # LLM gangs could be (the host rounds an LLM gang's bounds to whole data-parallel ranks).
            draws = elastic_rng if llm is None else elastic_llm_rng
            if cfg.elastic_share and gpus >= 2 and draws.random() < cfg.elastic_share:
                sizes_kw = {"min_gpus": gpus // 2, "max_gpus": min(2 * gpus, cap) if cap is not None else 2 * gpus}
            out.append(
                training(
                    f"train-{i:05d}",
                    gpus,
                    **sizes_kw,  # type: ignore[arg-type]
                    priority=rng.choice((0, 0, 0, 100)),
                    comm=comm,
                    checkpoint_interval_s=1800.0,
                    llm=llm,
                    **common,  # type: ignore[arg-type]
                )
            )
        elif draw < cfg.training_share + cfg.inference_share:
            tp = rng.choice((1, 2, 4, 8))
            replicas = rng.randint(2, 8)
            extra: dict[str, object] = {}
            if llm_rng.random() < cfg.llm_share:
                service = llm_rng.choice(LLM_SERVICES)
                tp = service.gpus
                peak = replicas * _replica_tokens_per_s(service) * TARGET_LOAD
                extra = {
                    "llm": service.llm,
                    "serving": ServingProfile(
                        peak_tokens_per_s=round(peak, 1), tokens_per_request=float(service.llm.osl)
                    ),
                }
            out.append(
                inference(
                    f"infer-{i:05d}",
                    replicas,
                    gpus_per_replica=tp,
                    min_replicas=max(1, replicas // 2),
                    max_replicas=replicas * 2,
                    priority=1000,
                    comm=CommProfile(bytes_per_step=5e7, compute_s_per_step=0.05),
                    **common,  # type: ignore[arg-type]
                    **extra,  # type: ignore[arg-type]
                )
            )
        else:
            shared = rng.random() < 0.3
            out.append(
                batch(
                    f"batch-{i:05d}",
                    gpus=1,
                    gpu_milli=rng.choice((250, 500)) if shared else 0,
                    tasks=rng.randint(1, 4),
                    priority=-100,
                    **common,  # type: ignore[arg-type]
                )
            )
    out.sort(key=lambda j: (j.submit_time, j.name))
    return out
