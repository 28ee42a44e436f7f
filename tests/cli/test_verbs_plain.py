"""Every verb speaks plainly and consistently: a typo'd GPU type, an empty file or a cluster given as jobs is
one clear line; usage errors are one ``error:`` line (exit 2); every command's --help has examples and the
profiles come from the scheduler's registry; ``schedule`` and ``cancel`` say by their exit code what
happened."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from tests.cli.test_service_verbs import _no_user_config, job_doc, rs, service, submit_api, wait_status
from tests.service.conftest import LiveService
from typer.testing import CliRunner

from rackscale.cli import common
from rackscale.cli.app import app
from rackscale.loaders import SpecError, load_cluster, parse_cluster_text, parse_jobs_text
from rackscale.model.specs import GPU_MODELS, gpu_type_problem
from rackscale.model.topology import GPUCluster
from rackscale.scheduler import PROFILES, Profile

__all__ = ["_no_user_config", "service"]  # fixtures, shared with the service verbs' tests

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SEED_CLUSTER = EXAMPLES / "seed-gpucluster.yaml"


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.stdout, result.stderr


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


# ------------------------------------------------------------------------------------------ gpuType
def seed_with(gpu_type: str) -> str:
    return SEED_CLUSTER.read_text().replace("gpuType: A100", f"gpuType: {gpu_type}")


def rich_with(gpu_type: str, speed: str = "") -> str:
    text = f"apiVersion: rackscale.io/v1\nkind: Cluster\nmetadata: {{name: c}}\nspec:\n  gpuType: {gpu_type}\n"
    return text + (f"  gpuSpeed: {speed}\n" if speed else "")


def test_a_typo_in_gpu_type_is_an_error_with_the_likely_model(tmp_path: Path) -> None:
    f = tmp_path / "typo.yaml"
    f.write_text(seed_with("A1000"))
    code, out, _ = invoke("validate", str(f))
    assert code == 2
    line = " ".join(out.split())  # validate's lines may wrap (rich console)
    assert f"{f}:6: spec.gpuType: 'A1000' is not a GPU model rackscale knows" in line
    assert "did you mean 'A100'?" in line and "kind: Cluster" in line and "gpuSpeed" in line  # how to declare one
    with pytest.raises(SpecError, match="did you mean 'GB200'"):
        parse_cluster_text(rich_with("gb200"))  # names are matched exactly against jobs' gpuModels
    pools = "apiVersion: rackscale.io/v1\nkind: Cluster\nmetadata: {name: c}\nspec:\n  pools:\n"
    pools += "    - {name: a, gpuType: H100, racks: 1}\n    - {name: b, gpuType: H10, racks: 1}\n"
    with pytest.raises(SpecError) as info:
        parse_cluster_text(pools)
    assert [p.path for p in info.value.problems] == ["spec.pools[1].gpuType"]
    assert "did you mean 'H100'?" in info.value.problems[0].fix


@pytest.mark.parametrize(
    "name",
    ["A100", "GB200", "H200", "B200", "L40S", "L4", "MI300X", "local", "H100-80GB", "NVIDIA-H100-80GB-HBM3"],
)
def test_known_models_and_their_variants_pass(name: str) -> None:
    assert gpu_type_problem(name) is None
    assert parse_cluster_text(rich_with(name)).gpu_models == (name,)


def test_a_new_model_is_declared_in_gpu_speed() -> None:
    assert gpu_type_problem("X9") is not None and "X9" not in GPU_MODELS
    c = parse_cluster_text(rich_with("X9", "{X9: 3.0}"))
    assert c.gpu_models == ("X9",) and c.speed_of("X9") == 3.0


# ------------------------------------------------------------------------------------------ files
def test_an_empty_file_is_an_error_not_zero_jobs(tmp_path: Path) -> None:
    f = tmp_path / "empty.yaml"
    f.write_text("# nothing yet\n")
    code, out, _ = invoke("validate", str(f))
    assert code == 2
    flat = " ".join(out.split())
    assert f"{f}: no job or cluster found in the file" in flat and "0 job(s)" not in flat
    code, _, err = invoke("schedule", "-f", str(f))
    assert code == 2 and "no job found" in one_line(err)


@pytest.mark.parametrize(
    "verb",
    [
        ["schedule", "-f", str(SEED_CLUSTER)],
        ["submit", "-f", str(SEED_CLUSTER), "--server", "http://127.0.0.1:9"],  # checked before it connects
        ["simulate", "--racks", "1", "--jobs", str(SEED_CLUSTER)],
    ],
    ids=["schedule", "submit", "simulate"],
)
def test_a_cluster_given_as_jobs_is_one_line(verb: list[str]) -> None:
    code, out, err = invoke(*verb)
    assert code == 2 and out == ""
    line = one_line(err.replace("error: nothing was submitted: fix the spec files (see above)", ""))
    expected = f"{SEED_CLUSTER}: this is a GpuCluster (a cluster spec), not a job"
    assert expected in line and "(fix: pass it with --cluster, or give a job spec)" in line


def test_validate_spots_a_cluster_among_jobs(tmp_path: Path) -> None:
    f = tmp_path / "jobs.yaml"
    f.write_text("name: a\nkind: training\ngpus: 8\n---\n" + SEED_CLUSTER.read_text())
    code, out, _ = invoke("validate", str(f))
    assert code == 2
    flat = " ".join(out.split())
    assert f"{f}:5: [1]: this is a GpuCluster (a cluster spec), not a job" in flat
    assert "unknown field" not in flat


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("name: a\nkind: training\n\tgpus: 8\n", 3, 1),
        ("name: a\nkind: training\ngpus:\n\t8\n", 4, 1),
        ("a:\n  b: 1\n  \tc: 2\n", 3, 3),
    ],
    ids=["indent", "token", "after-spaces"],
)
def test_a_tab_in_the_indentation_says_tab(text: str, line: int, column: int) -> None:
    with pytest.raises(SpecError) as info:
        parse_jobs_text(text, source="tabs.yaml")
    assert str(info.value).startswith(
        f"tabs.yaml:{line}: invalid YAML: a tab character at line {line} column {column}: YAML indents with spaces"
    )
    assert parse_jobs_text("name: a\t# a tab in a comment is fine\nkind: training\ngpus: 8\n")[0].name == "a"


# ------------------------------------------------------------------------------------------ schedule
def jobs_file(tmp_path: Path, *gpus: int) -> Path:
    f = tmp_path / "jobs.yaml"
    docs = [f"name: j{i}\nkind: training\ngpus: {g}\ntopology: {{required: rack}}\n" for i, g in enumerate(gpus)]
    f.write_text("---\n".join(docs))
    return f


def test_schedule_exit_code_says_whether_every_job_was_placed(tmp_path: Path) -> None:
    assert invoke("schedule", "-f", str(jobs_file(tmp_path, 8, 16)), "--racks", "1")[0] == 0
    code, out, _ = invoke("schedule", "-f", str(jobs_file(tmp_path, 8, 100)), "--racks", "1", "-o", "json")
    assert code == 1 and '"Placed"' in out and "largest rack" in out  # the table is still printed
    assert invoke("schedule", "-f", str(jobs_file(tmp_path, 8)), "--racks", "0")[0] == 2
    _, help_text, _ = invoke("schedule", "--help")
    assert "Exit codes: 0 every job placed; 1 some job waits or cannot run" in help_text
    assert "2 bad input" in help_text


# ------------------------------------------------------------------------------------------ help
def commands() -> Iterator[tuple[list[str], Any]]:
    def walk(cmd: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        yield path, cmd
        for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
            yield from walk(sub, [*path, name])

    yield from walk(typer.main.get_command(app), [])


COMMANDS = [path for path, _ in commands()]


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) or "rackscale" for p in COMMANDS])
def test_every_command_help_has_examples(path: list[str]) -> None:
    code, out, _ = invoke(*path, "--help")
    assert code == 0
    assert re.search(r"(?m)^\s*Examples?:", out), f"`rackscale {' '.join(path)} --help` has no Examples section"
    assert re.search(rf"(?m)^\s+rackscale {re.escape(' '.join(path))}", out) or (
        f"Example: rackscale {' '.join(path)}" in out
    ), out


@pytest.mark.parametrize("verb", ["schedule", "serve"])
def test_help_lists_the_profiles_of_the_registry(verb: str) -> None:
    _, out, _ = invoke(verb, "--help")
    assert "Profiles (--policy):" in out and "see `rackscale schedule --help`" not in out
    for name, profile in PROFILES.items():
        assert profile.summary, f"profile {name!r} has no summary"
        assert re.search(rf"(?m)^\s+{re.escape(name)}\s+{re.escape(profile.summary)}\s*$", out), out
    assert "LeastAllocated" in out and "topology/tree" in out


def test_a_new_profile_shows_up_in_the_help(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PROFILES, "gold", Profile(name="gold", summary="a test profile"))

    def verb() -> None:
        """Do it.

        Profiles:

          {profiles}
        """

    doc = common.with_profiles(verb).__doc__ or ""
    assert any(re.fullmatch(r"\s+gold\s+a test profile", line) for line in doc.splitlines()), doc
    assert "{profiles}" not in doc


# ------------------------------------------------------------------------------------------ usage errors
BAD_VALUES = [
    (["schedule", "-f", "x.yaml", "--racks", "x"], "--racks must be a whole number (got 'x')"),
    (["schedule", "-f", "x.yaml", "--racks", "0"], "--racks must be at least 1 (got 0)"),
    (["schedule", "-f", "x.yaml", "-o", "xml"], "--output: 'xml' is not one of"),
    (["schedule"], "missing option '-f' / '--filename'"),
    (["simulate", "--racks=-3"], "--racks must be at least 1 (got -3)"),
    (["simulate", "--racks", "100000000000"], "--racks must be at most 14,563 (got 100,000,000,000)"),
    (["schedule", "-f", "x.yaml", "--racks", "20000"], "--racks must be at most 14,563 (got 20,000)"),
    (
        ["simulate", "--n-jobs", "1000000000"],
        "--n-jobs x --arrival-scale is 1e+09 synthetic jobs, more than 10,000,000",
    ),
    (["simulate", "--arrival-scale", "1e300"], "--n-jobs x --arrival-scale is 6e+302 synthetic jobs"),
    (["slurm", "topology", "--racks", "0"], "--racks must be at least 1 (got 0)"),
    (["slurm", "topology", "--racks", "two"], "--racks must be a whole number (got 'two')"),
    (["slurm", "topology", "--racks", "1", "--cluster", str(SEED_CLUSTER)], "either --cluster or --racks"),
    (["slurm", "compare", "--jobs", "0"], "--jobs must be at least 1 (got 0)"),
    (["serve", "--racks", "0"], "--racks must be at least 1 (got 0)"),
    (["serve", "--racks", "x"], "--racks must be a whole number (got 'x')"),
    (["serve", "--port", "70000"], "--port must be at most 65535 (got 70000)"),
    (["serve", "--speed", "0"], "--speed must be at least 0.001 (got 0)"),
    (["serve", "--policy", "fastest"], "unknown policy 'fastest'; choose one of: rackscale, first-fit"),
    (["simulate", "--json", "-o", "yaml"], "--json means -o json, and -o yaml was given too"),
    (["perf", "serve", "-m", "llama-3.1-8b", "-g", "h100", "--json", "-o", "yaml"], "--json means -o json"),
    (["compare-arch", "--json", "-o", "yaml"], "--json means -o json, and -o yaml was given too"),
    (["simulate", "--json", "-o", "table"], "--json means -o json, and -o table was given too"),
    (["perf", "serve", "-m", "llama-3.1-8b", "-g", "h100", "--json", "-o", "table"], "and -o table was given too"),
    (["perf", "train", "-m", "llama-3.1-8b", "-g", "h100", "-n", "8", "--json", "-o", "table"], "-o table was given"),
    (["compare-arch", "--json", "-o", "table"], "--json means -o json, and -o table was given too"),
    (["bench", "placement", "--gpus", "100000000000"], "--gpus must be at most 1048536 (got 100000000000)"),
    (["bench", "placement", "--pending", "100000000"], "--pending must be at most 1000000"),
    (["bench", "service", "--racks", "99999999"], "--racks must be at most 14563 (got 99999999)"),
    (["simulate", "--trace", "philly:x.csv", "--n-jobs", "5"], "--n-jobs is for the embedded synthetic mix"),
    (["simulate", "--jobs", "x.yaml", "--elastic-share", "0.5"], "--elastic-share is for the embedded synthetic mix"),
    (["simulate", "--gpu-scale", "2"], "--gpu-scale is for a --trace, which is not given"),
    (["simulate", "--jobs", "x.yaml", "--tenant-map", "a=b"], "--tenant-map is for a --trace, which is not given"),
    (["simulate", "--duration", "1e300"], "--duration must be at most 1000000 (got 1e300)"),
    (["validate"], "missing argument 'FILE...'"),
    (["validate", "--strict", "x.yaml"], "no such option: --strict"),
    (["cancel"], "missing argument 'NAME...'"),
    (["no-such-verb"], "no such command 'no-such-verb'"),
]


@pytest.mark.parametrize(("args", "says"), BAD_VALUES, ids=[" ".join(a) for a, _ in BAD_VALUES])
def test_a_bad_option_is_one_error_line(args: list[str], says: str) -> None:
    code, out, err = invoke(*args)
    assert code == 2 and out == ""
    line = one_line(err)
    assert line.startswith("error: ") and says in line, line
    assert "╭" not in err and "Usage:" not in err


def test_usage_errors_name_the_help_of_their_verb() -> None:
    _, _, err = invoke("slurm", "compare", "--jobs", "0")
    assert one_line(err).endswith("; see rackscale slurm compare --help")


# ------------------------------------------------------------------------------------------ slurm topology
def test_slurm_topology_takes_racks_like_the_other_verbs() -> None:
    code, out, _ = invoke("slurm", "topology", "--racks", "2")
    assert code == 0
    assert "SwitchName=r000 " in out and "SwitchName=r001 " in out and "r002" not in out
    from rackscale.slurm.topology import topology_conf

    assert out == topology_conf(GPUCluster.uniform(name="nvl72-x2", racks_per_region=2), "tree")
    default = invoke("slurm", "topology")[1]
    assert default == topology_conf(common.resolve_cluster(None, None), "tree")  # 4 racks, as simulate's
    assert invoke("slurm", "topology", "-c", str(SEED_CLUSTER))[1] == topology_conf(load_cluster(SEED_CLUSTER), "tree")


# ------------------------------------------------------------------------------------------ cancel
def test_cancelling_twice_says_the_job_had_already_ended(service: LiveService) -> None:
    submit_api(service, job_doc("twice"))
    wait_status(service, "twice", "running")
    code, out, err = rs(service, "cancel", "twice")
    assert (code, out, err) == (0, "job/twice cancelled\n", "")
    code, out, err = rs(service, "cancel", "twice")
    assert code == 1 and out == ""
    assert re.fullmatch(r"error: job/twice had already ended \(cancelled \d+\w* ago\): nothing to cancel\n", err), err
    code, out, err = rs(service, "cancel", "twice", "--ignore-ended")
    assert code == 0 and err == "" and out.startswith("job/twice had already ended (cancelled ")


def test_cancel_tells_cancelled_from_ended_jobs_in_one_call(service: LiveService) -> None:
    submit_api(service, job_doc("long"), job_doc("short", duration=1))
    wait_status(service, "long", "running")
    wait_status(service, "short", "completed")
    code, out, err = rs(service, "cancel", "long", "short", "ghost")
    assert code == 1
    assert out == "job/long cancelled\n"
    lines = err.splitlines()
    assert re.fullmatch(r"error: job/short had already ended \(completed \d+\w* ago\): nothing to cancel", lines[0])
    assert lines[1] == "error: job/ghost: no job named 'ghost'"
    assert lines[2] == "error: 2 of 3 job(s) not cancelled (1 had already ended, 1 failed)"
    _, help_text, _ = invoke("cancel", "--help")
    assert "had already ended" in help_text and "--ignore-ended" in help_text and "scancel" in help_text


def test_slurm_import_warns_of_a_gpu_model_the_spec_would_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    from rackscale.slurm import importer

    def fake(slurm: object, *, name: str, gpu_model: str | None) -> GPUCluster:
        return GPUCluster.uniform(name=name, racks_per_region=1, nodes_per_rack=2, gpu_model=gpu_model or "GB200")

    monkeypatch.setattr(importer, "import_cluster", fake)
    code, out, err = invoke("slurm", "import", "--gpu-model", "H100")
    assert code == 0 and "gpuType: H100" in out and err == ""
    code, out, err = invoke("slurm", "import", "--gpu-model", "TESLA")
    assert code == 0 and "gpuType: TESLA" in out
    assert "warning: GPU model 'TESLA' is not one rackscale knows" in " ".join(err.split())


def test_the_benchmarks_bound_their_clusters_as_the_specs_do() -> None:
    from rackscale.cli.bench import MAX_BENCH_GPUS
    from rackscale.sweep.spec import MAX_RACKS

    assert MAX_BENCH_GPUS == MAX_RACKS * 72
