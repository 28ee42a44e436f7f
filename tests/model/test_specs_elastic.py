"""The elastic training fields, ``minGpus`` and ``maxGpus``: parsed into worker counts, or refused naming
the field and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from rackscale.model.specs import SpecError, job_from_dict


def train(**kw: Any) -> dict[str, Any]:
    return {"name": "t", "kind": "training", "gpus": 16, **kw}


@pytest.mark.parametrize(
    ("doc", "units", "lo", "hi", "elastic"),
    [
        pytest.param(train(minGpus=8, maxGpus=32), 16, 8, 32, True, id="min-and-max"),
        pytest.param(train(minGpus=8), 16, 8, 0, True, id="shrink-only"),
        pytest.param(train(maxGpus=32), 16, 0, 32, True, id="grow-only"),
        pytest.param(train(minGpus=16, maxGpus=16), 16, 16, 16, False, id="min-equals-max-is-fixed"),
        pytest.param(train(), 16, 0, 0, False, id="fixed"),
        pytest.param(train(gpusPerWorker=4, minGpus=8, maxGpus=32), 4, 2, 8, True, id="in-workers"),
        # An LLM job is elastic once its model shard is fixed: the host fixes it at admission (tests/host).
        pytest.param(train(minGpus=8, llm={"model": "llama-3.1-8b"}), 16, 8, 0, False, id="llm-shard-not-yet-fixed"),
        pytest.param(
            train(minGpus=8, llm={"model": "llama-3.1-8b", "tp": 2, "pp": 1}), 16, 8, 0, True, id="llm-shard-fixed"
        ),
    ],
)
def test_elastic_sizes_are_worker_counts(doc: dict[str, Any], units: int, lo: int, hi: int, elastic: bool) -> None:
    spec = job_from_dict(doc)
    assert (spec.units, spec.min_units, spec.max_units, spec.is_elastic) == (units, lo, hi, elastic)


@pytest.mark.parametrize(
    ("doc", "field", "words"),
    [
        pytest.param(train(minGpus=20), "minGpus", "more than gpus (16)", id="min-above-gpus"),
        pytest.param(train(maxGpus=8), "maxGpus", "less than gpus (16)", id="max-below-gpus"),
        pytest.param(
            train(gpusPerWorker=4, minGpus=6), "minGpus", "not a multiple of gpusPerWorker", id="min-not-workers"
        ),
        pytest.param(
            train(gpusPerWorker=4, maxGpus=18), "maxGpus", "not a multiple of gpusPerWorker", id="max-not-workers"
        ),
        pytest.param(train(minGpus=0), "minGpus", ">= 1", id="zero"),
        pytest.param(train(minGpus=-4), "minGpus", ">= 1", id="negative"),
        pytest.param(train(maxGpus=10**30), "maxGpus", "", id="huge"),
        pytest.param(train(minGpus="eight"), "minGpus", "whole number", id="not-a-number"),
        pytest.param(train(minGpus=2.5), "minGpus", "", id="fraction"),
        pytest.param(train(maxGpus=[32]), "maxGpus", "", id="a-list"),
        pytest.param(
            {"name": "i", "kind": "inference", "replicas": 2, "minGpus": 1},
            "minGpus",
            "not used by inference",
            id="inference",
        ),
        pytest.param(
            train(minGpus=8, llm={"model": "llama-3.1-8b", "dp": 16}),
            "minGpus",
            "llm.dp fixes the job's size",
            id="llm-job-with-fixed-dp",
        ),
    ],
)
def test_bad_elastic_sizes_name_the_field(doc: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        job_from_dict(doc)
    text = str(err.value)
    assert text.startswith(field) or f" {field}" in text or f".{field}" in text, text
    assert words in text
    assert "\n" not in text.strip() or text.count(field) >= 1
