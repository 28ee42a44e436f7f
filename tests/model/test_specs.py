"""Spec documents -> GPUCluster / JobSpec, and the SpecError every bad document raises."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rackscale.model.spec_errors import SpecProblem, format_loc
from rackscale.model.specs import TCP_TIER, SpecError, cluster_from_dict, job_from_dict
from rackscale.model.topology import DEFAULT_LEVELS, DEFAULT_RDMA, GPUCluster
from rackscale.model.workload import JobKind, JobSpec, Level, PreemptionPolicy

SEED: dict[str, Any] = {
    "apiVersion": "nvidia.com/v1",
    "kind": "GpuCluster",
    "metadata": {"name": "high-perf-cluster"},
    "spec": {"gpuType": "A100", "gpuCount": 72, "nvlink": "enabled", "rdma": "enabled"},
}
RICH: dict[str, Any] = {"apiVersion": "rackscale.io/v1", "kind": "Cluster", "metadata": {"name": "c"}, "spec": {}}
POOLS = [
    {"name": "gb", "gpuType": "GB200", "region": "east", "racks": 2},
    {"name": "h", "gpuType": "H100", "region": "west", "racks": 3, "nodesPerRack": 1, "gpusPerNode": 8},
]


def with_(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``doc`` with the dotted ``path`` set to ``value`` (``...`` deletes it)."""
    out = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node.setdefault(key, {})
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return out


def problem(err: SpecError, path: str) -> SpecProblem:
    found = [p for p in err.problems if p.path == path]
    assert found, f"no problem at {path!r} in:\n{err}"
    return found[0]


# ------------------------------------------------------------------------------------------ clusters
# (document, total GPUs, racks, nodes, GPU models)
VALID_CLUSTERS = [
    (SEED, 72, 1, 18, ("A100",)),
    (with_(SEED, "spec.gpuCount", 100), 100, 2, 25, ("A100",)),
    (with_(SEED, "spec.nvlink", "disabled"), 72, 18, 18, ("A100",)),
    (with_(SEED, "spec.nvlink", False), 72, 18, 18, ("A100",)),
    (with_(with_(SEED, "spec.gpusPerNode", 8), "spec.nodesPerRack", 9), 72, 1, 9, ("A100",)),
    (RICH, 288, 4, 72, ("GB200",)),
    (with_(RICH, "spec", {"regions": 2, "racksPerRegion": 4, "gpuType": "GB300"}), 576, 8, 144, ("GB300",)),
    (with_(RICH, "spec.pools", POOLS), 168, 5, 39, ("GB200", "H100")),
]


@pytest.mark.parametrize(
    ("doc", "gpus", "racks", "nodes", "models"),
    VALID_CLUSTERS,
    ids=[
        "seed",
        "seed-truncated",
        "seed-no-nvlink",
        "seed-nvlink-false",
        "seed-8-gpn",
        "rich-default",
        "rich-2x4",
        "pools",
    ],
)
def test_valid_cluster_shapes(doc: dict[str, Any], gpus: int, racks: int, nodes: int, models: tuple[str, ...]) -> None:
    c = cluster_from_dict(doc)
    assert (c.total_gpus, len(c.racks), len(c.nodes), c.gpu_models) == (gpus, racks, nodes, models)


def test_seed_defaults_and_options() -> None:
    c = cluster_from_dict(SEED)
    assert c.name == "high-perf-cluster" and c.tiers.rdma == DEFAULT_RDMA and c.levels == DEFAULT_LEVELS
    assert c.racks[0].gpus == 72 and c.nodes[0].gpus == 4
    slow = cluster_from_dict(with_(with_(SEED, "spec.rdma", "disabled"), "spec.pricePerGpuHour", 9.5))
    assert slow.tiers.rdma == TCP_TIER and slow.pricing.per_gpu_hour == 9.5


