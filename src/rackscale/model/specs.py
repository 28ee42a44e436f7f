"""Cluster and job specs: validate plain documents (already parsed from YAML/JSON) into model values.

Pure: no file I/O and no YAML here (``rackscale.loaders`` reads files). Validation happens in two passes:
pydantic checks the shape, types and ranges of a document (models in :mod:`rackscale.model.spec_docs`),
then plain code checks the rules that span fields. Every failure becomes one :class:`SpecError` listing
*all* the problems found, each with a field path and a fix, so a user can correct a file in one go.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from rackscale.model import spec_docs as d
from rackscale.model.spec_errors import SpecError, SpecProblem, problems_from_validation
from rackscale.model.text import document_problems
from rackscale.model.topology import (
    DEFAULT_BACKBONE,
    DEFAULT_LEVELS,
    DEFAULT_NVLINK,
    DEFAULT_RDMA,
    GPUCluster,
    LinkTier,
    LinkTiers,
    NodeDecl,
    Pricing,
    TopologyLevel,
)
from rackscale.model.workload import (
    BUILTIN_PRIORITY_CLASSES,
    LLM_MOE_MODELS,
    AutoscaleSpec,
    CommProfile,
    JobKind,
    JobSpec,
    Level,
    LlmWork,
    LoadMetric,
    PreemptionPolicy,
    Resources,
    ScaleFallback,
    TopologyConstraint,
)

__all__ = [
    "CLUSTER_KINDS",
    "GPU_MODELS",
    "MAX_CLUSTER_NODES",
    "MAX_SYNTHETIC_JOBS",
    "MAX_TRACE_GPUS",
    "SpecError",
    "SpecProblem",
    "cluster_from_dict",
    "gpu_type_problem",
    "job_from_dict",
]

# Building the model is linear in nodes; the cap keeps a typo (an extra zero or two) from eating memory.
MAX_CLUSTER_NODES = 262_144
# The same cap in the default cluster's NVL72 racks (18 nodes each): `--racks` and a sweep's `racks`.
MAX_NVL72_RACKS = MAX_CLUSTER_NODES // d.SEED_NODES_PER_RACK
# The most jobs one run may be given (a synthetic mix after --arrival-scale, a trace's inflated arrivals):
# 1e6 x 1e7 would never fit in memory.
MAX_SYNTHETIC_JOBS = 10_000_000
# The most GPUs of a cluster read from a trace's node list (`rackscale pack --nodes`), where each row may
# hold up to MAX_UNITS GPUs: one row of 1,048,576 made a ClusterState of ~1 GiB (~0.9 KiB a GPU). 2**17 is
# the largest cluster the project measures (100,008 GPUs: 1,389 NVL72 racks, docs/benchmarks.md) with 30 %
# to spare, and 21 times the openb trace's 6,212; a ClusterState of it is ~115 MiB.
MAX_TRACE_GPUS = 1 << 17

# The `kind`s of cluster documents: the seed's resource and rackscale's own form.
CLUSTER_KINDS = ("GpuCluster", "Cluster")

# The GPU models a cluster's `gpuType` may name without declaring them (docs/specs.md, "GPU models"). A
# name passes if it is one of these or holds one as a word: `H100-80GB`, `NVIDIA-H100-80GB-HBM3` (the
# Kubernetes gpu.product label), `Tesla-V100-SXM2`. Anything else must be declared in `spec.gpuSpeed`:
# the model name is matched exactly against jobs' `gpuModels`, so a typo (`A1000`) would leave every job
# that asks for the real model waiting for ever. `local` is the local backend's model.
GPU_MODELS = (
    # NVIDIA data centre: Blackwell, Hopper, Ampere, Ada, Volta/Turing/Pascal
    "GB300", "GB200", "B300", "B200", "B100", "GH200", "H200", "H100", "H800", "H20",
    "A100", "A800", "A40", "A30", "A16", "A10", "A10G", "A2",
    "L40S", "L40", "L20", "L4", "V100", "T4", "P100", "P40", "P4",
    # NVIDIA workstation
    "RTX", "A6000", "A5000", "A4000", "RTX6000", "RTX8000",
    # AMD Instinct, Intel Gaudi
    "MI355X", "MI325X", "MI300X", "MI300A", "MI250X", "MI250", "MI210", "MI100",
    "Gaudi", "Gaudi2", "Gaudi3",
    "local",
)  # fmt: skip
_GPU_MODEL_SET = frozenset(GPU_MODELS)
_WORDS = re.compile(r"[-_ /.:]+")

# The seed form with `rdma: disabled`: commodity Ethernet between racks instead of the RDMA fabric.
TCP_TIER = LinkTier("tcp", 25.0, 30.0)

Loc = tuple[str | int, ...]
_M = TypeVar("_M", bound=BaseModel)


@dataclass(slots=True)
class _Problems:
    """Collects cross-field problems under a path prefix (``spec`` for Kubernetes-style documents)."""

    prefix: Loc
    items: list[SpecProblem]

    def add(self, loc: Loc, message: str, fix: str = "") -> None:
        self.items.append(SpecProblem(self.prefix + loc, message, fix))

    def raise_if_any(self) -> None:
        if self.items:
            raise SpecError(self.items)


def _validate(model: type[_M], doc: Mapping[str, Any]) -> _M:
    try:
        return model.model_validate(dict(doc))
    except ValidationError as err:
        raise SpecError(problems_from_validation(err, model)) from None


def _require_mapping(doc: object, what: str, example: str) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping):
        raise SpecError([SpecProblem((), f"expected a {what} (key: value pairs), got {type(doc).__name__}", example)])
    if hostile := document_problems(doc):  # NUL, lone surrogates, absurd depth: anywhere, before the models
        raise SpecError(hostile)
    return doc


def gpu_type_problem(name: str, declared: Collection[str] = (), *, seed: bool = False) -> tuple[str, str] | None:
    """``(message, fix)`` when ``name`` is not a GPU model rackscale knows, else None: it is known when it
    is in :data:`GPU_MODELS`, holds one of them as a word, or is ``declared`` (a key of ``gpuSpeed``).
    ``seed``: the fix for the seed form, which has no ``gpuSpeed``."""
    if name in declared or name in _GPU_MODEL_SET or any(w in _GPU_MODEL_SET for w in _WORDS.split(name)):
        return None
    by_upper = {m.upper(): m for m in GPU_MODELS}
    near = [by_upper[name.upper()]] if name.upper() in by_upper else difflib.get_close_matches(name, GPU_MODELS, 1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    declare = f"declare it in spec.gpuSpeed, e.g. gpuSpeed: {{{name}: 1.0}}"
    if seed:
        fix = f"{hint}for a model not in rackscale's list, write the cluster as kind: Cluster and {declare}"
    else:
        fix = f"{hint}for a model not in rackscale's list, {declare}"
    return f"{name!r} is not a GPU model rackscale knows", f"{fix} (docs/specs.md, GPU models)"


# ---------------------------------------------------------------------------------------------- clusters
def cluster_from_dict(doc: Mapping[str, Any]) -> GPUCluster:
    """Validate a ``GpuCluster`` (seed) or ``Cluster`` (rackscale) document into a :class:`GPUCluster`.

    Raises :class:`SpecError` listing every problem found; never anything else.
    """
    doc = _require_mapping(doc, "cluster document", "start with `apiVersion: rackscale.io/v1` and `kind: Cluster`")
    kind = doc.get("kind")
    kinds = dict(zip(CLUSTER_KINDS, (_seed_cluster, _rich_cluster), strict=True))
    if kind is None:
        raise SpecError(
            [SpecProblem(("kind",), "required field is missing", "add `kind: Cluster` or `kind: GpuCluster`")]
        )
    if not isinstance(kind, str) or kind not in kinds:
        raise SpecError(
            [SpecProblem(("kind",), f"unknown kind {kind!r}", f"use one of: {', '.join(kinds)} (case matters)")]
        )
    return kinds[kind](doc)


def _build(make: Callable[[], GPUCluster]) -> GPUCluster:
    # from_nodes raises ValueError for inconsistent layouts; the spec checks should prevent them, but a
    # raw ValueError must never escape, so report it at `spec` rather than crash.
    try:
        return make()
    except ValueError as err:
        raise SpecError([SpecProblem(("spec",), f"cannot build the cluster: {err}")]) from None


def _seed_cluster(doc: Mapping[str, Any]) -> GPUCluster:
    res = _validate(d.SeedClusterDoc, doc)
    s, out = res.spec, _Problems(("spec",), [])
    gpn = s.gpus_per_node
    if s.gpu_count % gpn:
        lo, hi = s.gpu_count // gpn * gpn, (s.gpu_count // gpn + 1) * gpn
        eg = f"{lo} or {hi}" if lo else str(hi)
        out.add(
            ("gpuCount",), f"{s.gpu_count} GPUs do not fill whole nodes of {gpn}", f"use a multiple of {gpn}, e.g. {eg}"
        )
    if not s.nvlink and s.nodes_per_rack is not None and s.nodes_per_rack != 1:
        out.add(
            ("nodesPerRack",),
            "conflicts with `nvlink: disabled` (each node is then its own NVLink domain)",
            "remove nodesPerRack, or set `nvlink: enabled`",
        )
    if s.gpu_count // gpn > MAX_CLUSTER_NODES:
        out.add(("gpuCount",), f"more than {MAX_CLUSTER_NODES} nodes", "check for an extra digit")
    if unknown_model := gpu_type_problem(s.gpu_type, seed=True):
        out.add(("gpuType",), *unknown_model)
    out.raise_if_any()
    nodes_per_rack = (s.nodes_per_rack or d.SEED_NODES_PER_RACK) if s.nvlink else 1
    return _build(
        partial(
            GPUCluster.uniform,
            name=res.metadata.name,
            racks_per_region=math.ceil(s.gpu_count / (nodes_per_rack * gpn)),
            nodes_per_rack=nodes_per_rack,
            gpus_per_node=gpn,
            gpu_model=s.gpu_type,
            total_gpus=s.gpu_count,
            tiers=LinkTiers(rdma=DEFAULT_RDMA if s.rdma else TCP_TIER),
            pricing=Pricing() if s.price_per_gpu_hour is None else Pricing(per_gpu_hour=s.price_per_gpu_hour),
        )
    )


def _tier(doc: d.TierDoc | None, default: LinkTier) -> LinkTier:
    if doc is None:
        return default
    bw = default.bandwidth_gbps if doc.bandwidth_gbps is None else doc.bandwidth_gbps
    lat = default.latency_us if doc.latency_us is None else doc.latency_us
    return LinkTier(default.name, bw, lat)


def _levels(spec: d.ClusterSpecDoc, out: _Problems) -> tuple[TopologyLevel, ...]:
    if spec.topology is None or spec.topology.levels is None:
        return DEFAULT_LEVELS
    docs = spec.topology.levels
    for field in ("name", "label_key"):
        seen: dict[str, int] = {}
        for i, lv in enumerate(docs):
            value = getattr(lv, field)
            if value in seen:
                key = "name" if field == "name" else "labelKey"
                out.add(
                    ("topology", "levels", i, key),
                    f"{value!r} repeats levels[{seen[value]}]",
                    "each level needs its own",
                )
            seen.setdefault(value, i)
    return tuple(TopologyLevel(lv.name, lv.label_key) for lv in docs)


_UNIFORM_FIELDS = ("regions", "racks_per_region", "nodes_per_rack", "gpus_per_node", "gpu_type", "node")


def _speeds(speeds: Mapping[str, float] | None, out: _Problems) -> dict[str, float]:
    for model, v in (speeds or {}).items():
        if not (v > 0 and v < 1e6):
            out.add(
                ("gpuSpeed", model), f"speed {v} is not a positive number", "use a relative speed such as 1.0 or 2.5"
            )
    return dict(speeds or {})


def _rich_cluster(doc: Mapping[str, Any]) -> GPUCluster:
    res = _validate(d.ClusterDoc, doc)
    s, out = res.spec, _Problems(("spec",), [])
    levels = _levels(s, out)
    t = s.tiers or d.TiersDoc()
    common: dict[str, Any] = {
        "name": res.metadata.name,
        "levels": levels,
        "tiers": LinkTiers(
            _tier(t.nvlink, DEFAULT_NVLINK), _tier(t.rdma, DEFAULT_RDMA), _tier(t.backbone, DEFAULT_BACKBONE)
        ),
        "pricing": Pricing(s.pricing.per_gpu_hour, s.pricing.currency) if s.pricing else Pricing(),
        "spines_per_region": s.spines_per_region,
        "uplinks_per_rack": s.uplinks_per_rack,
        "gpu_speed": _speeds(s.gpu_speed, out),
    }
    declared = frozenset(s.gpu_speed or ())  # a model listed in gpuSpeed is declared, known or not
    if s.pools is None:
        nodes = (
            (s.regions or 1)
            * (s.racks_per_region or d.RICH_RACKS_PER_REGION)
            * (s.nodes_per_rack or d.SEED_NODES_PER_RACK)
        )
        if nodes > MAX_CLUSTER_NODES:
            out.add(
                ("racksPerRegion",), f"{nodes} nodes in all, more than {MAX_CLUSTER_NODES}", "check for an extra digit"
            )
        if s.gpu_type is not None and (unknown_model := gpu_type_problem(s.gpu_type, declared)):
            out.add(("gpuType",), *unknown_model)
        out.raise_if_any()
        node = s.node or d.NodeDoc()
        return _build(
            partial(
                GPUCluster.uniform,
                regions=s.regions or 1,
                racks_per_region=s.racks_per_region or d.RICH_RACKS_PER_REGION,
                nodes_per_rack=s.nodes_per_rack or d.SEED_NODES_PER_RACK,
                gpus_per_node=s.gpus_per_node or d.SEED_GPUS_PER_NODE,
                gpu_model=s.gpu_type or d.RICH_GPU_TYPE,
                cpu_milli=node.cpu_milli,
                memory_mib=node.memory_mib,
                **common,
            )
        )
    # Heterogeneous: uniform sizing fields would be ambiguous next to pools, so they are refused.
    for attr in _UNIFORM_FIELDS:
        if attr in s.model_fields_set:
            key = d.ClusterSpecDoc.model_fields[attr].alias or attr
            out.add((key,), "cannot be combined with `pools`", f"set {key} on each pool, or drop `pools`")
    names: dict[str, int] = {}
    for i, pool in enumerate(s.pools):
        if pool.name in names:
            out.add(
                ("pools", i, "name"),
                f"pool name {pool.name!r} repeats pools[{names[pool.name]}]",
                "give each pool its own name",
            )
        names.setdefault(pool.name, i)
        if unknown_model := gpu_type_problem(pool.gpu_type, declared):
            out.add(("pools", i, "gpuType"), *unknown_model)
    if sum(p.racks * p.nodes_per_rack for p in s.pools) > MAX_CLUSTER_NODES:
        out.add(
            ("pools",), f"more than {MAX_CLUSTER_NODES} nodes in all", "check racks and nodesPerRack for an extra digit"
        )
    out.raise_if_any()
    decls = [
        NodeDecl(
            name=f"{p.name}-r{r:03d}-n{n:02d}",
            rack=f"{p.name}-r{r:03d}",
            region=p.region,
            gpus=p.gpus_per_node,
            gpu_model=p.gpu_type,
            cpu_milli=p.node.cpu_milli,
            memory_mib=p.node.memory_mib,
        )
        for p in s.pools
        for r in range(p.racks)
        for n in range(p.nodes_per_rack)
    ]
    return _build(partial(GPUCluster.from_nodes, decls, **common))


# ---------------------------------------------------------------------------------------------- jobs
# The sizing fields each job kind understands; the others are refused so that a typo'd kind is caught.
_SIZING: dict[str, tuple[str, ...]] = {
    "training": ("gpus", "gpusPerWorker", "minGpus", "maxGpus"),
    "inference": ("replicas", "gpusPerReplica", "minReplicas", "maxReplicas", "gpuMilli"),
    "batch": ("gpus", "tasks", "gpuMilli"),
}
_DEFAULT_TOPOLOGY = {
    "training": TopologyConstraint(required=None, preferred=Level.RACK),
    "inference": TopologyConstraint(required=Level.RACK, preferred=Level.RACK),
    "batch": TopologyConstraint(required=None, preferred=None),
}


# Jobs that ask for equal resources, or communicate alike (most do), share one frozen object of each:
# a queued job then holds one object for the garbage collector to track instead of three (a service with
# 50,000 waiting jobs and 1,000 submissions a second collects its young objects about half as often;
# docs/benchmarks.md, "What the young generation holds"). Bounded: distinct values from a hostile client
# cost at most ``maxsize`` entries. ``typed``: an int and an equal float stay apart (values are kept as
# given; only a zero's sign may come from an earlier job's equal value).
@lru_cache(maxsize=1024, typed=True)
def _shared_resources(
    gpus: int, gpu_milli: int, cpu_milli: int, memory_mib: int, gpu_models: frozenset[str] | None
) -> Resources:
    return Resources(gpus=gpus, gpu_milli=gpu_milli, cpu_milli=cpu_milli, memory_mib=memory_mib, gpu_models=gpu_models)


@lru_cache(maxsize=1024, typed=True)
def _shared_comm(bytes_per_step: float, compute_s_per_step: float, collective: str) -> CommProfile:
    return CommProfile(bytes_per_step, compute_s_per_step, collective)


def job_from_dict(doc: Mapping[str, Any], *, priority_classes: Mapping[str, int] | None = None) -> JobSpec:
    """Validate a job document (flat, or Kubernetes-style ``kind: Job``) into a :class:`JobSpec`.

    ``priority_classes`` adds to (and may override) :data:`BUILTIN_PRIORITY_CLASSES`.
    Raises :class:`SpecError` listing every problem found; never anything else.
    """
    doc = _require_mapping(doc, "job document", "e.g. {name: train-1, kind: training, gpus: 8}")
    # A Kubernetes-style document is recognised by its envelope; in the flat form `kind` is the job kind.
    if "apiVersion" in doc or "spec" in doc or doc.get("kind") == "Job":
        k8s = _validate(d.K8sJobDoc, doc)
        return _job(k8s.metadata.name, k8s.spec, ("spec",), priority_classes)
    flat = _validate(d.FlatJobDoc, doc)
    return _job(flat.name, flat, (), priority_classes)


def _unit(b: d.JobBodyDoc, out: _Problems) -> tuple[int, int, int]:
    """Check the sizing fields of ``b``; return (whole GPUs per unit, milli-GPU per unit, units)."""
    kind = b.kind
    given = {type(b).model_fields[f].alias or f for f in b.model_fields_set}
    for key in sorted(given & (set().union(*_SIZING.values()) - set(_SIZING[kind]))):
        out.add((key,), f"not used by {kind} jobs", f"{kind} jobs are sized with {', '.join(_SIZING[kind])}; remove it")
    milli = b.gpu_milli or 0
    if kind == "training":
        per = b.gpus_per_worker or 1
        if b.gpus is None:
            out.add(("gpus",), "required for training jobs", "give the total GPUs of the gang, e.g. gpus: 8")
            return per, 0, 1
        if b.gpus == 0 or b.gpus % per:
            lo, hi = b.gpus // per * per, (b.gpus // per + 1) * per
            eg = f"{lo} or {hi}" if lo else str(hi)
            fix = f"use a multiple of {per}, e.g. {eg}, or change gpusPerWorker"
            out.add(("gpus",), f"{b.gpus} is not a positive multiple of gpusPerWorker ({per})", fix)
        _elastic_sizes(b, per, out)
        return per, 0, max(1, b.gpus // per)
    whole_key, whole = ("gpusPerReplica", b.gpus_per_replica) if kind == "inference" else ("gpus", b.gpus)
    if milli and whole:
        out.add(
            ("gpuMilli",),
            f"a GPU share needs 0 whole GPUs per unit, but {whole_key} is {whole}",
            f"set {whole_key}: 0 or remove gpuMilli",
        )
    gpus = (0 if milli else 1) if whole is None else whole
    if gpus == 0 and not milli:
        out.add(
            (whole_key,), "a unit with no GPU and no gpuMilli asks for nothing", f"set {whole_key} >= 1, or gpuMilli"
        )
    # An inference service without `replicas` starts at its minimum size.
    units = (b.replicas or b.min_replicas if kind == "inference" else b.tasks) or 1
    if b.min_replicas is not None and b.min_replicas > units:
        out.add(("minReplicas",), f"{b.min_replicas} is more than replicas ({units})", f"use at most {units}")
    if b.max_replicas is not None and b.max_replicas < units:
        out.add(("maxReplicas",), f"{b.max_replicas} is less than replicas ({units})", f"use at least {units}")
    return gpus, milli, units


def _elastic_sizes(b: d.JobBodyDoc, per: int, out: _Problems) -> None:
    """``minGpus <= gpus <= maxGpus``, each a multiple of ``gpusPerWorker``; with ``llm``, not with ``llm.dp``
    (an elastic LLM job resizes by its data-parallel degree; the host rounds its bounds to whole ranks)."""
    gpus = b.gpus or 0
    for key, n in (("minGpus", b.min_gpus), ("maxGpus", b.max_gpus)):
        if n is not None and n % per:
            out.add((key,), f"{n} is not a multiple of gpusPerWorker ({per})", f"use a multiple of {per}")
    if b.min_gpus is not None and b.min_gpus > gpus:
        out.add(("minGpus",), f"{b.min_gpus} is more than gpus ({gpus})", f"use at most {gpus}")
    if b.max_gpus is not None and b.max_gpus < gpus:
        out.add(("maxGpus",), f"{b.max_gpus} is less than gpus ({gpus})", f"use at least {gpus}")
    if b.llm is not None and b.llm.dp is not None and (b.min_gpus is not None or b.max_gpus is not None):
        key = "minGpus" if b.min_gpus is not None else "maxGpus"
        out.add(
            (key,),
            "llm.dp fixes the job's size (an elastic LLM job changes its data-parallel degree)",
            f"remove {key} or llm.dp",
        )


def _priority(b: d.JobBodyDoc, classes: Mapping[str, int] | None, out: _Problems) -> int:
    known = {**BUILTIN_PRIORITY_CLASSES, **(classes or {})}
    if b.priority_class_name is None:
        return b.priority or 0
    if b.priority is not None:
        out.add(("priority",), "given together with priorityClassName", "keep one of priority and priorityClassName")
    if b.priority_class_name not in known:
        listing = ", ".join(f"{k} ({v})" for k, v in sorted(known.items(), key=lambda kv: -kv[1]))
        out.add(("priorityClassName",), f"unknown priority class {b.priority_class_name!r}", f"use one of: {listing}")
        return 0
    return known[b.priority_class_name]


# The `llm` fields only one kind of job reads (the rest apply to both).
_LLM_ONLY = {
    "training": ("seqLen", "globalBatch"),
    "inference": ("isl", "osl", "interactivitySlo", "ttftSloSeconds", "mtp"),
}


def _llm(b: d.JobBodyDoc, group: int, fractional: bool, out: _Problems) -> LlmWork | None:
    """Check ``b.llm`` against the job: ``group`` is the GPUs one model copy runs on (the gang for training,
    one replica for inference), which the given parallel degrees must divide (or, all given, equal)."""
    doc = b.llm
    if doc is None:
        return None
    if b.kind == "batch":
        out.add(("llm",), "not used by batch jobs", "give llm to a training or inference job, or remove it")
        return None
    given = {type(doc).model_fields[f].alias or f for f in doc.model_fields_set}
    for other, keys in _LLM_ONLY.items():
        if other != b.kind:
            for key in sorted(given & set(keys)):
                article = "an" if other == "inference" else "a"
                out.add(("llm", key), f"not used by {b.kind} jobs", f"it is {article} {other} setting; remove it")
    if fractional:
        out.add(("llm",), "an LLM replica needs whole GPUs", "set gpusPerReplica >= 1 and remove gpuMilli")
        return None
    moe = doc.model in LLM_MOE_MODELS
    moe_names = ", ".join(sorted(LLM_MOE_MODELS))
    if b.kind == "training" and doc.ep is not None:
        out.add(("llm", "ep"), "training plans have no expert parallelism here", "remove ep (use tp, pp and dp)")
    if b.kind == "inference" and not moe:
        for key in ("ep", "dp"):
            if (getattr(doc, key) or 1) > 1:
                why = "expert parallelism" if key == "ep" else "attention data parallelism"
                out.add(("llm", key), f"{why} needs a mixture-of-experts model", f"remove {key}, or use {moe_names}")
    degrees = {k: v for k in ("tp", "pp", "dp") if (v := getattr(doc, k)) is not None}
    product = math.prod(degrees.values())
    what = "the job's gpus" if b.kind == "training" else "gpusPerReplica"
    shown = " x ".join(degrees)
    if degrees and group % product:
        out.add(("llm", next(iter(degrees))), f"{shown} = {product} does not divide {what} ({group})",
                f"choose degrees whose product divides {group}, or leave some out for rackscale to choose")  # fmt: skip
    elif len(degrees) == 3 and product != group:
        out.add(("llm", "dp"), f"tp x pp x dp = {product}, but {what} is {group}",
                f"make the product {group}, or leave dp out for rackscale to choose")  # fmt: skip
    if b.kind == "inference" and doc.ep is not None and doc.ep > 1:
        stage = (doc.tp or 1) * (doc.dp or 1)
        if "tp" in degrees and "dp" in degrees and doc.ep != stage:
            out.add(("llm", "ep"), f"{doc.ep} is not tp x dp ({stage}): experts spread over the attention GPUs",
                    f"use ep: {stage}, or leave it out")  # fmt: skip
        elif group % doc.ep:
            out.add(("llm", "ep"), f"{doc.ep} does not divide gpusPerReplica ({group})", "use a divisor of it")
    if doc.global_batch is not None and doc.dp is not None and doc.global_batch % doc.dp:
        out.add(("llm", "globalBatch"), f"{doc.global_batch} sequences do not split over dp = {doc.dp}",
                "use a multiple of dp")  # fmt: skip
    return LlmWork(
        model=doc.model, precision=doc.precision, tp=doc.tp, pp=doc.pp, dp=doc.dp, ep=doc.ep, seq_len=doc.seq_len,
        global_batch=doc.global_batch, isl=doc.isl, osl=doc.osl, interactivity_slo=doc.interactivity_slo,
        ttft_slo_s=doc.ttft_slo_seconds, mtp=doc.mtp,
    )  # fmt: skip


def _spread(b: d.JobBodyDoc, units: int, out: _Problems) -> int:
    """``spread.racks``: inference only, and no wider than the replicas the service may ever run (a rack
    each). Racks the cluster lacks are no error here (the cluster is not known): the spread is a wish."""
    if b.spread is None:
        return 2
    if b.kind != "inference":
        out.add(("spread",), f"not used by {b.kind} jobs", "spread applies to inference replicas; remove it")
        return 2
    most = max(units, b.max_replicas or 0)
    if b.spread.racks > most:
        out.add(("spread", "racks"), f"{b.spread.racks} racks, but the service runs at most {most} replica(s)",
                f"use at most {most} (a rack per replica), or raise maxReplicas")  # fmt: skip
    return b.spread.racks


def _autoscale(b: d.JobBodyDoc, out: _Problems) -> AutoscaleSpec | None:
    """``autoscale``: inference only; a query needs its target, and a target means nothing without one."""
    a = b.autoscale
    if a is None:
        return None
    if b.kind != "inference":
        out.add(("autoscale",), f"not used by {b.kind} jobs", "autoscale applies to inference replicas; remove it")
        return None
    if a.query is not None and not a.query.strip():
        out.add(("autoscale", "query"), "is blank", "give a PromQL expression, or remove query to use the model")
    if a.query is not None and a.target is None:
        unit = "per replica" if LoadMetric(a.metric).is_rate else "to keep"
        out.add(("autoscale", "target"), "required with a query", f"give the {a.metric} {unit}, e.g. target: 2000")
    if a.query is None:
        for key in ("target", "metric", "fallback"):
            if key in a.model_fields_set:
                out.add(("autoscale", key), "applies to a query's load only",
                        f"add autoscale.query, or remove {key} (the service's own model drives it)")  # fmt: skip
    return AutoscaleSpec(
        query=a.query, metric=LoadMetric(a.metric), target=a.target, fallback=ScaleFallback(a.fallback)
    )


def _job(name: str, b: d.JobBodyDoc, prefix: Loc, classes: Mapping[str, int] | None) -> JobSpec:
    out = _Problems(prefix, [])
    gpus, milli, units = _unit(b, out)
    spread_racks = _spread(b, units, out)
    priority = _priority(b, classes, out)
    autoscale = _autoscale(b, out)
    llm = _llm(b, gpus * units if b.kind == "training" else gpus, bool(milli), out)
    if b.cpu is not None and b.cpu_milli is not None:
        out.add(
            ("cpuMilli",), "given together with cpu", "keep one: cpu is in cores (0.5), cpuMilli in thousandths (500)"
        )
    out.raise_if_any()
    topo = _DEFAULT_TOPOLOGY[b.kind]
    if b.topology is not None:
        given = b.topology.model_fields_set
        req = b.topology.required if "required" in given else (topo.required and topo.required.value)
        pref = b.topology.preferred if "preferred" in given else (topo.preferred and topo.preferred.value)
        topo = TopologyConstraint(Level(req) if req else None, Level(pref) if pref else None)
    comm = b.comm or d.CommDoc()
    return JobSpec(
        name=name,
        kind=JobKind(b.kind),
        unit=_shared_resources(
            gpus,
            milli,
            b.cpu_milli if b.cpu_milli is not None else round((b.cpu or 0.0) * 1000),
            b.memory or 0,
            frozenset(b.gpu_models) if b.gpu_models is not None else None,
        ),
        units=units,
        min_units=(b.min_replicas or 0) if b.kind != "training" else (b.min_gpus or 0) // max(gpus, 1),
        max_units=(b.max_replicas or 0) if b.kind != "training" else (b.max_gpus or 0) // max(gpus, 1),
        priority=priority,
        preemption_policy=PreemptionPolicy(b.preemption_policy),
        preemptible=b.preemptible,
        queue=b.queue,
        topology=topo,
        comm=_shared_comm(comm.bytes_per_step, comm.compute_seconds_per_step, comm.collective),
        checkpoint_interval_s=b.checkpoint_interval_seconds,
        checkpoint_on_preempt=b.checkpoint_on_preempt,
        duration_estimate_s=b.duration_estimate_seconds,
        submit_time=b.submit_time,
        command=tuple(b.command or ()),
        env=tuple(sorted((b.env or {}).items())),
        llm=llm,
        spread_racks=spread_racks,
        autoscale=autoscale,
    )
