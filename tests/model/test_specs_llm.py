"""The ``llm:`` block of a job spec: what parses, and the one-line SpecError every bad value raises.

The model layer may not import ``rackscale.llm`` (it sits above), so it keeps the built-in model and
precision names itself; the first tests keep those lists equal to the catalogue's.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from rackscale.llm.models import BUILTIN_MODELS
from rackscale.llm.precision import Precision
from rackscale.model.specs import SpecError, job_from_dict
from rackscale.model.workload import LLM_MODELS, LLM_MOE_MODELS, LLM_PRECISIONS, JobKind, LlmWork

TRAIN: dict[str, Any] = {"name": "t", "kind": "training", "gpus": 16, "llm": {"model": "llama-3.1-8b"}}
SERVE: dict[str, Any] = {"name": "s", "kind": "inference", "gpusPerReplica": 8, "llm": {"model": "deepseek-r1"}}
K8S: dict[str, Any] = {
    "apiVersion": "rackscale.io/v1",
    "kind": "Job",
    "metadata": {"name": "k"},
    "spec": {"kind": "inference", "gpusPerReplica": 8, "llm": {"model": "llama-3.1-70b"}},
}


def llm(doc: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A copy of ``doc`` with ``fields`` set in its ``llm`` block."""
    out = copy.deepcopy(doc)
    body = out.get("spec", out)
    body["llm"].update(fields)
    return out


def test_the_model_layers_names_are_the_catalogues() -> None:
    assert set(LLM_MODELS) == set(BUILTIN_MODELS)
    assert set(LLM_PRECISIONS) == {p.value for p in Precision}
    assert frozenset(LLM_MOE_MODELS) == {name for name, m in BUILTIN_MODELS.items() if m.is_moe}


@pytest.mark.parametrize(
    ("doc", "want"),
    [
        pytest.param(TRAIN, LlmWork(model="llama-3.1-8b"), id="defaults"),
        pytest.param(
            llm(TRAIN, model="Llama-3.1-8B", precision="FP8", tp=2, pp=2, dp=4, seqLen=8192, globalBatch=512),
            LlmWork(model="llama-3.1-8b", precision="fp8", tp=2, pp=2, dp=4, seq_len=8192, global_batch=512),
            id="training-plan-case-insensitive",
        ),
        pytest.param(
            llm(
                SERVE,
                precision="fp4",
                tp=1,
                dp=8,
                ep=8,
                isl=1024,
                osl=2048,
                interactivitySlo=50,
                ttftSloSeconds=2.0,
                mtp=True,
            ),
            LlmWork(
                model="deepseek-r1",
                precision="fp4",
                tp=1,
                dp=8,
                ep=8,
                isl=1024,
                osl=2048,
                interactivity_slo=50.0,
                ttft_slo_s=2.0,
                mtp=True,
            ),
            id="serving-wide-ep",
        ),
        pytest.param(llm(K8S, tp=8), LlmWork(model="llama-3.1-70b", tp=8), id="kubernetes-form"),
    ],
)
def test_an_llm_block_parses(doc: dict[str, Any], want: LlmWork) -> None:
    spec = job_from_dict(doc)
    assert spec.llm == want
    assert spec.kind in (JobKind.TRAINING, JobKind.INFERENCE)


def test_a_job_without_llm_has_none() -> None:
    assert job_from_dict({"name": "plain", "kind": "training", "gpus": 8}).llm is None


