"""``rackscale perf serve|train`` end to end through typer's runner: the JSON the issue asks for, figures that
are the performance model's own (the CLI adds nothing of its own to them), ratios that are a/b, targets
above the curve as null, a config.json read from disk, and every bad value as one ``error:`` line, exit 2."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from rackscale.cli.app import app
from rackscale.llm.calibration import serving_efficiency, training_efficiency
from rackscale.llm.decode import DEEPSEEK_MTP, NO_MTP
from rackscale.llm.hardware import system_named
from rackscale.llm.models import model_named
from rackscale.llm.precision import Precision
from rackscale.llm.serving import ServeWorkload, ServingMode, links_of, serve_curve
from rackscale.llm.train_plans import HBM_USABLE, train_memory_bytes
from rackscale.llm.training import TrainPlan, TrainWorkload, train_step

runner = CliRunner()
EXPONENT = re.compile(r"\d[eE][+-]?\d")
UNREACHABLE = 1e7  # tok/s/user: no plan decodes a token in 100 ns

# the public config.json fields of meta-llama/Llama-3.1-8B and deepseek-ai/DeepSeek-V3 (a few of each)
LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "tie_word_embeddings": False,
}  # fmt: skip
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "first_k_dense_replace": 3, "hidden_size": 7168,
    "intermediate_size": 18432, "kv_lora_rank": 512, "moe_intermediate_size": 2048, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
    "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280, "tie_word_embeddings": False,
}  # fmt: skip


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "250"})
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.stdout, result.stderr


def doc_of(*args: str) -> dict[str, Any]:
    code, out, err = invoke(*args, "--json")
    assert code == 0, out + err
    parsed: dict[str, Any] = json.loads(out)
    return parsed


# ------------------------------------------------------------------------------------------ perf serve
SERVE_CASES = [
    pytest.param(("deepseek-r1", "gb200", "fp4", ("--mtp",)), Precision.FP4, DEEPSEEK_MTP, id="dsr1-gb200-fp4-mtp"),
    pytest.param(("llama-3.1-70b", "h100", "fp8", ()), Precision.FP8, NO_MTP, id="llama70b-h100-fp8"),
    pytest.param(
        ("mixtral-8x7b", "a100", "bf16", ("--mode", "aggregated")), Precision.BF16, NO_MTP, id="mixtral-a100-agg"
    ),
]


@pytest.mark.parametrize(("case", "precision", "mtp"), SERVE_CASES)
def test_serve_reports_the_models_best_point_per_target(case: tuple[Any, ...], precision: Precision, mtp: Any) -> None:
    model, gpu, prec, extra = case
    targets = (10.0, 50.0, 125.0)
    args = ["perf", "serve", "--model", model, "--gpu", gpu, "--precision", prec, *extra]
    doc = doc_of(*args, *(a for x in targets for a in ("-i", f"{x:g}")))
    mode = ServingMode.AGGREGATED if "aggregated" in extra else ServingMode.BEST
    system = system_named(gpu)
    work = ServeWorkload(model=model_named(model), precision=precision, isl=1024, osl=1024, mtp=mtp)
    curve = serve_curve(work, system, eff=serving_efficiency(system.gpu), mode=mode)
    assert doc["model"] == model_named(model).name and doc["system"] == system.name
    assert doc["targets"] == list(targets) and len(doc["points"]) == len(targets)
    assert doc["vs"] is None and doc["ratios"] == [] and doc["assumptions"]
    for x, point in zip(targets, doc["points"], strict=True):
        best = curve.best_at(x)
        if best is None:
            assert point is None
            continue
        assert point["tok_s_gpu"] == pytest.approx(best.tok_s_gpu, rel=1e-12)
        assert point["interactivity_tok_s_user"] >= x
        assert set(point["plan"]) >= {"tp", "ep", "pp", "dp", "batch"}
        assert point["ttft_s"] > 0 and point["dominant"] and point["mode"] in ("aggregated", "disaggregated")
    assert doc["peak"]["tok_s_gpu"] == pytest.approx(curve.peak.tok_s_gpu if curve.peak else 0.0)


VS_CASES = [
    pytest.param(("--gpu", "gb200", "--precision", "fp4", "--vs", "b200"), "fp4", id="gb200-vs-b200"),
    pytest.param(("--gpu", "gb200", "--precision", "fp4", "--vs", "h100"), "fp8", id="vs-chip-without-fp4"),
    pytest.param(("--gpu", "b200:72", "--vs", "b200", "--vs-precision", "bf16"), "bf16", id="domain-and-vs-precision"),
]


@pytest.mark.parametrize(("args", "vs_precision"), VS_CASES)
def test_vs_ratios_are_point_over_vs_point(args: tuple[str, ...], vs_precision: str) -> None:
    doc = doc_of("perf", "serve", "--model", "deepseek-r1", *args, "-i", "25,125", "-i", str(UNREACHABLE))
    vs = doc["vs"]
    assert vs["precision"] == vs_precision and vs["model"] == doc["model"]
    assert [r["interactivity_tok_s_user"] for r in doc["ratios"]] == doc["targets"]
    for mine, theirs, r in zip(doc["points"], vs["points"], doc["ratios"], strict=True):
        if mine is None or theirs is None:
            assert r["ratio"] is None
        else:
            assert r["ratio"] == pytest.approx(mine["tok_s_gpu"] / theirs["tok_s_gpu"], rel=1e-12)
    assert doc["points"][-1] is None and vs["points"][-1] is None and doc["ratios"][-1]["ratio"] is None
    assert doc["peak_ratio"] == pytest.approx(doc["peak"]["tok_s_gpu"] / vs["peak"]["tok_s_gpu"])


def test_a_ttft_bound_keeps_only_points_that_meet_it() -> None:
    doc = doc_of("perf", "serve", "-m", "llama-3.1-70b", "-g", "h100", "--ttft-s", "0.5", "--isl", "4096")
    reached = [p for p in doc["points"] if p is not None]
    assert reached and all(p["ttft_s"] <= 0.5 for p in reached)
    assert doc["workload"] == {"isl": 4096, "osl": 1024, "ttft_s": 0.5, "mtp": False, "mtp_tokens_per_step": None}


def test_the_table_says_unreachable_and_has_a_peak_row_without_exponents() -> None:
    code, out, _ = invoke("perf", "serve", "-m", "deepseek-r1", "-g", "gb200", "-i", "50", "-i", str(UNREACHABLE))
    assert code == 0, out
    assert "unreachable" in out and re.search(r"│ peak\s", out)
    assert "DeepSeek-R1 on GB200 NVL72" in out and "A prediction of the model" in out
    assert not EXPONENT.search(out.replace(str(UNREACHABLE), ""))


LONG_PROMPT = ("perf", "serve", "-m", "llama-3.1-8b", "-g", "h100", "--isl", "16777216", "--osl", "1")
SMALL = r"0\.0+[1-9]\d?"  # a figure far below 1, to two significant digits (about 1e-5 tok/s/GPU here)
TINY_FIGURES = [  # (args, what the table must hold): a non-zero figure or target is never printed as 0
    pytest.param((*LONG_PROMPT, "-i", "10"), rf"│ 10\s+│ {SMALL}\s", id="tok-s-gpu-below-one"),
    pytest.param(
        ("perf", "serve", "-m", "llama-3.1-8b", "-g", "h100", "-i", "1e-7"), r"│ 0\.0000001\s", id="tiny-target"
    ),
    pytest.param(
        ("perf", "serve", "-m", "llama-3.1-8b", "-g", "h100", "-i", "10", "--ttft-s", "1e-9"),
        r"TTFT bound 0\.000000001 s",
        id="tiny-ttft-bound",
    ),
]


@pytest.mark.parametrize(("args", "shows"), TINY_FIGURES)
def test_the_table_never_rounds_a_figure_to_zero(args: tuple[str, ...], shows: str) -> None:
    code, out, err = invoke(*args)
    assert code == 0, out + err
    assert re.search(shows, out) and not EXPONENT.search(out), out


def test_yaml_is_the_same_document_as_json() -> None:
    args = ("perf", "serve", "-m", "llama-3.1-8b", "-g", "h100", "-i", "100", "--vs", "a100")
    code, out, _ = invoke(*args, "-o", "yaml")
    assert code == 0, out
    assert yaml.safe_load(out) == doc_of(*args)


CONFIGS = [
    pytest.param("Llama-3.1-8B/config.json", LLAMA_8B, (), "llama-3.1-8b", id="llama-config-dir"),
    pytest.param("dsv3.json", DEEPSEEK_V3, ("--mtp",), "deepseek-v3", id="deepseek-config-with-mtp"),
]


@pytest.mark.parametrize(("rel", "config", "extra", "builtin"), CONFIGS)
def test_model_can_be_a_config_json_file(
    tmp_path: Path, rel: str, config: dict[str, Any], extra: tuple[str, ...], builtin: str
) -> None:
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))
    doc = doc_of("perf", "serve", "--model", str(path), "--gpu", "b200", "-i", "50", *extra)
    assert doc["model"] == (path.parent.name if path.name == "config.json" else path.stem)
    assert doc["workload"]["mtp"] is bool(extra)
    ref = doc_of("perf", "serve", "--model", builtin, "--gpu", "b200", "-i", "50", *extra)
    assert doc["points"][0]["tok_s_gpu"] == pytest.approx(ref["points"][0]["tok_s_gpu"], rel=0.02)


SERVE = ("perf", "serve", "--model", "deepseek-r1", "--gpu", "gb200")
SERVE_ERRORS = [
    pytest.param(("perf", "serve", "-m", "gpt-9", "-g", "h100"), "unknown model 'gpt-9'", id="unknown-model"),
    pytest.param(("perf", "serve", "-m", "llama-3.1-8b", "-g", "tpu7"), "unknown system 'tpu7'", id="unknown-gpu"),
    pytest.param((*SERVE, "--precision", "int3"), "unknown precision 'int3'", id="unknown-precision"),
    pytest.param((*SERVE, "--domain", "0"), "--domain must be at least 1 (got 0)", id="domain-0"),
    pytest.param(("perf", "serve", "-m", "deepseek-r1", "-g", "gb200:x"), "bad NVLink domain", id="domain-text"),
    pytest.param(("perf", "serve", "-m", "deepseek-r1", "-g", "gb200:9", "--domain", "8"), "once", id="domain-twice"),
    pytest.param((*SERVE, "--isl", "0"), "--isl must be more than 0 (got 0)", id="isl-0"),
    pytest.param((*SERVE, "--osl", "-5"), "--osl must be more than 0 (got -5)", id="osl-negative"),
    pytest.param((*SERVE, "--ttft-s", "0"), "--ttft-s must be more than 0", id="ttft-0"),
    pytest.param((*SERVE, "-i", "0"), "--interactivity must be more than 0", id="interactivity-0"),
    pytest.param((*SERVE, "-i", "-10"), "--interactivity must be more than 0", id="interactivity-negative"),
    pytest.param((*SERVE, "-i", "inf"), "--interactivity must be more than 0", id="interactivity-inf"),
    pytest.param((*SERVE, "-i", "1e12"), "--interactivity must be at most", id="interactivity-huge"),
    pytest.param((*SERVE, "--isl", "99999999999999999999"), "--isl must be at most", id="isl-huge"),
    pytest.param((*SERVE, "--ttft-s", "1e300"), "--ttft-s must be at most", id="ttft-huge"),
    pytest.param((*SERVE, "-i", "fast"), "--interactivity must be a number", id="interactivity-text"),
    pytest.param(("perf", "serve", "-m", "llama-3.1-8b", "-g", "h100", "--mtp"), "no MTP head", id="mtp-llama"),
    pytest.param((*SERVE, "--vs", "tpu"), "--vs: unknown system 'tpu'", id="unknown-vs"),
    pytest.param((*SERVE, "--vs", "b200", "--vs-precision", "fp2"), "--vs-precision", id="bad-vs-precision"),
    pytest.param((*SERVE, "--vs-precision", "fp4"), "--vs-precision fp4 is the precision on --vs", id="vs-prec-no-vs"),
    pytest.param((*SERVE, "--mode", "fast"), "--mode", id="unknown-mode"),
    pytest.param(("perf", "serve", "--gpu", "gb200"), "missing option '--model'", id="no-model"),
    pytest.param(("perf", "serve", "-m", "/no/such/config.json", "-g", "h100"), "cannot read", id="missing-file"),
    pytest.param(("perf", "serve", "-m", "a" * 5000, "-g", "h100"), "--model: unknown model 'aaa", id="name-too-long"),
    pytest.param(("perf", "serve", "-m", "x\x00y", "-g", "h100"), "--model: unknown model 'x\\x00y'", id="nul-in-name"),
]


@pytest.mark.parametrize(("args", "says"), SERVE_ERRORS)
def test_serve_errors_are_one_line_exit_2(args: tuple[str, ...], says: str) -> None:
    code, out, err = invoke(*args)
    assert code == 2 and out == "", out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], err


BAD_FILES = [
    pytest.param("{not json", "not valid JSON", id="not-json"),
    pytest.param("[1, 2]", "one JSON object", id="a-list"),
    pytest.param(json.dumps({**LLAMA_8B, "num_hidden_layers": "many"}), "num_hidden_layers", id="bad-field"),
    pytest.param(json.dumps({"hidden_size": 4096}), "num_hidden_layers", id="missing-field"),
    pytest.param("[" * 50_000 + "]" * 50_000, "nested too deeply", id="deeply-nested"),
    pytest.param('{"hidden_size": 1' + "0" * 5000 + "}", "a number thousands of digits long", id="5000-digits"),
    pytest.param("\ufeff{}", "num_hidden_layers", id="byte-order-mark-then-nothing"),
    pytest.param(" " * (1 << 20) + "{}", "KiB", id="too-large"),
]


@pytest.mark.parametrize(("text", "says"), BAD_FILES)
def test_a_bad_config_file_is_one_line_naming_the_file(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    code, _, err = invoke("perf", "serve", "--model", str(path), "--gpu", "h100")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert str(path) in err and says in err


FOLDERS = [  # a checkpoint's folder where its config.json was meant: say so and name the file
    pytest.param(("serve", "-g", "h100"), "", id="serve"),
    pytest.param(("serve", "-g", "h100"), "/", id="serve-trailing-slash"),
    pytest.param(("train", "-g", "h100", "-n", "8"), "", id="train"),
]


@pytest.mark.parametrize(("verb", "slash"), FOLDERS)
def test_a_folder_for_model_names_its_config_json(tmp_path: Path, verb: tuple[str, ...], slash: str) -> None:
    folder = tmp_path / "Llama-3.1-8B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_8B))
    code, out, err = invoke("perf", *verb, "--model", f"{folder}{slash}")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "a folder, not a config.json" in err and str(folder / "config.json") in err


# ------------------------------------------------------------------------------------------ perf train
def _train_ref(model: str, gpu: str, plan: TrainPlan, batch: int, seq: int = 4096) -> tuple[float, float]:
    system = system_named(gpu)
    work = TrainWorkload(model=model_named(model), precision=Precision.BF16, seq_len=seq, global_batch=batch)
    step = train_step(
        work, plan, gpu=system.gpu, links=links_of(system), domain_gpus=system.domain_gpus,
        eff=training_efficiency(system.gpu),
    )  # fmt: skip
    return step.step_s, train_memory_bytes(work, plan)


GIVEN_PLANS = [
    pytest.param("llama-3.1-70b", "gb200", 72, TrainPlan(tp=8, pp=1, dp=9), 1008, id="llama70b-tp8-dp9"),
    pytest.param("llama-3.1-405b", "h100", 512, TrainPlan(tp=8, pp=8, dp=8, recompute=True), 1024, id="405b-recompute"),
    pytest.param("llama-3.1-8b", "b200", 16, TrainPlan(tp=2, pp=2, dp=4, micro_batch=2), 64, id="8b-micro-2"),
]


@pytest.mark.parametrize(("model", "gpu", "gpus", "plan", "batch"), GIVEN_PLANS)
def test_train_times_the_given_plan_as_the_model_does(
    model: str, gpu: str, gpus: int, plan: TrainPlan, batch: int
) -> None:
    args = ["perf", "train", "-m", model, "-g", gpu, "-n", str(gpus), "--tp", str(plan.tp), "--pp", str(plan.pp)]
    args += ["--micro-batch", str(plan.micro_batch), "--global-batch", str(batch)]
    args += ["--recompute"] if plan.recompute else []
    doc = doc_of(*args)  # --dp left out: what tp x pp leaves of --gpus
    step_s, mem = _train_ref(model, gpu, plan, batch)
    assert doc["plan"]["dp"] == plan.dp and doc["plan_source"] == "given" and doc["gpus"] == gpus
    assert doc["step"]["step_s"] == pytest.approx(step_s, rel=1e-12)
    assert doc["step"]["tokens_per_s"] == pytest.approx(batch * 4096 / step_s, rel=1e-12)
    assert doc["memory_gb_per_gpu"] == pytest.approx(mem / 1e9)
    assert 0 < doc["step"]["mfu"] < 1 and doc["step"]["achieved_tflops_per_gpu"] > 0


def test_train_without_a_plan_picks_one_that_covers_the_gpus_and_fits() -> None:
    doc = doc_of("perf", "train", "-m", "llama-3.1-70b", "-g", "h100", "-n", "256", "--vs", "gb200")
    gb = doc["workload"]["global_batch"]
    assert gb % 256 == 0 and abs(gb * 4096 - (1 << 22)) <= 256 * 4096  # ~4M tokens, a multiple of --gpus
    for side in (doc, doc["vs"]):
        plan = side["plan"]
        assert plan["tp"] * plan["pp"] * plan["dp"] == 256 and side["plan_source"] == "best"
        usable = system_named("h100" if side is doc else "gb200").gpu.hbm_bytes * HBM_USABLE
        assert side["memory_gb_per_gpu"] * 1e9 <= usable
    assert doc["ratio"] == pytest.approx(doc["step"]["tokens_per_s"] / doc["vs"]["step"]["tokens_per_s"])


def test_train_table_lists_each_term() -> None:
    code, out, _ = invoke("perf", "train", "-m", "llama-3.1-8b", "-g", "h100", "-n", "64", "--vs", "b200")
    assert code == 0, out
    for term in ("compute", "pp-bubble", "tp-all-reduce", "pp-send", "dp-all-reduce", "MFU", "tokens/s H100"):
        assert term in out, term
    assert not EXPONENT.search(out)


TRAIN = ("perf", "train", "-m", "llama-3.1-70b", "-g", "h100", "-n", "64")
TRAIN_ERRORS = [
    pytest.param((*TRAIN, "--tp", "3"), "--tp x --cp x --pp = 3 must divide --gpus 64", id="tp-does-not-divide"),
    pytest.param((*TRAIN, "--tp", "8", "--pp", "2", "--dp", "2"), "= 32, not the 64 GPUs", id="plan-not-gpus"),
    pytest.param((*TRAIN, "--tp", "8", "--cp", "16"), "--tp x --cp x --pp = 128 must divide", id="cp-too-many"),
    pytest.param((*TRAIN, "--tp", "8", "--virtual-stages", "2"), "needs a pipeline: give --pp", id="v-without-pp"),
    pytest.param(
        (*TRAIN, "--tp", "4", "--pp", "16", "--virtual-stages", "8"), "more chunks than the 80 layers", id="v-too-many"
    ),
    pytest.param(
        (*TRAIN, "--tp", "8", "--cp", "4", "--seq-len", "4100"), "must split into 2 x --cp = 8 equal", id="cp-seq"
    ),
    pytest.param(
        ("perf", "train", "-m", "llama-3.1-8b", "-g", "h100", "-n", "33", "--pp", "33"),
        "--pp 33 is more than the 32 layers",
        id="pp-over-layers",
    ),
    pytest.param((*TRAIN, "--tp", "1"), "does not fit H100 x8", id="does-not-fit"),
    pytest.param((*TRAIN, "--tp", "8", "--global-batch", "100"), "multiple of dp x micro-batch = 8", id="batch"),
    pytest.param(
        ("perf", "train", "-m", "llama-3.1-405b", "-g", "h100", "-n", "8"), "no plan of 8 GPUs", id="none-fits"
    ),
    pytest.param(
        ("perf", "train", "-m", "llama-3.1-70b", "-g", "gb200", "-n", "64", "--tp", "4", "--recompute", "--vs", "h100"),
        "--vs: the plan does not fit H100 x8",
        id="fits-gb200-not-vs-h100",
    ),
    pytest.param(
        ("perf", "train", "-m", "llama-3.1-8b", "-g", "h100", "-n", "0"), "--gpus must be at least 1", id="gpus-0"
    ),
    pytest.param(("perf", "train", "-m", "llama-3.1-8b", "-g", "h100"), "missing option '--gpus'", id="no-gpus"),
    pytest.param((*TRAIN, "--precision", "fp16"), "unknown precision 'fp16'", id="precision"),
    pytest.param(("perf", "train", "-m", "x", "-g", "h100", "-n", "8"), "unknown model 'x'", id="unknown-model"),
]


@pytest.mark.parametrize(("args", "says"), TRAIN_ERRORS)
def test_train_errors_are_one_line_exit_2(args: tuple[str, ...], says: str) -> None:
    code, out, err = invoke(*args)
    assert code == 2 and out == "", out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], err


def test_the_memory_error_gives_the_figures() -> None:
    _, _, err = invoke(*TRAIN, "--tp", "1")
    needed, usable = (float(x.replace(",", "")) for x in re.findall(r"([\d,]+\.\d) GB", err)[:2])
    assert needed > usable == pytest.approx(80 * HBM_USABLE, abs=0.05)


@pytest.mark.parametrize("verb", [("perf", "serve"), ("perf", "train"), ("perf",)], ids=["serve", "train", "group"])
def test_help_has_examples(verb: tuple[str, ...]) -> None:
    code, out, _ = invoke(*verb, "--help")
    assert code == 0 and "Examples" in out and "rackscale perf" in out


def test_train_takes_a_context_parallel_interleaved_plan_and_times_it_as_the_model_does() -> None:
    """Llama 3's long-context stage on a sixteenth of its GPUs: TP 8 x CP 16 x PP 8 (V 4), 131k tokens."""
    doc = doc_of(
        "perf", "train", "-m", "llama-3.1-405b", "-g", "h100", "-n", "1024", "--seq-len", "131072",
        "--global-batch", "8", "--tp", "8", "--cp", "16", "--pp", "8", "--virtual-stages", "4", "--recompute",
    )  # fmt: skip
    plan = TrainPlan(tp=8, cp=16, pp=8, dp=1, virtual_stages=4, recompute=True)
    work = TrainWorkload(model=model_named("llama-3.1-405b"), precision=Precision.BF16, seq_len=131072, global_batch=8)
    system = system_named("h100")
    step = train_step(
        work, plan, gpu=system.gpu, links=links_of(system), domain_gpus=system.domain_gpus,
        eff=training_efficiency(system.gpu),
    )  # fmt: skip
    assert doc["plan"]["cp"] == 16 and doc["plan"]["virtual_stages"] == 4 and doc["plan"]["dp"] == 1
    assert doc["step"]["step_s"] == pytest.approx(step.step_s, rel=1e-12)
    assert doc["step"]["cp_all_gather_s"] == pytest.approx(step.cp_comm_s) and step.cp_comm_s > 0
    assert doc["memory_gb_per_gpu"] == pytest.approx(train_memory_bytes(work, plan) / 1e9)


