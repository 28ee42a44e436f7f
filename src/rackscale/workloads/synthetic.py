"""The embedded default workload: a seeded synthetic mix calibrated on public traces.

- Training sizes follow the Philly 2017 ``num_gpus`` histogram (../shared/traces/README.md), plus an
  LLM-era tail of multi-rack gangs (Seren/Kalos 2023 reach 1,024 GPUs), capped to the cluster's size.
- Durations are log-normal around Philly's median (1,144 s) with a heavy tail.
- Inference services (replicas of 1-8 GPUs) and batch jobs (whole or shared GPUs) complete the mix.

Pure: the same config and seed give the same jobs.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from rackscale.model.workload import CommProfile, JobSpec, batch, inference, training

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
    seed: int = 0


def _weighted(rng: random.Random, table: dict[int, float]) -> int:
    keys = list(table)
    return rng.choices(keys, weights=[table[k] for k in keys])[0]


def synthetic_jobs(cfg: SyntheticConfig) -> list[JobSpec]:
    rng = random.Random(cfg.seed)
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
            out.append(
                training(
                    f"train-{i:05d}",
                    gpus,
                    priority=rng.choice((0, 0, 0, 100)),
                    comm=comm,
                    checkpoint_interval_s=1800.0,
                    **common,  # type: ignore[arg-type]
                )
            )
        elif draw < cfg.training_share + cfg.inference_share:
            tp = rng.choice((1, 2, 4, 8))
            replicas = rng.randint(2, 8)
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
