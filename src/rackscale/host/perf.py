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
"""

from __future__ import annotations

import math

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
    "replica_tokens_per_s",
    "samples_per_step",
    "training_step",
    "uplink_slowdown",
]


def samples_per_step(spec: JobSpec, gpus: int) -> float:
    return SAMPLES_PER_GPU_STEP * max(gpus, 1)


def replica_tokens_per_s(cluster: GPUCluster, spec: JobSpec, layout: Layout, *, speed: float = 1.0) -> float:
    """Tokens per second one replica serves at full load on ``layout`` (its tensor-parallel group)."""
    compute = spec.comm.compute_s_per_step / max(speed, 1e-9)
    step = compute + collective_time(cluster, layout, size_bytes=spec.comm.bytes_per_step)
    return TOKENS_PER_REPLICA_STEP / max(step, 1e-9)


def uplink_slowdown(demand_gbps: float, capacity_gbps: float) -> float:
    """Proportional sharing: flows through a link asking for more than it carries are slowed alike."""
    if capacity_gbps <= 0:
        return math.inf if demand_gbps > 0 else 1.0
    return max(1.0, demand_gbps / capacity_gbps)
