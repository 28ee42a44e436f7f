"""How a job becomes placement groups: what the placer is asked, one group at a time.

A training gang is one group. Inference replicas and shared-GPU units are one group each (replicas spread
away from each other: over nodes, and over the job's ``spread_racks`` racks); a replica larger than a node
becomes a compact group of single GPUs in one rack.
"""

from __future__ import annotations

from collections.abc import Callable

from rackscale.model.view import StateView
from rackscale.model.workload import JobKind, JobSpec, Level, Resources
from rackscale.scheduler.placement.request import GroupRequest


def placement_groups(
    job: JobSpec,
    state: StateView,
    models: tuple[str, ...],
    units: int,
    *,
    exclude: frozenset[int],
    only: frozenset[int] | None,
    allow_split: Callable[[], bool],
) -> list[tuple[GroupRequest, int]]:
    """Split a job into placement groups: a gang is one group; replicas and shared-GPU units are one
    group each; a replica larger than a node becomes a compact group of single GPUs in one rack."""
    unit = job.unit
    required = job.topology.required
    preferred = job.topology.preferred
    if job.kind is JobKind.INFERENCE or unit.is_fractional:
        spread = job.kind is JobKind.INFERENCE
        if unit.gpus > state.max_node_gpus:
            sub = Resources(
                gpus=1,
                cpu_milli=-(-unit.cpu_milli // unit.gpus),
                memory_mib=-(-unit.memory_mib // unit.gpus),
                gpu_models=unit.gpu_models,
            )
            req = GroupRequest(
                job=job.name,
                units=unit.gpus,
                unit=sub,
                models=models,
                one_rack=True,
                compact=True,
                spread=spread,
                spread_racks=job.spread_racks,
                exclude_racks=exclude,
                only_racks=only,
            )
        else:
            req = GroupRequest(
                job=job.name,
                units=1,
                unit=unit,
                models=models,
                one_rack=required is Level.RACK,
                one_region=required is Level.REGION,
                spread=spread,
                spread_racks=job.spread_racks,
                exclude_racks=exclude,
                only_racks=only,
            )
        return [(req, 1)] * units
    if job.kind is JobKind.BATCH and required is None and preferred is None:
        req = GroupRequest(
            job=job.name,
            units=units,
            unit=unit,
            models=models,
            prefer_one_region=False,
            exclude_racks=exclude,
            only_racks=only,
        )
        return [(req, units)]
    req = GroupRequest(
        job=job.name,
        units=units,
        unit=unit,
        models=models,
        one_rack=required is Level.RACK,
        prefer_one_rack=preferred is Level.RACK,
        allow_split=allow_split(),
        one_region=required in (Level.RACK, Level.REGION),
        exclude_racks=exclude,
        only_racks=only,
    )
    return [(req, units)]
