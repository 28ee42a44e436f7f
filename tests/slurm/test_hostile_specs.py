"""A tenant's job spec against the real Slurm of the fixture: what reaches ``sbatch`` and the job's shell is
exactly what rackscale placed (docs/security.md, "Jobs of the slurm backend")."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from tests.service.conftest import wait_for
from tests.slurm.conftest import SPEC

from rackscale.backends.base import Exit
from rackscale.backends.slurm import MAX_STEM, SlurmBackend, file_stem
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.workload import batch
from rackscale.slurm.commands import parse_oneliner
from rackscale.slurm.emulated import EmulatedSlurm

TIMEOUT = 30.0
PRINT = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('V')]))"


def placement(job: str) -> Placement:
    return Placement(job, (NodeAlloc(0, (0, 1, 2, 3)),), 1)


def run_to_end(backend: SlurmBackend, job: str) -> Exit:
    def ended() -> Exit | None:
        return next((e for e in backend.poll(time.monotonic()) if e.job == job), None)

    got = wait_for(ended, timeout=TIMEOUT, what=f"{job} to end")
    assert isinstance(got, Exit)
    return got


HOSTILE = {
    "semicolon": "x; touch /tmp/rs-pwned",
    "command-substitution": "$(touch /tmp/rs-pwned)",
    "backticks": "`touch /tmp/rs-pwned`",
    "newline-sbatch-directive": "x\n#SBATCH --partition=debug\n#SBATCH --chdir=/\ntouch /tmp/rs-pwned",
    "option-lookalike": "--partition=debug",
    "single-quote": "it's '; touch /tmp/rs-pwned; '",
    "non-ascii": "ünïcödé ✓ 日本",
    "long": "y" * 32 * 1024,
}


@pytest.mark.parametrize("value", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_word_or_env_value_reaches_the_command_verbatim_and_changes_no_option(
    slurm: EmulatedSlurm, tmp_path: Path, value: str
) -> None:
    backend = SlurmBackend(slurm.slurm, SPEC, tmp_path, poll_interval_s=0)
    spec = batch("hostile", gpus=4, command=(sys.executable, "-c", PRINT, value), env=(("V", value),))
    backend.start(spec, placement("hostile"), now=0.0)
    job_id = backend._jobs["hostile"]
    assert run_to_end(backend, "hostile").ok
    out = (tmp_path / "slurm" / "hostile.out").read_text()
    assert json.loads(out) == [[value], value]
    rec = parse_oneliner(slurm.slurm.run(["scontrol", "show", "job", job_id, "--oneliner"]).stdout)
    assert (rec["JobName"], rec["Partition"], rec["NodeList"]) == ("rs-hostile", "gpu", "r000-n00")
    assert (rec["WorkDir"], rec["StdOut"]) == (str(tmp_path / "slurm"), str(tmp_path / "slurm" / "hostile.out"))
    assert not Path("/tmp/rs-pwned").exists()


@pytest.mark.parametrize("length", [MAX_STEM, 248, 252, 253], ids=lambda n: f"name-of-{n}")
def test_a_long_name_is_submitted_tracked_and_found_by_its_id_file(
    slurm: EmulatedSlurm, tmp_path: Path, length: int
) -> None:
    # 248 and longer: ".<name>.id.tmp" was past NAME_MAX after sbatch (the Slurm job ran on, untracked);
    # 252: "<name>.out" was (Slurm could not open it); 253: "<name>.sh" was (sbatch never ran).
    name = "j" * length
    backend = SlurmBackend(slurm.slurm, SPEC, tmp_path, poll_interval_s=0)
    backend.start(batch(name, gpus=4, command=("echo", "ran")), placement(name), now=0.0)
    assert backend._read_id(name) == backend._jobs[name]
    sj = slurm.slurm.job(backend._jobs[name])
    assert sj is not None and sj.name == "rs-" + name  # adoption by name still works
    assert run_to_end(backend, name).ok
    assert backend.out_path(name).read_text() == "ran\n"
    assert all(len(p.name) <= 255 for p in (tmp_path / "slurm").iterdir())


def test_long_names_that_differ_only_at_the_end_get_different_files() -> None:
    a, b = "a" * 252 + "b", "a" * 252 + "c"
    assert file_stem(a) != file_stem(b) and len(file_stem(a)) == MAX_STEM
    assert file_stem("short") == "short" and file_stem("x" * MAX_STEM) == "x" * MAX_STEM


SHOW_ENV = "import json, os; print(json.dumps(dict(os.environ)))"


@pytest.mark.parametrize(
    ("service_var", "kept"),
    [
        ("RS_SERVICE_SECRET", False),
        ("DATABASE_URL", False),
        ("SLURM_OPS_TOKEN", False),
        ("LANG", True),
        ("SBATCH_TIMELIMIT", True),
    ],
    ids=["secret", "database-url", "slurm-var-of-the-service", "lang", "sbatch-input-variable"],
)
def test_the_services_environment_does_not_reach_the_job(
    slurm: EmulatedSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, service_var: str, kept: bool
) -> None:
    value = "60" if service_var == "SBATCH_TIMELIMIT" else "C.UTF-8" if service_var == "LANG" else "hunter2-999"
    monkeypatch.setenv(service_var, value)
    backend = SlurmBackend(slurm.slurm, SPEC, tmp_path, poll_interval_s=0)
    spec = batch("envjob", gpus=4, command=(sys.executable, "-c", SHOW_ENV), env=(("MINE", "tenant's"),))
    backend.start(spec, placement("envjob"), now=0.0)
    assert run_to_end(backend, "envjob").ok
    env = json.loads((tmp_path / "slurm" / "envjob.out").read_text())
    assert (env.get(service_var) == value) is kept
    assert env["MINE"] == "tenant's" and env["PATH"] and env["SLURM_JOB_NAME"] == "rs-envjob"
