"""The plan's cost efficiency of a measured throughput, priced from the cluster spec.

The deployment plan (section 6.1) writes it ``throughput / (cost_per_hour * 3600)``; the simulator's
``cost_efficiency_samples`` KPI uses the same formula (rackscale.host.kpis), so the two compare. Its unit
is samples/s per (currency x s / h): hard to read, so the report gives beside it what it stands for,
samples per currency unit (``throughput * 3600 / cost_per_hour``) and the cost of a million samples.

``cost_per_hour = gpus x pricing.perGpuHour`` (the spec's field) in the spec's currency. ``gpus`` is what the endpoint
occupies (``--gpus N``); by default every GPU of the cluster, as the simulator prices a cluster (an idle
GPU costs too): give ``--gpus`` for an endpoint that holds only part of it."""

from __future__ import annotations

from dataclasses import dataclass

from rackscale.model.errors import RackscaleError
from rackscale.model.topology import GPUCluster

SECONDS_PER_HOUR = 3600.0


class CostError(RackscaleError, ValueError):
    """``--gpus`` out of the cluster's range (the message names the option and the range)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CostEfficiency:
    cluster: str
    gpus: int
    per_gpu_hour: float
    currency: str
    cost_per_hour: float
    throughput: float  # samples per second
    seed_efficiency: float | None  # throughput / (cost_per_hour * 3600), as the plan writes it
    samples_per_currency: float | None  # throughput * 3600 / cost_per_hour
    cost_per_million_samples: float | None


def cost_efficiency(*, cluster: GPUCluster, throughput: float, gpus: int | None = None) -> CostEfficiency:
    used = cluster.total_gpus if gpus is None else gpus
    if not 1 <= used <= cluster.total_gpus:
        raise CostError(f"--gpus must be from 1 to {cluster.total_gpus} (the GPUs of {cluster.name}; got {used})")
    if not throughput >= 0:
        raise CostError(f"throughput must be a number of at least 0 samples/s (got {throughput})")
    price = cluster.pricing.per_gpu_hour
    per_hour = used * price
    free = per_hour == 0  # a spec may price GPUs at 0: then only the throughput has a meaning
    return CostEfficiency(
        cluster=cluster.name,
        gpus=used,
        per_gpu_hour=price,
        currency=cluster.pricing.currency,
        cost_per_hour=per_hour,
        throughput=throughput,
        seed_efficiency=None if free else throughput / (per_hour * SECONDS_PER_HOUR),
        samples_per_currency=None if free else throughput * SECONDS_PER_HOUR / per_hour,
        cost_per_million_samples=None if throughput == 0 else per_hour / (throughput * SECONDS_PER_HOUR) * 1e6,
    )