def test_rich_options_reach_the_model() -> None:
    spec = {
        "topology": {"levels": [{"name": n, "labelKey": f"x/{n}"} for n in ("zone", "clique", "host")]},
        "regions": 1,
        "racksPerRegion": 2,
        "node": {"cpu": 96.5, "memoryGiB": 512},
        "tiers": {"rdma": {"bandwidthGbps": 400}, "backbone": {"latencyUs": 0}},
        "spinesPerRegion": 8,
        "uplinksPerRack": 36,
        "pricing": {"perGpuHour": 0, "currency": "USD"},
    }
    c = cluster_from_dict(with_(RICH, "spec", spec))
    assert [lv.label_key for lv in c.levels] == ["x/zone", "x/clique", "x/host"]
    assert (c.nodes[0].cpu_milli, c.nodes[0].memory_mib) == (96_500, 512 * 1024)
    assert (c.tiers.rdma.bandwidth_gbps, c.tiers.rdma.latency_us) == (400, DEFAULT_RDMA.latency_us)
    assert c.tiers.backbone.latency_us == 0
    assert (c.spines_per_region, c.racks[0].uplinks, c.pricing.currency) == (8, 36, "USD")
    pools = cluster_from_dict(with_(RICH, "spec.pools", POOLS))
    assert [r.name for r in pools.regions] == ["east", "west"]
    assert pools.racks[2].name == "h-r000" and pools.racks[2].gpus == 8


LEVELS_2 = [{"name": "a", "labelKey": "a"}, {"name": "b", "labelKey": "b"}]
LEVELS_DUP = [{"name": n, "labelKey": "same"} for n in ("a", "b", "c")]
# (document, path of the problem, words in the message, words in the fix)
BAD_CLUSTERS = [
    (with_(SEED, "spec.gpuCount", 70), "spec.gpuCount", "whole nodes", "multiple of 4, e.g. 68 or 72"),
    (with_(SEED, "spec.gpuCount", 2), "spec.gpuCount", "whole nodes", "e.g. 4"),
    (with_(SEED, "spec.gpuCount", 0), "spec.gpuCount", ">= 1", "value >= 1"),
    (with_(SEED, "spec.gpuCount", "72"), "spec.gpuCount", "whole number", "gpuCount: 72"),
    (with_(SEED, "spec.gpuCount", True), "spec.gpuCount", "whole number", ""),
    (with_(SEED, "spec.gpuCount", 10**7), "spec.gpuCount", "nodes", "extra digit"),
    (with_(SEED, "spec.gpuType", ...), "spec.gpuType", "missing", "gpuType: A100"),
    (with_(SEED, "spec.gpuCont", 3), "spec.gpuCont", "unknown field", "did you mean 'gpuCount'?"),
    (with_(SEED, "status", {}), "status", "unknown field", "allowed: apiVersion, kind, metadata, spec"),
    (with_(SEED, "spec.nvlink", "maybe"), "spec.nvlink", "enabled or disabled", "`enabled` or `disabled`"),
    (with_(with_(SEED, "spec.nvlink", "disabled"), "spec.nodesPerRack", 18), "spec.nodesPerRack", "conflicts", ""),
    (with_(SEED, "apiVersion", "v1"), "apiVersion", "'nvidia.com/v1'", ""),
    (with_(SEED, "kind", "GPUCluster"), "kind", "unknown kind", "GpuCluster, Cluster"),
    (with_(SEED, "kind", ...), "kind", "missing", "kind: Cluster"),
    (with_(SEED, "kind", ["x"]), "kind", "unknown kind", "GpuCluster"),
    (with_(SEED, "metadata", {}), "metadata.name", "missing", "add name"),
    (with_(SEED, "metadata.name", ""), "metadata.name", "empty", ""),
    (with_(RICH, "spec.tiers.rdma.bandwidthGbps", -100), "spec.tiers.rdma.bandwidthGbps", "> 0", "> 0"),
    (with_(RICH, "spec.tiers.nvlink.latencyUs", float("nan")), "spec.tiers.nvlink.latencyUs", "finite", ""),
    (with_(RICH, "spec.tiers.nvlink.latencyUs", float("inf")), "spec.tiers.nvlink.latencyUs", "finite", ""),
    (with_(RICH, "spec.pricing.perGpuHour", -1), "spec.pricing.perGpuHour", ">= 0", ""),
    (with_(RICH, "spec.node.memory_gib", 1), "spec.node.memory_gib", "unknown", "did you mean 'memoryGiB'?"),
    (with_(RICH, "spec.regions", 1.5), "spec.regions", "whole number", ""),
    (with_(RICH, "spec.topology.levels", LEVELS_2), "spec.topology.levels", "2 entries", "exactly 3 levels"),
    (with_(RICH, "spec.topology.levels", LEVELS_DUP), "spec.topology.levels[1].labelKey", "repeats", ""),
    (with_(RICH, "spec.pools", []), "spec.pools", "0 entries", "at least one pool"),
    (with_(RICH, "spec.pools", [{"name": "a"}]), "spec.pools[0].racks", "missing", "racks: 2"),
    (with_(RICH, "spec.pools", [POOLS[0], POOLS[0]]), "spec.pools[1].name", "repeats pools[0]", ""),
    (with_(with_(RICH, "spec.pools", POOLS), "spec.gpuType", "A"), "spec.gpuType", "combined with `pools`", ""),
    (with_(RICH, "spec.racksPerRegion", 99_999), "spec.racksPerRegion", "nodes in all", ""),
    (with_(RICH, "spec.tiers", "fast"), "spec.tiers", "mapping", ""),
    (with_(RICH, "apiVersion", "nvidia.com/v1"), "apiVersion", "'rackscale.io/v1'", ""),
    ([SEED], "", "expected a cluster document", "kind: Cluster"),
]
BAD_CLUSTER_IDS = [
    "count-not-multiple", "count-below-node", "count-zero", "count-string", "count-bool", "count-huge",
    "gpuType-missing", "typo", "unknown-top-level", "toggle-word", "nvlink-off-with-racks", "apiVersion",
    "kind-case", "kind-missing", "kind-unhashable", "name-missing", "name-empty", "negative-bandwidth",
    "nan-latency", "inf-latency", "negative-price", "snake-case", "regions-float", "levels-count",
    "levels-dup", "pools-empty", "pool-missing", "pool-dup", "pools-and-uniform", "too-many-nodes",
    "tiers-not-mapping", "wrong-apiVersion-for-kind", "not-a-mapping",
]  # fmt: skip


