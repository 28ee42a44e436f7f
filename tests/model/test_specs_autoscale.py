"""``autoscale:`` on an inference job (docs/specs.md, Autoscaling): the live load signal, parsed and refused
with the field named."""

from __future__ import annotations

from typing import Any

import pytest

from rackscale.model.spec_errors import SpecError
from rackscale.model.specs import job_from_dict
from rackscale.model.workload import AutoscaleSpec, LoadMetric, ScaleFallback

QUERY = "sum(rate(vllm:generation_tokens_total[1m]))"


def svc(**autoscale: Any) -> dict[str, Any]:
    return {"name": "chat", "kind": "inference", "replicas": 2, "maxReplicas": 8, "autoscale": autoscale}


@pytest.mark.parametrize(
    ("doc", "want"),
    [
        (svc(query=QUERY, target=2000), AutoscaleSpec(query=QUERY, target=2000.0)),
        (
            svc(query="histogram_quantile(0.99, sum by (le) (rate(x_bucket[1m])))", target=0.5,
                metric="latency_seconds", fallback="model"),
            AutoscaleSpec(query="histogram_quantile(0.99, sum by (le) (rate(x_bucket[1m])))", target=0.5,
                          metric=LoadMetric.LATENCY_SECONDS, fallback=ScaleFallback.MODEL),
        ),
        (svc(), AutoscaleSpec()),  # an empty block: the service's own model drives it
    ],
    ids=["tokens", "latency-model-fallback", "model"],
)  # fmt: skip
def test_autoscale_parses(doc: dict[str, Any], want: AutoscaleSpec) -> None:
    assert job_from_dict(doc).autoscale == want


@pytest.mark.parametrize(
    ("doc", "path", "words"),
    [
        ({"name": "t", "kind": "training", "gpus": 8, "autoscale": {}}, "autoscale", "not used by training"),
        (svc(query=QUERY), "autoscale.target", "required with a query"),
        (svc(target=2000), "autoscale.target", "applies to a query's load only"),
        (svc(query=QUERY, target=0), "autoscale.target", "must be > 0"),
        (svc(query=QUERY, target=float("nan")), "autoscale.target", "finite"),
        (svc(query=QUERY, target="2000"), "autoscale.target", "must be a number"),
        (svc(query=QUERY, target=1, metric="gpu_util"), "autoscale.metric", "must be one of"),
        (svc(query=QUERY, target=1, fallback="panic"), "autoscale.fallback", "must be one of"),
        (svc(query="   ", target=1), "autoscale.query", "is blank"),
        (svc(query="up\x1b[2J", target=1), "autoscale.query", "control character"),
        (svc(query="x" * 5000, target=1), "autoscale.query", "is 5000 characters long, needs at most 4096"),
        (svc(query=QUERY, target=1, url="http://evil"), "autoscale.url", "unknown field"),
        ({**svc(), "autoscale": "yes"}, "autoscale", "must be a mapping"),
    ],
    ids=["training", "no-target", "target-without-query", "zero-target", "nan-target", "string-target",
         "bad-metric", "bad-fallback", "blank-query", "escape-in-query", "huge-query", "unknown-key", "not-a-map"],
)  # fmt: skip
def test_hostile_autoscale_names_the_field(doc: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        job_from_dict(doc)
    assert [p.path for p in err.value.problems] == [path]
    assert words in str(err.value)