def test_train_takes_an_expert_parallel_plan_and_refuses_it_on_a_dense_model() -> None:
    code, out, _ = invoke(
        "perf", "train", "-m", "deepseek-v3", "-g", "b200", "-n", "64", "-p", "fp8", "--pp", "4", "--ep", "16",
        "--recompute", "--global-batch", "256", "--json",
    )  # fmt: skip
    assert code == 0, out
    got = json.loads(out)
    assert got["plan"]["ep"] == 16 and got["step"]["ep_all_to_all_s"] > 0
    code, _, err = invoke("perf", "train", "-m", "llama-3.1-8b", "-g", "h100", "-n", "8", "--ep", "8")
    assert code == 2 and "needs a MoE model" in err and len(err.strip().splitlines()) == 1


def test_train_unfused_attention_reproduces_megatrons_calibrated_run() -> None:
    """Megatron-LM's 2021 GPT-3 175B run on 384 A100 (unfused attention), the training calibration point: the
    CLI times it as the model does, 153 TFLOP/s per GPU, with the scores' HBM time as its own term; without
    the flag, fused attention, no such term and a faster step."""
    args = ("perf", "train", "-m", "gpt3-175b", "-g", "a100", "-n", "384", "--seq-len", "2048",
            "--global-batch", "1536", "--tp", "8", "--pp", "12", "--recompute")  # fmt: skip
    unfused, fused = doc_of(*args, "--unfused-attention"), doc_of(*args)
    assert unfused["workload"]["fused_attention"] is False and fused["workload"]["fused_attention"] is True
    assert unfused["step"]["achieved_tflops_per_gpu"] == pytest.approx(153.0, abs=0.1)
    assert unfused["step"]["attention_hbm_s"] > 0 and fused["step"]["attention_hbm_s"] == 0
    assert fused["step"]["step_s"] < unfused["step"]["step_s"]
    assert any("unfused" in line for line in unfused["assumptions"])