@pytest.mark.parametrize(("doc", "path", "message", "fix"), BAD_CLUSTERS, ids=BAD_CLUSTER_IDS)
def test_bad_cluster_names_path_and_fix(doc: Any, path: str, message: str, fix: str) -> None:
    with pytest.raises(SpecError) as info:
        cluster_from_dict(doc)
    p = problem(info.value, path)
    assert message in p.message and fix in p.fix


def test_all_problems_reported_at_once() -> None:
    doc = with_(with_(SEED, "spec.gpuCount", 70), "spec.nvlink", "disabled")
    doc = with_(doc, "spec.nodesPerRack", 18)
    with pytest.raises(SpecError) as info:
        cluster_from_dict(doc)
    assert {p.path for p in info.value.problems} == {"spec.gpuCount", "spec.nodesPerRack"}


# ------------------------------------------------------------------------------------------ jobs
K8S: dict[str, Any] = {"apiVersion": "rackscale.io/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {}}


def test_flat_training_job() -> None:
    job = job_from_dict({"name": "train-1", "kind": "training", "gpus": 8})
    assert (job.kind, job.units, job.unit.gpus, job.total_gpus) == (JobKind.TRAINING, 8, 1, 8)
    assert (job.topology.required, job.topology.preferred, job.priority) == (None, Level.RACK, 0)


# (document, check on the JobSpec)
VALID_JOBS = [
    ({"name": "t", "kind": "training", "gpus": 72, "gpusPerWorker": 4}, lambda j: (j.units, j.unit.gpus) == (18, 4)),
    (
        with_(K8S, "spec", {"kind": "training", "gpus": 16, "priorityClassName": "high-priority"}),
        lambda j: (j.name, j.priority, j.total_gpus) == ("j", 1_000_000, 16),
    ),
    (
        {"name": "i", "kind": "inference", "replicas": 8, "minReplicas": 2, "maxReplicas": 16},
        lambda j: (j.units, j.min_units, j.max_units, j.topology.required) == (8, 2, 16, Level.RACK),
    ),
    ({"name": "i", "kind": "inference", "minReplicas": 3}, lambda j: (j.units, j.unit.gpus) == (3, 1)),
    (
        {"name": "b", "kind": "batch", "gpuMilli": 500, "tasks": 4},
        lambda j: (j.unit.gpus, j.unit.gpu_milli, j.units, j.topology.preferred) == (0, 500, 4, None),
    ),
    ({"name": "b", "kind": "batch", "gpus": 0, "gpuMilli": 250}, lambda j: j.unit.is_fractional),
    ({"name": "b", "kind": "batch"}, lambda j: (j.unit.gpus, j.units) == (1, 1)),
    ({"name": "m", "kind": "batch", "memory": "2048Gi"}, lambda j: j.unit.memory_mib == 2048 * 1024),
    ({"name": "m", "kind": "batch", "memory": "512Mi"}, lambda j: j.unit.memory_mib == 512),
    ({"name": "m", "kind": "batch", "memory": "1.5Ti"}, lambda j: j.unit.memory_mib == 3 * 512 * 1024),
    ({"name": "m", "kind": "batch", "memory": "1Ki"}, lambda j: j.unit.memory_mib == 1),  # rounded up
    ({"name": "m", "kind": "batch", "memory": 300}, lambda j: j.unit.memory_mib == 300),
    ({"name": "c", "kind": "batch", "cpu": 0.5}, lambda j: j.unit.cpu_milli == 500),
    ({"name": "c", "kind": "batch", "cpu": 2}, lambda j: j.unit.cpu_milli == 2000),
    ({"name": "c", "kind": "batch", "cpuMilli": 250}, lambda j: j.unit.cpu_milli == 250),
    ({"name": "g", "kind": "batch", "gpuModels": ["H100", "A100"]}, lambda j: j.unit.gpu_models == {"H100", "A100"}),
    (
        {"name": "p", "kind": "batch", "preemptionPolicy": "Never", "preemptible": False, "queue": "q"},
        lambda j: (j.preemption_policy, j.preemptible, j.queue) == (PreemptionPolicy.NEVER, False, "q"),
    ),
    (
        {"name": "t", "kind": "training", "gpus": 8, "topology": {"required": "region"}},
        lambda j: (j.topology.required, j.topology.preferred) == (Level.REGION, Level.RACK),
    ),
    (
        {"name": "t", "kind": "inference", "topology": {"required": None}},
        lambda j: (j.topology.required, j.topology.preferred) == (None, Level.RACK),
    ),
    (
        {"name": "t", "kind": "training", "gpus": 8, "comm": {"bytesPerStep": 2e10, "collective": "hierarchical"}},
        lambda j: (j.comm.bytes_per_step, j.comm.compute_s_per_step, j.comm.collective) == (2e10, 1.0, "hierarchical"),
    ),
    (
        {"name": "t", "kind": "training", "gpus": 8, "checkpointIntervalSeconds": 600, "durationEstimateSeconds": 3600,
         "submitTime": 12.5},
        lambda j: (j.checkpoint_interval_s, j.duration_estimate_s, j.submit_time) == (600, 3600, 12.5),
    ),
    (
        {"name": "t", "kind": "training", "gpus": 8, "checkpointOnPreempt": True},
        lambda j: j.checkpoint_on_preempt is True,
    ),
    (
        {"name": "t", "kind": "training", "gpus": 8},
        lambda j: j.checkpoint_on_preempt is False,
    ),
]  # fmt: skip
VALID_JOB_IDS = [
    "workers", "k8s-priority-class", "inference-autoscale", "inference-replicas-from-min", "batch-fraction",
    "batch-fraction-explicit-zero", "batch-defaults", "memory-Gi", "memory-Mi", "memory-Ti", "memory-Ki",
    "memory-int", "cpu-float", "cpu-int", "cpuMilli", "gpuModels", "preemption", "topology-merge",
    "topology-null", "comm", "times", "checkpoint-on-preempt", "checkpoint-on-preempt-default",
]  # fmt: skip


@pytest.mark.parametrize(("doc", "check"), VALID_JOBS, ids=VALID_JOB_IDS)
def test_valid_jobs(doc: dict[str, Any], check: Any) -> None:
    assert check(job_from_dict(doc))


def test_custom_priority_classes_extend_the_builtins() -> None:
    doc = {"name": "x", "kind": "batch", "priorityClassName": "gold"}
    assert job_from_dict(doc, priority_classes={"gold": 500}).priority == 500
    doc["priorityClassName"] = "high-priority"
    assert job_from_dict(doc, priority_classes={"gold": 500}).priority == 1_000_000


def flat(**kw: Any) -> dict[str, Any]:
    """A flat training job with ``kw`` changed (``key=...`` removes the key)."""
    return {k: v for k, v in {"name": "x", "kind": "training", "gpus": 8, **kw}.items() if v is not ...}


BAD_JOBS = [
    (flat(gpus=12, gpusPerWorker=8), "gpus", "multiple of gpusPerWorker (8)", "e.g. 8 or 16"),
    (flat(gpus=0), "gpus", "positive multiple", ""),
    ({"name": "x", "kind": "training"}, "gpus", "required for training", "gpus: 8"),
    (flat(replicas=3), "replicas", "not used by training", "gpus, gpusPerWorker"),
    (flat(kind="inference"), "gpus", "not used by inference", "gpusPerReplica"),
    (flat(kind="batch", gpuMilli=500), "gpuMilli", "0 whole GPUs", "gpus: 0"),
    (flat(kind="batch", gpus=0), "gpus", "asks for nothing", ""),
    (flat(kind="batch", gpus=..., gpuMilli=1000), "gpuMilli", "<= 999", ""),
    ({"name": "x", "kind": "inference", "gpusPerReplica": 1, "gpuMilli": 5}, "gpuMilli", "0 whole", ""),
    ({"name": "x", "kind": "inference", "replicas": 2, "minReplicas": 3}, "minReplicas", "more than replicas", ""),
    ({"name": "x", "kind": "inference", "replicas": 4, "maxReplicas": 3}, "maxReplicas", "less than", "at least 4"),
    (flat(priorityClassName="urgent"), "priorityClassName", "unknown priority class", "high-priority (1000000)"),
    (flat(priorityClassName="default", priority=5), "priority", "together", ""),
    (flat(cpu=1, cpuMilli=1000), "cpuMilli", "together with cpu", ""),
    (flat(memory="16GB"), "memory", "size like 512Mi", "64Gi"),
    (flat(memory=-1), "memory", "between 0", ""),
    (flat(memory=True), "memory", "size like", ""),
    (flat(memory="9" * 30 + "Ti"), "memory", "between 0", ""),
    (flat(gpuModels=[]), "gpuModels", "0 entries", "remove gpuModels"),
    (flat(gpuModels="H100"), "gpuModels", "a list", ""),
    (flat(kind="Training"), "kind", "'training', 'inference' or 'batch'", ""),
    (flat(topology={"required": "node"}), "topology.required", "'rack' or 'region'", ""),
    (flat(comm={"computeSecondsPerStep": 0}), "comm.computeSecondsPerStep", "> 0", ""),
    (flat(preemptible="yes"), "preemptible", "true or false", ""),
    (flat(checkpointOnPreempt="true"), "checkpointOnPreempt", "true or false", ""),
    (flat(submitTime=-1), "submitTime", ">= 0", ""),
    (flat(name=None), "name", "a string", "name: train-1"),
    (flat(gpu=8), "gpu", "unknown field", "did you mean 'gpus'?"),
    (with_(K8S, "spec", {"kind": "training", "gpus": 12, "gpusPerWorker": 8}), "spec.gpus", "multiple", ""),
    (with_(K8S, "spec", {"kind": "training", "gpus": 8, "name": "x"}), "spec.name", "unknown field", ""),
    (with_(K8S, "apiVersion", "v1"), "apiVersion", "'rackscale.io/v1'", ""),
    (with_(K8S, "metadata", ...), "metadata", "missing", ""),
    ("train", "", "expected a job document", "kind: training"),
    # a text over its length: one problem with its length and a fix, not pydantic's bare sentence
    (
        flat(priorityClassName="x" * 300),
        "priorityClassName",
        "is 300 characters long, needs at most 253",
        "shorten it to at most 253 characters",
    ),
    (flat(name="x" * 300), "name", "is 300 characters long, needs at most 253", "shorten it"),
    (flat(queue="q" * 254), "queue", "is 254 characters long, needs at most 253", "shorten it"),
]
BAD_JOB_IDS = [
    "gpus-not-multiple", "gpus-zero", "gpus-missing", "replicas-on-training", "gpus-on-inference",
    "milli-with-whole", "no-gpu", "milli-too-big", "milli-with-replica-gpus", "min-over-replicas",
    "max-under-replicas", "unknown-class", "priority-and-class", "cpu-and-cpuMilli", "memory-unit",
    "memory-negative", "memory-bool", "memory-huge", "gpuModels-empty", "gpuModels-string", "kind-case",
    "topology-level", "compute-zero", "bool-string", "checkpoint-on-preempt-string",
    "submit-negative", "name-null", "typo", "k8s-multiple",
    "k8s-name-in-spec", "k8s-apiVersion", "k8s-metadata-missing", "not-a-mapping",
    "priorityClassName-too-long", "name-too-long", "queue-too-long",
]  # fmt: skip


@pytest.mark.parametrize(("doc", "path", "message", "fix"), BAD_JOBS, ids=BAD_JOB_IDS)
def test_bad_job_names_path_and_fix(doc: Any, path: str, message: str, fix: str) -> None:
    with pytest.raises(SpecError) as info:
        job_from_dict(doc)
    p = problem(info.value, path)
    assert message in p.message and fix in p.fix


# ------------------------------------------------------------------------------------------ SpecError
def test_spec_error_format_and_pickle() -> None:
    err = SpecError(
        [
            SpecProblem(("spec", "pools", 1, "name"), "bad", "fix it"),
            SpecProblem(("kind",), "odd"),
            SpecProblem((), "x"),
        ]
    )
    assert str(err).splitlines() == ["spec.pools[1].name: bad (fix: fix it)", "kind: odd", "x"]
    assert isinstance(err, ValueError)
    located = SpecError([SpecProblem(("a",), "m", "f", line=3), SpecProblem(("b",), "m")], "f.yaml")
    assert str(located).splitlines() == ["f.yaml:3: a: m (fix: f)", "f.yaml: b: m"]
    again = pickle.loads(pickle.dumps(located))
    assert again.problems == located.problems and str(again) == str(located)


@pytest.mark.parametrize(
    ("loc", "text"),
    [((), ""), (("a",), "a"), (("a", "b"), "a.b"), (("a", 0, "b"), "a[0].b"), ((2, "x"), "[2].x")],
    ids=["root", "key", "nested", "index", "leading-index"],
)
def test_format_loc(loc: tuple[str | int, ...], text: str) -> None:
    assert format_loc(loc) == text


# ------------------------------------------------------------------------------------------ properties
KEYS = [
    "apiVersion", "kind", "metadata", "name", "spec", "gpuType", "gpuCount", "nvlink", "rdma", "gpusPerNode",
    "nodesPerRack", "regions", "racksPerRegion", "pools", "racks", "region", "node", "cpu", "memoryGiB", "tiers",
    "bandwidthGbps", "gpus", "replicas", "tasks", "gpuMilli", "memory", "topology", "levels", "priority",
]  # fmt: skip
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 200), st.integers(), st.floats(),
    st.text(max_size=8), st.sampled_from(["GpuCluster", "Cluster", "Job", "training", "batch", "enabled", "1Gi"]),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), inner, max_size=6)
    ),
    max_leaves=25,
)
# Values that often make a valid document, so that the building code runs too, not just validation.
plausible = st.one_of(st.integers(0, 100), st.floats(0, 100), st.booleans(), st.sampled_from(["disabled", "rack", "x"]))
seeds = st.sampled_from([SEED, RICH, with_(RICH, "spec.pools", POOLS), with_(K8S, "spec", flat(name=...)), flat()])


