"""The performance model: placement changes speed.

A training step costs ``compute + communication``. The collective's time is set by the slowest tier it
crosses (DESIGN.md section 4):

- **ring** all-reduce of ``S`` bytes over ``N`` GPUs: every ring edge carries ``2(N-1)/N * S`` bytes and
  the edges run in parallel, so the time is that volume over the slowest edge's bandwidth, plus
  ``2(N-1)`` hops of the slowest edge's latency. Inside one rack every edge is NVLink; once the ring
  leaves the rack, its RDMA (or backbone) edges set the pace.
- **hierarchical**: reduce-scatter and all-gather inside each rack over NVLink, and an all-reduce of
  the rack shards between racks; each of a rack's ``n_i`` GPUs sends its shard over its own NIC, so the
  inter-rack phase moves ``2(r-1)/r * S / n_min`` bytes per NIC.
- **contention**: an inter-rack edge gets at most one NIC (``rdma`` bandwidth); when the flows crossing
  a rack's uplinks (or the backbone) ask for more than its capacity, all of them are slowed by the same
  factor, ``demand / capacity`` (proportional sharing, from each job's uncontended demand).

A job's *work* is its step count: ``duration_estimate_s`` is its run time with all its GPUs on NVLink
(one domain, uncontended), so a slower placement finishes later, in proportion.
Inference replicas all-reduce their tensor-parallel activations the same way: a replica split over
racks serves fewer tokens per second.

A job that names its model (``spec.llm``) is timed by the LLM model instead (:mod:`rackscale.llm.jobs`):
its plan's TP, PP and DP collectives on the tiers its layout spans, its compute at the catalogue chip's
rate; a replica's decode step at its configured batch. :func:`job_step` and :func:`job_ideal_step` pick
the right one for any job; the host, the scheduler and the metrics call them.
"""

from __future__ import annotations

import math

from rackscale.llm import jobs as llm_jobs
from rackscale.llm.jobs import job_ideal_step, job_step
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobSpec
from rackscale.network.collectives import Layout, StepTime, collective_time, ideal_step, training_step

SAMPLES_PER_GPU_STEP = 32.0  # default samples per GPU per step when the job does not say
TOKENS_PER_REPLICA_STEP = 64.0  # decode batch: tokens one replica emits per step

__all__ = [
    "Layout",
    "StepTime",
    "collective_time",
    "ideal_step",
    "job_ideal_step",
    "job_step",
    "replica_tokens_per_s",
    "samples_per_step",
    "training_step",
    "uplink_slowdown",
]


def samples_per_step(spec: JobSpec, gpus: int) -> float:
    """Samples one training step consumes: an LLM job's global batch (sequences), else a default per GPU."""
    llm = llm_jobs.samples_per_step(spec)
    return float(llm) if llm is not None else SAMPLES_PER_GPU_STEP * max(gpus, 1)


def replica_tokens_per_s(cluster: GPUCluster, spec: JobSpec, layout: Layout, *, speed: float = 1.0) -> float:
    """Tokens per second one replica serves at full load on ``layout`` (its tensor-parallel group); an LLM
    replica: output tokens at its configured batch, prefill included (``speed`` does not apply)."""
    if llm_jobs.is_llm(spec):
        return llm_jobs.replica_serving(cluster, spec, layout).tokens_per_s
    compute = spec.comm.compute_s_per_step / max(speed, 1e-9)
    step = compute + collective_time(cluster, layout, size_bytes=spec.comm.bytes_per_step)
    return TOKENS_PER_REPLICA_STEP / max(step, 1e-9)


def uplink_slowdown(demand_gbps: float, capacity_gbps: float) -> float:
    """Proportional sharing: flows through a link asking for more than it carries are slowed alike."""
    if capacity_gbps <= 0:
        return math.inf if demand_gbps > 0 else 1.0
    return max(1.0, demand_gbps / capacity_gbps)
