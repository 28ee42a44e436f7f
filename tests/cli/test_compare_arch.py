"""``rackscale compare-arch`` on the LLM performance model: per interactivity target the ratio A/B is a/b,
its factors (chip x precision x NVLink domain) multiply to it, cost per million tokens uses each side's own
price, a target above both curves is null, and the seed's claims sit beside the nearest measured ratio.
``--simulate`` (or any scheduling option) keeps the older report, labelled as scheduling KPIs."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rackscale.cli.app import app
from rackscale.llm.hardware import system_named
from rackscale.loaders import load_cluster

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXPONENT = re.compile(r"\d[eE][+-]?\d")
TARGETS = ("25", "125", "10000000")  # the last: above every curve


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "250"})
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.stdout, result.stderr


def doc_of(*args: str) -> dict[str, Any]:
    code, out, err = invoke("compare-arch", *args, "--json")
    assert code == 0, out + err
    parsed: dict[str, Any] = json.loads(out)
    return parsed


ARCHS = [
    pytest.param(((), ("GB200 NVL72", "fp4", "H100 x8", "fp8")), id="default-gb200-fp4-vs-h100-fp8"),
    pytest.param((("--b", "b200"), ("GB200 NVL72", "fp4", "B200 x8", "fp4")), id="vs-b200-narrowest-fp4"),
    pytest.param(
        (
            ("--model", "llama-3.1-70b", "--a", "h200", "--b", "a100", "--b-precision", "bf16"),
            ("H200 x8", "fp8", "A100 x8", "bf16"),
        ),
        id="llama-h200-vs-a100",
    ),
]


@pytest.fixture(scope="module", params=ARCHS)
def case(request: pytest.FixtureRequest) -> tuple[dict[str, Any], tuple[str, str, str, str]]:
    args, expected = request.param
    return doc_of(*args, *(a for t in TARGETS for a in ("-i", t))), expected


def test_each_side_is_the_system_and_precision_asked_for(case: tuple[dict[str, Any], tuple[str, ...]]) -> None:
    doc, (sys_a, prec_a, sys_b, prec_b) = case
    assert (doc["a"]["system"], doc["a"]["precision"], doc["b"]["system"], doc["b"]["precision"]) == (
        sys_a, prec_a, sys_b, prec_b,
    )  # fmt: skip
    assert [t["interactivity_tok_s_user"] for t in doc["targets"]] == [float(t) for t in TARGETS]
    assert doc["seed_claims"] == {"throughput_x": 28, "cost_per_token_divided_by": 15}


def test_the_ratio_is_a_over_b_and_the_factors_multiply_to_it(case: tuple[dict[str, Any], tuple[str, ...]]) -> None:
    doc, _ = case
    measured = 0
    for t in doc["targets"]:
        assert list(t["factors"]) == ["chip", "precision", "nvlink-domain"]
        if t["a"] is None or t["b"] is None:
            assert t["ratio"] is None
            continue
        measured += 1
        assert t["a"]["interactivity_tok_s_user"] >= t["interactivity_tok_s_user"]
        assert t["b"]["interactivity_tok_s_user"] >= t["interactivity_tok_s_user"]
        assert t["ratio"] == pytest.approx(t["a"]["tok_s_gpu"] / t["b"]["tok_s_gpu"], rel=1e-12)
        if all(f is not None for f in t["factors"].values()):
            assert math.prod(t["factors"].values()) == pytest.approx(t["ratio"], rel=1e-9)
    assert measured >= 1


def test_a_target_above_both_curves_is_null(case: tuple[dict[str, Any], tuple[str, ...]]) -> None:
    doc, _ = case
    top = doc["targets"][-1]
    assert top["a"] is None and top["b"] is None and top["ratio"] is None
    assert top["cost_per_million_tokens"] == {"a": None, "b": None} and top["cost_divided_by"] is None


def test_cost_per_million_tokens_uses_each_sides_own_price(case: tuple[dict[str, Any], tuple[str, ...]]) -> None:
    doc, _ = case
    for t in [*doc["targets"], doc["peak"]]:
        costs = t["cost_per_million_tokens"]
        for side in ("a", "b"):
            point = t[side]
            if point is None:
                assert costs[side] is None
                continue
            price = doc[side]["price_per_gpu_hour"]
            assert costs[side] == pytest.approx(price / (point["tok_s_gpu"] * 3600) * 1e6, rel=1e-12)
        if costs["a"] and costs["b"]:
            assert t["cost_divided_by"] == pytest.approx(costs["b"] / costs["a"], rel=1e-12)


def test_the_claims_sit_beside_the_measured_ratio_nearest_them(case: tuple[dict[str, Any], tuple[str, ...]]) -> None:
    doc, _ = case
    ratios = [t["ratio"] for t in doc["targets"] if t["ratio"]]
    check = doc["claims_check"]
    assert check["ratio_range"] == [min(ratios), max(ratios)]
    assert abs(math.log(check["ratio"] / 28)) == pytest.approx(min(abs(math.log(r / 28)) for r in ratios))
    chosen = next(t for t in doc["targets"] if t["interactivity_tok_s_user"] == check["interactivity_tok_s_user"])
    assert check["factors"] == chosen["factors"] and check["cost_divided_by"] == chosen["cost_divided_by"]


PRICES = [
    pytest.param(("--price-a", "4"), (4.0, None), id="price-a"),
    pytest.param(("--price-a", "1", "--price-b", "3.5"), (1.0, 3.5), id="both-prices"),
]


@pytest.mark.parametrize(("args", "prices"), PRICES)
def test_prices_can_be_overridden(args: tuple[str, ...], prices: tuple[float | None, float | None]) -> None:
    doc = doc_of(*args, "-i", "50", "--model", "llama-3.1-8b")
    catalogue = (system_named("gb200").price_per_gpu_hour, system_named("h100").price_per_gpu_hour)
    for side, want, default in zip(("a", "b"), prices, catalogue, strict=True):
        price = doc[side]["price_per_gpu_hour"]
        assert price == (default if want is None else want)
        point = doc["targets"][0][side]
        got = doc["targets"][0]["cost_per_million_tokens"][side]
        assert got == pytest.approx(price / (point["tok_s_gpu"] * 3600) * 1e6)


SMALL = r"0\.0+[1-9]\d?"  # a figure far below 1, to two significant digits
TINY_FIGURES = [  # (args, what the table must hold): a non-zero figure is never printed as 0
    pytest.param(
        ("-m", "llama-3.1-8b", "--isl", "16777216", "--osl", "1", "-i", "10"),  # about 1e-5 tok/s/GPU on each side
        rf"│ 10\s+│ {SMALL}\s+│ {SMALL}\s+│ x\d",
        id="tok-s-gpu-below-one",
    ),
    pytest.param(
        ("-m", "llama-3.1-8b", "-i", "50", "--price-a", "0.0001"), rf"│ 50\s+(│[^│]+){{6}}│ {SMALL}\s", id="cost"
    ),
]


@pytest.mark.parametrize(("args", "shows"), TINY_FIGURES)
def test_the_table_never_rounds_a_figure_to_zero(args: tuple[str, ...], shows: str) -> None:
    code, out, err = invoke("compare-arch", *args)
    assert code == 0, out + err
    assert re.search(shows, out) and not EXPONENT.search(out), out


MTP = [
    pytest.param((), True, id="deepseek-default-on"),
    pytest.param(("--no-mtp",), False, id="deepseek-no-mtp"),
    pytest.param(("--model", "llama-3.1-8b"), False, id="llama-default-off"),
]


@pytest.mark.parametrize(("args", "mtp"), MTP)
def test_mtp_is_on_where_the_model_has_a_head(args: tuple[str, ...], mtp: bool) -> None:
    assert doc_of(*args, "-i", "50", "--b", "b200")["workload"]["mtp"] is mtp


def test_the_table_shows_factors_costs_and_claims_without_exponents() -> None:
    code, out, _ = invoke("compare-arch", "-i", "125", "-i", "10000000")
    assert code == 0, out
    for word in ("A/B", "chip", "precision", "NVLink domain", "$/Mtok", "unreachable", "peak", "x28", "/15"):
        assert word in out, word
    assert "A = GB200 NVL72 FP4, B = H100 x8 FP8" in out
    assert not EXPONENT.search(out)


def test_two_cluster_specs_become_the_two_systems() -> None:
    from rackscale.llm.jobs import system_of_cluster

    a, b = EXAMPLES / "cluster-nvl72.yaml", EXAMPLES / "cluster-hetero.yaml"
    doc = doc_of("--a-spec", str(a), "--b-spec", str(b), "-i", "50")
    for side, path in (("a", a), ("b", b)):
        system = system_of_cluster(load_cluster(path))
        assert doc[side]["source"] == str(path)
        assert (doc[side]["system"], doc[side]["domain_gpus"]) == (system.name, system.domain_gpus)


ERRORS = [
    pytest.param(("--a", "tpu"), "--a: unknown system 'tpu'", id="unknown-a"),
    pytest.param(("--b", "b200:0"), "--b: bad NVLink domain", id="bad-domain-b"),
    pytest.param(("--a-precision", "int4"), "--a-precision: unknown precision", id="bad-precision"),
    pytest.param(("--model", "gpt-9"), "unknown model 'gpt-9'", id="unknown-model"),
    pytest.param(("--model", "llama-3.1-8b", "--mtp"), "no MTP head", id="mtp-without-head"),
    pytest.param(("-i", "0"), "--interactivity must be more than 0", id="interactivity-0"),
    pytest.param(("--isl", "0"), "--isl must be more than 0 (got 0)", id="isl-0"),
    pytest.param(("--a", "gb200", "--a-spec", "x.yaml"), "give --a or --a-spec, not both", id="a-and-spec"),
    pytest.param(("--b-spec", "/no/such/cluster.yaml"), "cluster.yaml", id="missing-spec"),
    pytest.param(("--price-b", "-1"), "--price-b must be at least 0", id="negative-price"),
    pytest.param(("--price-a", "inf"), "--price-a must be at most 10000", id="infinite-price"),
    pytest.param(("--price-b", "1e308"), "--price-b must be at most 10000", id="huge-price"),
    pytest.param(("--price-a", "1e-310"), "--price-a must be 0 or at least 0.0001", id="tiny-price"),
    pytest.param(("--simulate", "--price-b", "1e-315"), "--price-b must be 0 or at least", id="simulate-tiny-price"),
    pytest.param(("--racks", "0"), "--racks must be at least 1 (got 0)", id="simulate-racks-0"),
    pytest.param(("--racks", "100000000000"), "--racks must be at most 2,000", id="simulate-racks-huge"),
    pytest.param(("--n-jobs", "1000000000"), "--n-jobs must be at most 100,000", id="simulate-jobs-huge"),
    pytest.param(("--simulate", "--racks", "1", "--node-gpus", "5"), "must divide the 72 GPUs", id="simulate-node"),
    pytest.param(("--simulate", "--policy", "magic"), "unknown policy 'magic'", id="simulate-policy"),
    pytest.param(("--simulate", "--model", "gpt-9"), "--model means nothing to --simulate's", id="simulate-model"),
    pytest.param(("--racks", "1", "--isl", "0"), "drop --isl, or drop --racks", id="simulate-isl-by-racks"),
    pytest.param(("--seed", "3", "--no-mtp"), "--mtp/--no-mtp means nothing", id="simulate-no-mtp-by-seed"),
    pytest.param(("--simulate", "-i", "50"), "--interactivity means nothing", id="simulate-interactivity"),
    pytest.param(("--simulate", "--mode", "aggregated"), "--mode means nothing", id="simulate-mode"),
    pytest.param(("--n-jobs", "5", "--a-precision", "fp8"), "--a-precision means nothing", id="simulate-precision"),
]


SPECS_THE_MODEL_CANNOT_TAKE = [  # (field, value, the error): the model would time a GB200 NVL72 instead
    pytest.param("gpuType", "MI300X", "no chip for its GPU model 'MI300X'", id="unknown-gpu-model"),
    pytest.param("nodesPerRack", "1000", "a rack of 4,000 GPUs is an NVLink domain larger than the 576", id="rack"),
]


@pytest.mark.parametrize(("field", "value", "says"), SPECS_THE_MODEL_CANNOT_TAKE)
def test_a_spec_the_model_cannot_take_is_one_line(tmp_path: Path, field: str, value: str, says: str) -> None:
    text = (EXAMPLES / "cluster-nvl72.yaml").read_text()
    spec = tmp_path / "cluster.yaml"
    spec.write_text(re.sub(rf"(?m)^  {field}: .*$", f"  {field}: {value}", text))
    code, out, err = invoke("compare-arch", "--b-spec", str(spec), "-i", "50")
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, out + err
    assert lines[0].startswith(f"error: --b-spec {spec}: ") and says in lines[0]


@pytest.mark.parametrize(("args", "says"), ERRORS)
def test_errors_are_one_line_exit_2(args: tuple[str, ...], says: str) -> None:
    code, out, err = invoke("compare-arch", *args)
    assert code == 2 and out == "", out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], err


# ------------------------------------------------------------------------------------------ --simulate
SIMULATE = [
    pytest.param(("--simulate", "--racks", "1", "--n-jobs", "60"), id="explicit"),
    pytest.param(("--racks", "1", "--n-jobs", "60"), id="implied-by-racks"),
]


@pytest.mark.parametrize("args", SIMULATE)
def test_simulate_reports_scheduling_kpis_labelled_as_such(args: tuple[str, ...]) -> None:
    doc = doc_of(*args)
    assert doc["measures"] == "scheduling KPIs, not the architecture's throughput: A vs B"
    assert doc["A"]["completed"] + doc["A"]["failed"] == 60 == doc["B"]["completed"] + doc["B"]["failed"]
    assert doc["ratios"]["mean_jct_divided_by"] == pytest.approx(doc["B"]["mean_jct_s"] / doc["A"]["mean_jct_s"])
    assert any("not the architecture's throughput" in line for line in doc["assumptions"])
    assert any("USD 2.21 (A) and USD 1.60 (B)" in line for line in doc["assumptions"])


def test_simulate_table_is_titled_scheduling_kpis() -> None:
    code, out, _ = invoke("compare-arch", "--simulate", "--racks", "1", "--n-jobs", "40", "--price-a", "3")
    assert code == 0, out
    assert "scheduling KPIs, not the architecture's throughput" in out
    assert "A: 1 x NVL72; B: 9 x 8-GPU nodes;" in out and "USD 3.00 (A)" in out
    assert not EXPONENT.search(out)


@pytest.mark.parametrize("verb", [("compare-arch",)], ids=["compare-arch"])
def test_help_has_examples(verb: tuple[str, ...]) -> None:
    code, out, _ = invoke(*verb, "--help")
    assert code == 0 and "Examples" in out and "--simulate" in out