@st.composite
def mutated(draw: st.DrawFn) -> Any:
    """A valid document with one random value replaced, added or removed somewhere inside it."""
    doc = copy.deepcopy(draw(seeds))
    node: Any = doc
    while isinstance(node, dict) and node and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(node)))
        if not isinstance(node[key], dict):
            break
        node = node[key]
    key = draw(st.sampled_from(sorted(node) or KEYS) | st.sampled_from(KEYS))
    action = draw(st.sampled_from(["delete", "plausible", "plausible", "random"]))
    if action == "delete" and key in node:
        del node[key]
    else:
        node[key] = draw(plausible if action == "plausible" else values)
    return doc


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(values, mutated()))
def test_any_document_gives_a_value_or_a_spec_error(doc: Any) -> None:
    for parse, kind in ((cluster_from_dict, GPUCluster), (job_from_dict, JobSpec)):
        try:
            assert isinstance(parse(doc), kind)
        except SpecError as err:
            assert err.problems and all(p.message for p in err.problems)
            assert "pydantic" not in str(err) and "Traceback" not in str(err)


# Equal resources and equal communication profiles are one shared frozen object (fewer objects per queued
# job for the garbage collector); different values never are, and the sharing is bounded.
def test_jobs_that_ask_alike_share_their_resources_and_comm_profile() -> None:
    a = job_from_dict({"name": "a", "kind": "training", "gpus": 8, "cpu": 2})
    b = job_from_dict({"name": "b", "kind": "training", "gpus": 8, "cpu": 2})
    assert a.unit is b.unit and a.comm is b.comm
    other = job_from_dict({"name": "c", "kind": "training", "gpus": 8, "cpu": 3})
    assert other.unit is not a.unit and other.unit.cpu_milli == 3000 and a.unit.cpu_milli == 2000


