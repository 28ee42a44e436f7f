"""Fuzz the spec loaders: whatever the input, they return a value or raise SpecError, never anything else,
and a SpecError names where the problem is.

Inputs: random text; random documents built from plausible keys (job and cluster fields, at the top level
and nested under spec/metadata/topology/pools/...) and values of every YAML/JSON scalar type, given as a
dict, as JSON text and as YAML text.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rackscale.loaders import parse_cluster_text, parse_jobs_text
from rackscale.model.spec_errors import SpecError, format_loc
from rackscale.model.specs import cluster_from_dict, job_from_dict

# RACKSCALE_FUZZ_EXAMPLES=5000 for a longer hunt.
FUZZ = settings(
    max_examples=int(os.environ.get("RACKSCALE_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

JOB_KEYS = [
    "name",
    "kind",
    "gpus",
    "replicas",
    "gpusPerWorker",
    "gpusPerReplica",
    "minReplicas",
    "maxReplicas",
    "gpuMilli",
    "tasks",
    "cpu",
    "cpuMilli",
    "memory",
    "gpuModels",
    "priority",
    "priorityClassName",
    "preemptionPolicy",
    "preemptible",
    "queue",
    "topology",
    "comm",
    "checkpointIntervalSeconds",
    "durationEstimateSeconds",
    "submitTime",
    "command",
    "env",
    "required",
    "preferred",
    "bytesPerStep",
    "computeSecondsPerStep",
    "collective",
]
CLUSTER_KEYS = [
    "apiVersion",
    "kind",
    "metadata",
    "spec",
    "gpuType",
    "gpuCount",
    "nvlink",
    "rdma",
    "gpusPerNode",
    "nodesPerRack",
    "pricePerGpuHour",
    "topology",
    "levels",
    "labelKey",
    "regions",
    "racksPerRegion",
    "node",
    "pools",
    "tiers",
    "backbone",
    "bandwidthGbps",
    "latencyUs",
    "spinesPerRegion",
    "uplinksPerRack",
    "pricing",
    "perGpuHour",
    "currency",
    "gpuSpeed",
    "racks",
    "region",
    "memoryGiB",
    "labels",
    "items",
]
KEYS = st.sampled_from(sorted(set(JOB_KEYS + CLUSTER_KEYS))) | st.text(max_size=8)
KINDS = st.sampled_from(["training", "inference", "batch", "Job", "Cluster", "GpuCluster", "List", "job"])
API_VERSIONS = st.sampled_from(["rackscale.io/v1", "nvidia.com/v1", "v1"])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.integers(min_value=-3, max_value=100)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(
        ["rack", "node", "region", "host", "ring", "hierarchical", "Never", "high", "8", "1e3", "0x10", "", "-1"]
    )
)
VALUES = st.recursive(
    SCALARS | KINDS | API_VERSIONS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=6),
    max_leaves=25,
)


@st.composite
def documents(draw: st.DrawFn) -> Any:
    """A plausible spec document: known keys at the top, a kind and apiVersion often, nested mappings."""
    doc: dict[Any, Any] = draw(st.dictionaries(KEYS, VALUES, max_size=8))
    if draw(st.booleans()):
        doc["kind"] = draw(KINDS)
    if draw(st.booleans()):
        doc["apiVersion"] = draw(API_VERSIONS)
    for key in ("metadata", "spec"):
        if draw(st.booleans()):
            doc[key] = draw(st.dictionaries(KEYS, VALUES, max_size=8) | VALUES)
    if draw(st.booleans()):
        doc["name"] = draw(st.text(max_size=10) | SCALARS)
    return doc


ANY_DOC = documents() | VALUES | st.lists(documents(), max_size=3)


def _check_error(err: SpecError) -> None:
    """A SpecError lists at least one problem; each renders to text naming its field path (if any)."""
    assert err.problems, "SpecError without problems"
    text = str(err)
    assert text.strip()
    for p in err.problems:
        assert p.message
        if p.loc:
            assert format_loc(p.loc) in text


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except SpecError as err:
        _check_error(err)
        return err


def _dump_json(doc: Any) -> str | None:
    try:
        return json.dumps(doc, allow_nan=True)
    except (TypeError, ValueError):
        return None


def _dump_yaml(doc: Any) -> str | None:
    try:
        return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)
    except yaml.YAMLError:
        return None


# ------------------------------------------------------------------------------------------ from dicts
@FUZZ
@given(ANY_DOC)
def test_job_from_dict_returns_or_raises_spec_error(doc: Any) -> None:
    got = _call(job_from_dict, doc)
    if isinstance(got, SpecError) and isinstance(doc, dict) and doc:
        # A mapping with keys: every problem is at a field (the whole-document ones name the document).
        assert all(p.loc or "document" in p.message or "expected" in p.message for p in got.problems), str(got)


@FUZZ
@given(ANY_DOC)
def test_cluster_from_dict_returns_or_raises_spec_error(doc: Any) -> None:
    got = _call(cluster_from_dict, doc)
    if isinstance(got, SpecError) and isinstance(doc, dict):
        assert all(p.loc for p in got.problems), str(got)


@FUZZ
@given(documents(), st.sampled_from(["Job", "training", "inference", "batch"]))
def test_kubernetes_job_envelope(doc: dict[Any, Any], kind: str) -> None:
    doc = {"apiVersion": "rackscale.io/v1", "kind": kind, "metadata": {"name": "j"}, "spec": doc}
    _call(job_from_dict, doc)


# ------------------------------------------------------------------------------------------ from text
@FUZZ
@given(st.text(max_size=200))
def test_parse_random_text(text: str) -> None:
    _call(parse_jobs_text, text)
    _call(parse_cluster_text, text)


@FUZZ
@given(ANY_DOC, st.sampled_from(["json", "yaml"]))
def test_parse_dumped_documents(doc: Any, fmt: str) -> None:
    text = _dump_json(doc) if fmt == "json" else _dump_yaml(doc)
    if text is None:
        return
    jobs = _call(parse_jobs_text, text, source="fuzz.txt")
    cluster = _call(parse_cluster_text, text, source="fuzz.txt")
    for got in (jobs, cluster):
        if isinstance(got, SpecError):
            assert got.source == "fuzz.txt"
            assert str(got).startswith("fuzz.txt")


@FUZZ
@given(
    st.lists(
        st.sampled_from(
            [
                "name: a\nkind: training\ngpus: 8\n",
                "---\n",
                "- {name: b, kind: batch, gpus: 1}\n",
                "kind: List\nitems: [",
                "gpus: 1e999\n",
                "gpus: .nan\n",
                "gpus: 2024-13-01\n",
                "priority: !!binary aGVsbG8=\n",
                "topology: {required: rack}\n",
                "&a [*a]\n",
                "name: [1, {x: y}]\n",
                "{",
                "\t",
                "? [a]\n: b\n",
                "!!python/object:os.system x\n",
                "spec: {pools: [{racks: 1e6}]}\n",
                "kind: Cluster\napiVersion: rackscale.io/v1\nmetadata: {name: c}\nspec: {racksPerRegion: 99999999}\n",
            ]
        ),
        max_size=6,
    )
)
def test_parse_spliced_yaml(parts: list[str]) -> None:
    text = "".join(parts)
    _call(parse_jobs_text, text)
    _call(parse_cluster_text, text)


def test_nan_and_huge_numbers_in_json() -> None:
    for value in (math.nan, math.inf, -math.inf, 10**400, -(10**400), 1e308):
        text = json.dumps({"name": "x", "kind": "training", "gpus": value, "priority": value})
        _call(parse_jobs_text, text)
        _call(job_from_dict, json.loads(text))


# ------------------------------------------------------------------------------------------ alias graphs
@st.composite
def alias_graphs(draw: st.DrawFn) -> tuple[str, int, int]:
    """A document of anchors ``a0..aN``, each a list or mapping of scalars and aliases of earlier anchors;
    with the values it expands to beyond its distinct nodes, and its depth, counted here independently."""
    lines: list[str] = []
    sizes: list[int] = []  # values anchor i expands to, itself included
    depths: list[int] = []
    total, distinct = 1, 1  # the root mapping
    for i in range(draw(st.integers(1, 10))):
        refs = draw(st.lists(st.integers(-1, i - 1), min_size=1, max_size=30))  # -1: a plain scalar
        refs *= draw(st.sampled_from([1, 1, 10, 100]))  # wide ones reach the bound in a few levels
        items = ["x" if r < 0 else f"*a{r}" for r in refs]
        as_map = draw(st.booleans())
        size = 1 + sum(1 if r < 0 else sizes[r] for r in refs) + (len(refs) if as_map else 0)
        own = 1 + refs.count(-1) + (len(refs) if as_map else 0)  # new nodes: itself, its scalars, its keys
        body = "{" + ", ".join(f"k{j}: {v}" for j, v in enumerate(items)) + "}" if as_map else f"[{', '.join(items)}]"
        lines.append(f"a{i}: &a{i} {body}")
        sizes.append(size)
        depths.append(1 + max((depths[r] for r in refs if r >= 0), default=0))
        total += 1 + size  # its key and itself
        distinct += 1 + own
    return "\n".join(lines) + "\n", total - distinct, 1 + max(depths)


@FUZZ
@given(alias_graphs())
def test_alias_bound_counts_exactly_the_values_aliases_add(graph: tuple[str, int, int]) -> None:
    from rackscale.loaders import MAX_ALIAS_VALUES, safe_load_bounded

    text, gained, depth = graph
    assert depth <= 64
    try:
        safe_load_bounded(text, "g.yaml")
    except SpecError as err:
        assert gained > MAX_ALIAS_VALUES, str(err)
        assert "expands to more than 1,000,000 values through aliases" in str(err)
    else:
        assert gained <= MAX_ALIAS_VALUES
