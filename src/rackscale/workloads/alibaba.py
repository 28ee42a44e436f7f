"""The Alibaba GPU cluster trace of 2023 ("openb", used by the FGD paper): pods as batch jobs, nodes as a
:class:`GPUCluster`.

Pods (``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,
scheduled_time``): each pod is a batch job of one task named as the pod, in the queue ``qos``, submitted at
``creation_time``, running ``deletion_time - creation_time`` (when both are given), asking for

- ``num_gpu`` whole GPUs (``gpu_milli`` 1000), or
- a share of one GPU: ``num_gpu == 1`` and ``gpu_milli < 1000`` gives ``Resources(gpus=0, gpu_milli=...)``, or
- no GPU: ``num_gpu == 0`` gives a CPU-only task, ``Resources(gpus=0, gpu_milli=0)``;

plus ``cpu_milli`` and ``memory_mib``, and ``gpu_models = set(gpu_spec.split('|'))`` (empty: any model).
``pod_phase`` and ``scheduled_time`` are not used. Only the first five columns are required: without
``gpu_spec`` a pod takes any model, without ``creation_time`` every pod is submitted at time 0.

Nodes (``sn,cpu_milli,memory_mib,gpu,model``): one node per row, each its own rack (the trace names no
NVLink domains: a rack is the node), all in one region. A node with 0 GPUs is a CPU-only node (model ``''``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace

from rackscale.model.spec_errors import SpecError, SpecProblem
from rackscale.model.specs import MAX_CLUSTER_NODES, MAX_TRACE_GPUS
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster, NodeDecl
from rackscale.model.workload import JobKind, JobSpec, Resources, TopologyConstraint
from rackscale.workloads.generic import OnError, RowCheck, TraceLoad, TraceOptions, gpu_models, open_csv

__all__ = [
    "ALIBABA_NODE_COLUMNS",
    "ALIBABA_POD_COLUMNS",
    "ALIBABA_POD_REQUIRED",
    "load_alibaba_nodes",
    "load_alibaba_pods",
]

ALIBABA_POD_COLUMNS: tuple[str, ...] = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
# The five columns a pod list needs; without ``gpu_spec`` a pod takes any GPU model, without ``creation_time``
# every pod is submitted at time 0 (a static pod list, as the FGD experiment's).
ALIBABA_POD_REQUIRED: tuple[str, ...] = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
_POD_REQUIRED = ALIBABA_POD_REQUIRED
ALIBABA_NODE_COLUMNS: tuple[str, ...] = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
_BIG = 1 << 62
_BATCH_TOPOLOGY = TopologyConstraint(required=None, preferred=None)  # what `batch()` gives


def load_alibaba_pods(
    path: str | os.PathLike[str],
    *,
    on_error: OnError = "skip",
    gpu_scale: float = 1.0,
    arrival_scale: float = 1.0,
    time_window: tuple[float, float] | None = None,
    max_jobs: int | None = None,
    tenant_map: Mapping[str, str] | None = None,
) -> TraceLoad:
    """Read an openb pod CSV as batch jobs sorted by submit time (``gpu_scale`` scales whole-GPU pods only;
    see docs/workloads.md). Raises only :class:`SpecError`."""
    opts = TraceOptions(
        on_error=on_error,
        gpu_scale=gpu_scale,
        arrival_scale=arrival_scale,
        time_window=time_window,
        max_jobs=max_jobs,
        tenant_map=tenant_map,
    )
    opts.check()
    table = open_csv(path, what="openb pod list", required=_POD_REQUIRED)
    c = table.columns
    optional = [c.get(k) for k in ("gpu_spec", "qos", "deletion_time", "creation_time")]
    problems: list[SpecProblem] = []
    records: list[tuple[float, JobSpec]] = []
    seen: dict[str, int] = {}
    for line, row in table.rows(problems):
        spec, qos, deleted, born = (row[i] if i is not None else None for i in optional)
        check = RowCheck(line, problems)
        name = check.text("name", row[c["name"]])
        cpu = check.whole("cpu_milli", row[c["cpu_milli"]], high=_BIG)
        mem = check.whole("memory_mib", row[c["memory_mib"]], high=_BIG)
        num = check.whole("num_gpu", row[c["num_gpu"]])
        milli = check.whole("gpu_milli", row[c["gpu_milli"]], high=MILLI_PER_GPU)
        models = gpu_models(spec or None, check, "gpu_spec")
        queue = check.text("qos", qos, required=False) or "default"
        created = check.number("creation_time", born) if "creation_time" in c else 0.0
        end = check.number("deletion_time", deleted, required=False)
        if created is not None and end is not None and end < created:
            check.fail("deletion_time", f"negative duration: deleted at {end:g} s, created at {created:g} s")
        if num is not None and milli is not None:
            if num == 0 and milli:
                check.fail("gpu_milli", f"{milli} with num_gpu 0", "set gpu_milli to 0 for a CPU-only pod")
            elif num == 1 and not milli:
                check.fail("gpu_milli", "0 with num_gpu 1", "give the share of the GPU, 1..1000")
            elif num > 1 and milli != MILLI_PER_GPU:
                check.fail("gpu_milli", f"{milli} with num_gpu {num}", "a pod of several GPUs takes them whole: 1000")
        if name is not None and name in seen:
            check.fail("name", f"pod {name!r} is already on line {seen[name]}", "give every pod its own name")
        if (
            not check.ok
            or name is None
            or cpu is None
            or mem is None
            or num is None
            or milli is None
            or created is None
        ):
            continue
        seen[name] = line
        shared = num == 1 and milli < MILLI_PER_GPU
        unit = Resources(
            gpus=0 if shared or not num else opts.scale_gpus(num),
            gpu_milli=milli if shared else 0,
            cpu_milli=cpu,
            memory_mib=mem,
            gpu_models=models,
        )
        job = JobSpec(
            name=name,
            kind=JobKind.BATCH,
            unit=unit,
            units=1,
            queue=opts.queue(queue),
            topology=_BATCH_TOPOLOGY,
            duration_estimate_s=end - created if end is not None else None,
            submit_time=created,
        )
        records.append((created, job))
    jobs = [job if t == job.submit_time else replace(job, submit_time=t) for _, t, job in opts.arrange(records)]
    return opts.finish(table.source, jobs, problems)


def load_alibaba_nodes(
    path: str | os.PathLike[str], *, name: str = "alibaba-openb", region: str = "region-0"
) -> GPUCluster:
    """Read an openb node CSV as a cluster: one rack per node, one region. A cluster must be whole, so any
    bad row raises :class:`SpecError` listing them all (there is no ``on_error="skip"`` here). A row may hold
    up to ``MAX_UNITS`` GPUs, but the cluster at most :data:`~rackscale.model.specs.MAX_TRACE_GPUS` GPUs and
    :data:`~rackscale.model.specs.MAX_CLUSTER_NODES` nodes (a cluster spec's bound): the rows are refused at
    the one that passes either, before anything is built."""
    table = open_csv(path, what="openb node list", required=ALIBABA_NODE_COLUMNS)
    c = table.columns
    problems: list[SpecProblem] = []
    decls: list[NodeDecl] = []
    seen: dict[str, int] = {}
    total_gpus = 0
    for line, row in table.rows(problems):
        check = RowCheck(line, problems)
        sn = check.text("sn", row[c["sn"]])
        cpu = check.whole("cpu_milli", row[c["cpu_milli"]], high=_BIG)
        mem = check.whole("memory_mib", row[c["memory_mib"]], high=_BIG)
        gpus = check.whole("gpu", row[c["gpu"]])
        model = check.text("model", row[c["model"]], required=bool(gpus))
        if sn is not None and sn in seen:
            check.fail("sn", f"node {sn!r} is already on line {seen[sn]}", "give every node its own sn")
        if not check.ok or sn is None or cpu is None or mem is None or gpus is None:
            continue
        seen[sn] = line
        total_gpus += gpus
        if total_gpus > MAX_TRACE_GPUS:
            why = (
                f"the nodes up to this row hold {total_gpus:,} GPUs, more than the {MAX_TRACE_GPUS:,} a trace's "
                "cluster may have"
            )
            fix = "give a part of the node list: fewer nodes, or fewer GPUs a node"
            problems.append(SpecProblem(("gpu",), why, fix, line))
            break  # the rest is not read: it would only add to what is refused
        if len(decls) >= MAX_CLUSTER_NODES:
            why = f"more than {MAX_CLUSTER_NODES:,} nodes, the most a cluster may have"
            problems.append(SpecProblem((), why, "give a part of the node list: fewer nodes", line))
            break
        decls.append(NodeDecl(sn, sn, region, gpus, model if gpus and model else "", cpu, mem))
    if not decls and not problems:
        problems.append(SpecProblem((), "no nodes", "add one row per node under the header", table.header_line))
    if problems:
        raise SpecError(problems, table.source)
    try:
        return GPUCluster.from_nodes(decls, name=name)
    except ValueError as err:  # the rows are checked above; never let a raw ValueError escape
        raise SpecError([SpecProblem((), f"cannot build the cluster: {err}")], table.source) from None
