"""Job-level filters: cheap checks that reject a job before any search, each with an actionable reason."""

from __future__ import annotations

from dataclasses import dataclass

from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.model.view import StateView
from rackscale.model.workload import JobKind, JobSpec, Level
from rackscale.scheduler.framework import FILTERS, CycleContext
from rackscale.scheduler.pending import fewest_units
from rackscale.scheduler.status import SUCCESS, Reason, Status, unresolvable, wait


def allowed_models(job: JobSpec, ctx: CycleContext) -> tuple[str, ...]:
    wanted = job.unit.gpu_models
    if not wanted:
        return ctx.models
    return tuple(m for m in ctx.models if m in wanted)


class GpuModelFilter:
    name = "gpu-model"
    static = True

    def filter(self, job: JobSpec, state: StateView, ctx: CycleContext) -> Status:
        if job.unit.gpu_demand_milli and not allowed_models(job, ctx):
            wanted = ", ".join(sorted(job.unit.gpu_models or ()))
            return unresolvable(
                Reason.NO_GPU_MODEL,
                f"no GPUs of model {wanted} in this cluster (it has {', '.join(ctx.models)}); change gpuModels",
                self.name,
            )
        return SUCCESS


@dataclass(frozen=True, slots=True)
class _Caps:
    """The largest node, rack and region of one GPU model, and the model's total (computed once)."""

    node_gpus: int
    node_cpu: int
    node_mem: int
    rack_gpus: int
    region_gpus: int
    total_gpus: int


def _caps(cluster: GPUCluster, models: tuple[str, ...]) -> _Caps:
    nodes = [n for n in cluster.nodes if n.gpu_model in models or n.gpus == 0]
    racks = [r for r in cluster.racks if r.gpu_model in models]
    per_region = [sum(r.gpus for r in racks if r.region == g.index) for g in cluster.regions]
    return _Caps(
        node_gpus=max((n.gpus for n in nodes), default=0),
        node_cpu=max((n.cpu_milli for n in nodes), default=0),
        node_mem=max((n.memory_mib for n in nodes), default=0),
        rack_gpus=max((r.gpus for r in racks), default=0),
        region_gpus=max(per_region, default=0),
        total_gpus=sum(r.gpus for r in racks),
    )


class FitsEverFilter:
    """Could the job run on this cluster if it were empty? If not, waiting will not help."""

    name = "fits-ever"
    static = True

    def __init__(self) -> None:
        self._cluster: GPUCluster | None = None
        self._caps: dict[tuple[str, ...], _Caps] = {}

    def caps(self, cluster: GPUCluster, models: tuple[str, ...]) -> _Caps:
        if cluster is not self._cluster:
            self._cluster, self._caps = cluster, {}
        got = self._caps.get(models)
        if got is None:
            got = self._caps[models] = _caps(cluster, models)
        return got

    def filter(self, job: JobSpec, state: StateView, ctx: CycleContext) -> Status:
        unit = job.unit
        caps = self.caps(state.cluster, allowed_models(job, ctx) or ctx.models)
        splittable = job.kind is JobKind.INFERENCE  # a replica's tensor-parallel group may span nodes
        if unit.gpus > caps.node_gpus and not splittable:
            return unresolvable(
                Reason.NODE_TOO_SMALL,
                f"a worker asks for {unit.gpus} GPUs but the largest node has {caps.node_gpus}; "
                f"set gpusPerWorker <= {caps.node_gpus}",
                self.name,
            )
        if unit.cpu_milli > caps.node_cpu or unit.memory_mib > caps.node_mem:
            return unresolvable(
                Reason.NODE_TOO_SMALL,
                f"a unit asks for {unit.cpu_milli} milli-CPU and {unit.memory_mib} MiB but the largest "
                f"node has {caps.node_cpu} milli-CPU and {caps.node_mem} MiB; ask for less",
                self.name,
            )
        need = unit.gpus if job.kind is JobKind.INFERENCE else job.total_gpus
        if job.topology.required is Level.RACK and need > caps.rack_gpus:
            what = "a replica" if job.kind is JobKind.INFERENCE else "the job"
            return unresolvable(
                Reason.TOO_LARGE,
                f"{what} needs {need} GPUs inside one rack but the largest rack has {caps.rack_gpus}; "
                "ask for fewer GPUs or relax topology.required to region",
                self.name,
            )
        if job.topology.required is Level.REGION and job.total_gpus > caps.region_gpus:
            return unresolvable(
                Reason.TOO_LARGE,
                f"the job needs {job.total_gpus} GPUs inside one region but the largest region has "
                f"{caps.region_gpus}; ask for fewer GPUs or drop topology.required",
                self.name,
            )
        fewest = fewest_units(job, elastic=ctx.elastic)  # (a gang's minimum only where the profile resizes)
        if job.unit.gpu_demand_milli * fewest > caps.total_gpus * MILLI_PER_GPU:
            return unresolvable(
                Reason.TOO_LARGE,
                f"the job needs {job.unit.gpu_demand_milli * fewest / MILLI_PER_GPU:g} GPUs "
                f"but the cluster has {caps.total_gpus} of the allowed models; ask for fewer",
                self.name,
            )
        return SUCCESS


class QuotaFilter:
    name = "quota"
    static = False  # depends on what the queue holds now

    def filter(self, job: JobSpec, state: StateView, ctx: CycleContext) -> Status:
        cfg = ctx.queues.get(job.queue)
        if cfg is None or cfg.quota_gpus is None:
            return SUCCESS
        used = state.queue_usage.get(job.queue)
        held = used.gpu_milli if used else 0
        quota = int(cfg.quota_gpus * MILLI_PER_GPU)
        asked = job.unit.gpu_demand_milli * fewest_units(job, elastic=ctx.elastic)
        if held + asked > quota:
            return wait(
                Reason.QUOTA,
                f"queue {job.queue!r} holds {held / MILLI_PER_GPU:g} of its {cfg.quota_gpus:g} GPU quota "
                f"and the job asks for {asked / MILLI_PER_GPU:g} more; it runs when the queue's jobs end",
                self.name,
            )
        return SUCCESS


FILTERS[GpuModelFilter.name] = GpuModelFilter
FILTERS[FitsEverFilter.name] = FitsEverFilter
FILTERS[QuotaFilter.name] = QuotaFilter