HOSTILE = [
    # (document, path of the one problem, a word of its message)
    pytest.param(llm(TRAIN, model="llama-3.1-9b"), "llm.model", "unknown built-in model", id="unknown-model"),
    pytest.param(llm(TRAIN, model=7), "llm.model", "string", id="model-not-text"),
    pytest.param(llm(TRAIN, model=["llama-3.1-8b"]), "llm.model", "string", id="model-a-list"),
    pytest.param(llm(TRAIN, precision="fp16"), "llm.precision", "unknown precision", id="unknown-precision"),
    pytest.param(llm(TRAIN, tp=-2), "llm.tp", ">= 1", id="negative-tp"),
    pytest.param(llm(TRAIN, tp=0), "llm.tp", ">= 1", id="zero-tp"),
    pytest.param(llm(TRAIN, pp=10**12), "llm.pp", "<=", id="huge-pp"),
    pytest.param(llm(TRAIN, dp="4"), "llm.dp", "whole number", id="dp-a-string"),
    pytest.param(llm(TRAIN, tp=True), "llm.tp", "whole number", id="tp-a-bool"),
    pytest.param(llm(TRAIN, tp=2.5), "llm.tp", "whole number", id="tp-a-fraction"),
    pytest.param(llm(TRAIN, seqLen=10**9), "llm.seqLen", "<=", id="huge-seq-len"),
    pytest.param(llm(TRAIN, globalBatch=-1), "llm.globalBatch", ">= 1", id="negative-batch"),
    pytest.param(llm(SERVE, interactivitySlo=float("nan")), "llm.interactivitySlo", "finite", id="nan-slo"),
    pytest.param(llm(SERVE, ttftSloSeconds=float("inf")), "llm.ttftSloSeconds", "finite", id="inf-ttft"),
    pytest.param(llm(SERVE, ttftSloSeconds=0), "llm.ttftSloSeconds", "> 0", id="zero-ttft"),
    pytest.param(llm(SERVE, mtp="yes"), "llm.mtp", "true or false", id="mtp-a-string"),
    pytest.param(llm(SERVE, osl=0), "llm.osl", ">= 1", id="zero-output"),
    pytest.param(llm(TRAIN, layers=80), "llm.layers", "unknown field", id="unknown-field"),
    pytest.param({**TRAIN, "llm": "llama-3.1-8b"}, "llm", "mapping", id="llm-a-string"),
    pytest.param({**TRAIN, "llm": {"model": {"a": {"b": [1]}}}}, "llm.model", "string", id="nested-junk"),
    pytest.param({**TRAIN, "llm": {}}, "llm.model", "missing", id="no-model"),
    # rules across fields
    pytest.param({"name": "b", "kind": "batch", "llm": {"model": "llama-3.1-8b"}}, "llm", "batch", id="on-batch"),
    pytest.param(llm(TRAIN, ep=4), "llm.ep", "expert parallelism", id="ep-on-training"),
    pytest.param(llm(TRAIN, isl=512), "llm.isl", "not used by training", id="serving-field-on-training"),
    pytest.param(llm(SERVE, seqLen=2048), "llm.seqLen", "not used by inference", id="training-field-on-serving"),
    pytest.param(llm(TRAIN, tp=3), "llm.tp", "does not divide", id="tp-does-not-divide"),
    pytest.param(llm(TRAIN, tp=2, pp=2, dp=2), "llm.dp", "tp x pp x dp = 8", id="degrees-do-not-multiply"),
    pytest.param(llm(TRAIN, dp=4, globalBatch=6), "llm.globalBatch", "dp = 4", id="batch-does-not-split"),
    pytest.param(llm(K8S, ep=8), "spec.llm.ep", "mixture-of-experts", id="ep-on-a-dense-model"),
    pytest.param(llm(K8S, dp=2), "spec.llm.dp", "mixture-of-experts", id="attention-dp-on-a-dense-model"),
    pytest.param(llm(SERVE, tp=2, dp=2, ep=8), "llm.ep", "tp x dp", id="ep-not-the-attention-gpus"),
    pytest.param(llm(SERVE, ep=3), "llm.ep", "does not divide", id="ep-does-not-divide"),
    pytest.param(
        {"name": "s", "kind": "inference", "gpuMilli": 500, "llm": {"model": "llama-3.1-8b"}},
        "llm",
        "whole GPUs",
        id="shared-gpu-replica",
    ),
]


@pytest.mark.parametrize(("doc", "path", "word"), HOSTILE)
def test_a_bad_llm_block_is_one_problem_naming_its_field(doc: dict[str, Any], path: str, word: str) -> None:
    with pytest.raises(SpecError) as err:
        job_from_dict(doc)
    problems = err.value.problems
    assert [p.path for p in problems] == [path], str(err.value)
    assert word in problems[0].message + problems[0].fix
    assert "\n" not in str(err.value)  # one line


def test_a_typo_in_the_model_suggests_the_name_and_lists_the_choices() -> None:
    with pytest.raises(SpecError) as err:
        job_from_dict(llm(TRAIN, model="lama-3.1-70b"))
    fix = err.value.problems[0].fix
    assert "did you mean 'llama-3.1-70b'" in fix
    assert all(name in fix for name in LLM_MODELS)
