"""The command line, end to end through typer's runner: JSON shapes, errors without tracebacks, files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.cli.app import app

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout


def test_simulate_json_has_a_run_per_policy_with_the_kpis() -> None:
    code, out = invoke("simulate", "--racks", "1", "--n-jobs", "40", "--baseline", "slurm-tree", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert [r["policy"] for r in doc["runs"]] == ["rackscale", "slurm-tree"]
    for run in doc["runs"]:
        kpis = run["kpis"]
        for key in ("idle_rate", "intra_rack_traffic_share", "allocation_ratio", "mean_jct_s", "p99_jct_s"):
            assert key in kpis
        assert kpis["completed"] + kpis["failed"] == doc["jobs"] == 40


def test_simulate_reads_a_trace_and_writes_a_report(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text("name,kind,submit_time,duration,gpus\na,training,0,600,8\nb,training,10,600,4\n")
    report = tmp_path / "out.html"
    code, out = invoke("simulate", "--racks", "1", "--trace", f"csv:{trace}", "--report", str(report), "--json")
    assert code == 0, out
    assert json.loads(out)["jobs"] == 2
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(["simulate", "--trace", "nope:x.csv"], "nope", id="unknown-trace-format"),
        pytest.param(["simulate", "--policy", "magic"], "unknown policy", id="unknown-policy"),
        pytest.param(["simulate", "--racks", "2", "--cluster", "x.yaml"], "either --cluster or --racks", id="both"),
        pytest.param(["schedule", "-f", "/no/such/file.yaml"], "file not found", id="missing-file"),
        pytest.param(["compare-arch", "--racks", "1", "--node-gpus", "5"], "must divide", id="bad-node-size"),
        pytest.param(["simulate", "--trace", "philly:x.csv", "--tenant-map", "x"], "not OLD=NEW", id="bad-tenant-map"),
    ],
)
def test_bad_input_is_a_clear_error_not_a_traceback(args: list[str], says: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert says in result.output.replace("\n", " ")


def test_compare_arch_reports_measured_ratios_beside_the_seed_claims() -> None:
    code, out = invoke("compare-arch", "--racks", "1", "--n-jobs", "60", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["seed_claims"] == {"throughput_x": 28, "cost_per_token_divided_by": 15}
    assert doc["ratios"]["training_throughput_x"] is not None
    assert doc["A"]["completed"] + doc["A"]["failed"] == 60
    assert any("claims" in line for line in doc["assumptions"])


def test_schedule_prints_where_each_job_goes_or_why_not(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        "name: small\nkind: training\ngpus: 8\n---\nname: huge\nkind: training\ngpus: 100\ntopology: {required: rack}\n"
    )
    code, out = invoke("schedule", "-f", str(jobs), "--racks", "2", "-o", "json")
    assert code == 1, out  # huge waits: exit 1, the table (here JSON) still printed
    rows = {r["job"]: r for r in json.loads(out)}
    assert rows["small"]["status"] == "Placed" and rows["small"]["racks"].count(",") == 0
    assert rows["huge"]["status"] == "UnschedulableAndUnresolvable" and "largest rack" in rows["huge"]["reason"]


UNRUNNABLE_LLM = {
    # as POST /v1/jobs refuses them (422): a model the cluster's GPUs cannot hold is bad input, not "Placed"
    "405b-on-one-gpu": ("name: big\nkind: training\ngpus: 1\nllm: {model: llama-3.1-405b}\n", "job 'big': llm.model"),
    "8b-at-a-million-tokens": (
        "name: long\nkind: training\ngpus: 8\nllm: {model: llama-3.1-8b, seqLen: 1048576}\n",
        "job 'long': llm.model",
    ),
    "405b-replica-on-one-gpu": (
        "name: ok\nkind: training\ngpus: 8\n---\nname: svc\nkind: inference\nllm: {model: llama-3.1-405b}\n",
        "job 'svc': llm.model",
    ),
}


@pytest.mark.parametrize(("text", "words"), list(UNRUNNABLE_LLM.values()), ids=list(UNRUNNABLE_LLM))
def test_schedule_refuses_an_llm_job_the_cluster_cannot_hold(tmp_path: Path, text: str, words: str) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(text)
    result = runner.invoke(app, ["schedule", "-f", str(jobs), "--racks", "2"])
    out = result.output  # stdout and stderr
    assert result.exit_code == 2, out
    assert "Traceback" not in out and "Placed" not in out
    assert f"{jobs}: {words}" in out and "does not" in out


@pytest.mark.parametrize(("text", "words"), list(UNRUNNABLE_LLM.values()), ids=list(UNRUNNABLE_LLM))
def test_validate_checks_llm_jobs_against_a_cluster_given_with_them(tmp_path: Path, text: str, words: str) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(text)
    cluster = Path(__file__).resolve().parents[2] / "examples" / "cluster-nvl72.yaml"
    alone = runner.invoke(app, ["validate", str(jobs)], env={"COLUMNS": "400"})
    assert alone.exit_code == 0 and "LLM job(s) not checked against a cluster" in alone.output, alone.output
    both = runner.invoke(app, ["validate", str(cluster), str(jobs)], env={"COLUMNS": "400"})
    out = " ".join(both.output.split())
    assert both.exit_code == 2 and "Traceback" not in out, out
    assert f"{jobs}: {words}" in out and "does not" in out and f"on cluster nvl72-2x4, {cluster})" in out
    assert "not checked" not in out


def test_bench_simulate_runs_one_scenario_in_process() -> None:
    from rackscale.bench.simulate import run_one

    seen: list[tuple[int, int]] = []
    out = run_one({"racks": 1, "jobs": 50, "policy": "rackscale"}, lambda done, total: seen.append((done, total)))
    assert out["jobs"] == 50 and out["completed"] + out["failed"] == 50
    assert out["events_per_s"] > 0 and out["peak_rss_mb"] > 0 and seen[-1] == (50, 50)


def test_bench_ablations_switch_one_mechanism_off_by_name() -> None:
    from rackscale.bench.simulate import ABLATIONS, SCENARIOS, profile_of, run_one

    off = profile_of("rackscale-no-elastic")
    assert not isinstance(off, str) and not off.elastic and off.name == "rackscale-no-elastic"
    assert off.queue_sort == "priority-las" and off.opportunistic_backfill  # the rest is the default's
    assert profile_of("first-fit") == "first-fit"
    assert set(SCENARIOS["elastic-ab"]["policies"]) <= {"rackscale", *ABLATIONS}
    cfg = {"racks": 1, "jobs": 40, "elastic_share": 1.0, "seed": 3}
    on = run_one({**cfg, "policy": "rackscale"}, lambda *_: None)
    fixed = run_one({**cfg, "policy": "rackscale-no-elastic"}, lambda *_: None)
    assert on["completed"] + on["failed"] == fixed["completed"] + fixed["failed"] == 40
    assert on["resizes"] > 0 and fixed["resizes"] == 0