@pytest.mark.parametrize(
    ("comm", "want"),
    [
        pytest.param({"bytesPerStep": 1e9}, (1e9, 1.0, "ring"), id="bytes"),
        pytest.param({"bytesPerStep": 1e9, "collective": "hierarchical"}, (1e9, 1.0, "hierarchical"), id="collective"),
        pytest.param({"computeSecondsPerStep": 0.25}, (0.0, 0.25, "ring"), id="compute"),
    ],
)
def test_a_shared_comm_profile_keeps_each_jobs_own_values(comm: dict[str, Any], want: tuple[Any, ...]) -> None:
    base = job_from_dict({"name": "base", "kind": "training", "gpus": 8})
    job = job_from_dict({"name": "j", "kind": "training", "gpus": 8, "comm": comm})
    got = (job.comm.bytes_per_step, job.comm.compute_s_per_step, job.comm.collective)
    assert got == want and job.comm is not base.comm


def test_a_flood_of_distinct_values_leaves_the_sharing_bounded() -> None:
    from rackscale.model import specs

    for i in range(3_000):  # a hostile client's distinct memory sizes: each its own Resources
        job = job_from_dict({"name": f"m{i}", "kind": "training", "gpus": 1, "memory": 1 + i})
        assert job.unit.memory_mib == 1 + i
    info = specs._shared_resources.cache_info()
    assert info.maxsize is not None and info.currsize <= info.maxsize < 3_000
