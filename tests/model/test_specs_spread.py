"""``spread: {racks: N}`` on inference jobs: how many racks the replicas spread over (docs/specs.md)."""

from __future__ import annotations

from typing import Any

import pytest

from rackscale.loaders import parse_jobs_text
from rackscale.model.spec_docs import FlatJobDoc
from rackscale.model.specs import SpecError, job_from_dict
from rackscale.model.workload import inference


def svc(**kw: Any) -> dict[str, Any]:
    """A flat 8-replica service with ``kw`` added (``key=...`` removes the key)."""
    return {k: v for k, v in {"name": "s", "kind": "inference", "replicas": 8, **kw}.items() if v is not ...}


VALID = [
    pytest.param(svc(), 2, id="default-survives-one-rack"),
    pytest.param(svc(spread={}), 2, id="empty-mapping-default"),
    pytest.param(svc(spread={"racks": 1}), 1, id="one-rack-nodes-only"),
    pytest.param(svc(spread={"racks": 3}), 3, id="three"),
    pytest.param(svc(spread={"racks": 8}), 8, id="a-rack-per-replica"),
    pytest.param(svc(replicas=2, maxReplicas=16, spread={"racks": 16}), 16, id="bounded-by-maxReplicas"),
    pytest.param(svc(replicas=..., minReplicas=3, spread={"racks": 3}), 3, id="replicas-from-minReplicas"),
    pytest.param(svc(gpusPerReplica=0, gpuMilli=500, spread={"racks": 2}), 2, id="fractional-replicas"),
]


@pytest.mark.parametrize(("doc", "racks"), VALID)
def test_spread_racks_reaches_the_job(doc: dict[str, Any], racks: int) -> None:
    assert job_from_dict(doc).spread_racks == racks


def test_the_kubernetes_form_and_the_builder_agree() -> None:
    doc = {
        "apiVersion": "rackscale.io/v1",
        "kind": "Job",
        "metadata": {"name": "s"},
        "spec": {"kind": "inference", "replicas": 4, "spread": {"racks": 3}},
    }
    assert job_from_dict(doc) == inference("s", 4, spread_racks=3)
    assert job_from_dict(svc()) == inference("s", 8)  # the builder's default is the spec's


# (document, field path, words of the message, words of the fix)
BAD = [
    pytest.param(svc(spread={"racks": -1}), "spread.racks", ">= 1, got -1", ">= 1", id="negative"),
    pytest.param(svc(spread={"racks": 0}), "spread.racks", ">= 1, got 0", "", id="zero"),
    pytest.param(svc(spread={"racks": 2.5}), "spread.racks", "whole number, got 2.5", "racks: 2", id="fraction"),
    pytest.param(svc(spread={"racks": 2.0}), "spread.racks", "whole number", "", id="float-integral"),
    pytest.param(svc(spread={"racks": "2"}), "spread.racks", "whole number, got '2'", "", id="string"),
    pytest.param(svc(spread={"racks": True}), "spread.racks", "whole number", "", id="bool"),
    pytest.param(svc(spread={"racks": None}), "spread.racks", "whole number", "", id="null"),
    pytest.param(svc(spread={"racks": 10**30}), "spread.racks", "<= 1048576", "", id="huge"),
    pytest.param(svc(spread={"racks": float("nan")}), "spread.racks", "whole number, got nan", "", id="nan"),
    pytest.param(svc(spread={"racks": 9}), "spread.racks", "at most 8 replica(s)", "at most 8", id="over-replicas"),
    pytest.param(
        svc(replicas=2, maxReplicas=4, spread={"racks": 5}), "spread.racks", "at most 4", "raise maxReplicas",
        id="over-maxReplicas",
    ),
    pytest.param(svc(spread=2), "spread", "a mapping", "spread: {racks: 2}", id="not-a-mapping"),
    pytest.param(svc(spread={"rack": 2}), "spread.rack", "unknown field", "allowed: racks", id="typo"),
    pytest.param(svc(spread={"racks": 2, "nodes": 3}), "spread.nodes", "unknown field", "", id="unknown-key"),
    pytest.param(
        {"name": "t", "kind": "training", "gpus": 8, "spread": {"racks": 2}}, "spread", "not used by training",
        "remove it", id="on-training",
    ),
    pytest.param(
        {"name": "b", "kind": "batch", "spread": {"racks": 1}}, "spread", "not used by batch", "", id="on-batch"
    ),
    pytest.param(svc(spread={"racks": "\x00"}), "spread.racks", "NUL byte", "remove it", id="nul"),
]  # fmt: skip


@pytest.mark.parametrize(("doc", "path", "message", "fix"), BAD)
def test_a_bad_spread_names_the_field(doc: dict[str, Any], path: str, message: str, fix: str) -> None:
    with pytest.raises(SpecError) as info:
        job_from_dict(doc)
    found = [p for p in info.value.problems if p.path == path]
    assert found, f"no problem at {path!r} in:\n{info.value}"
    assert message in found[0].message and fix in found[0].fix, found[0]


def test_a_file_names_the_line_of_a_bad_spread() -> None:
    text = "name: s\nkind: inference\nreplicas: 4\nspread:\n  racks: -2\n"
    with pytest.raises(SpecError) as info:
        parse_jobs_text(text, source="svc.yaml")
    assert str(info.value).startswith("svc.yaml:5: spread.racks: must be >= 1")


def test_the_builder_refuses_no_rack() -> None:
    with pytest.raises(ValueError, match="spread_racks"):
        inference("s", 2, spread_racks=0)


def test_the_api_schema_lists_the_field() -> None:
    """The service's job schema is generated from the document model: the field is in it, with its bounds."""
    schema = FlatJobDoc.model_json_schema(by_alias=True)
    spread = schema["$defs"]["SpreadDoc"]["properties"]["racks"]
    assert "spread" in schema["properties"]
    assert (spread["minimum"], spread["default"]) == (1, 2)
