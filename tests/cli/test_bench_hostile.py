"""Hostile input to ``rackscale bench ...`` and ``rackscale slurm compare|topology``: a bad value is one
``error:`` line that names the option and the fix (exit 2), found before any work is sized, any benchmark
process or server is started and any Slurm runs; never a traceback, a hang or a run sized by a typo."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rackscale.cli.app import app

runner = CliRunner()
HUGE = "1" + "0" * 30  # past every bound, and past a C long


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert "Traceback" not in result.output, result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0]


# ------------------------------------------------------------------------------------------ slurm compare
@pytest.fixture
def no_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any Slurm started, or any emulated cluster built, fails the test (nothing runs for real)."""
    from rackscale.model.topology import GPUCluster
    from rackscale.slurm import block, emulated

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the emulated cluster was built (or a Slurm started) before the bounds were checked")

    monkeypatch.setattr(emulated, "running", refuse)
    monkeypatch.setattr(block, "running", refuse)
    monkeypatch.setattr(GPUCluster, "uniform", refuse)


SLURM_COMPARE = [
    (["--racks", "1000000000"], "--racks x --rack-nodes is 4,000,000,000 nodes"),
    (["--racks", "20000", "--rack-nodes", "18"], "more than the 262,144 a cluster spec may hold"),
    (["--node-gpus", "1000000000"], "--node-gpus must be at most 64"),
    (["--rack-nodes", HUGE], "--rack-nodes must be at most 1,024"),
    (["--jobs", "1000000000000"], "--jobs must be at most 10,000,000"),
    (["--spread", "inf"], "--spread must be at most 315,576,000 s"),
    (["--spread", "1e308"], "--spread must be at most 315,576,000 s"),
    (["--spread", "nan"], "--spread must be at least 0"),
    (["--engine", "block", "--node-gpus", "65"], "--node-gpus must be at most 64"),
    (["--engine", "TREE"], "--engine must be tree or block"),
    (["--engine", ""], "--engine must be tree or block"),
]


@pytest.mark.usefixtures("no_slurm")
@pytest.mark.parametrize(("args", "says"), SLURM_COMPARE, ids=[" ".join(a) for a, _ in SLURM_COMPARE])
def test_slurm_compare_refuses_a_typo_before_any_slurm_starts(args: list[str], says: str) -> None:
    code, out, err = invoke("slurm", "compare", *args)
    assert code == 2 and out == ""
    assert says in one_error_line(err), err


# ------------------------------------------------------------------------------------------ slurm -o FILE
def _fake_import(monkeypatch: pytest.MonkeyPatch) -> None:
    from rackscale.model.topology import GPUCluster
    from rackscale.slurm import importer

    def fake(_slurm: object, *, name: str, gpu_model: str | None) -> GPUCluster:
        return GPUCluster.uniform(name=name, racks_per_region=1, nodes_per_rack=2, gpu_model=gpu_model or "GB200")

    monkeypatch.setattr(importer, "import_cluster", fake)


BAD_OUTPUTS = [
    ("{tmp}", "--output {tmp} is a directory: give a file path"),
    ("", "--output . is a directory: give a file path"),
    (
        "{tmp}/no-such-folder/topology.conf",
        "(No such file or directory): give a path in a writable folder",
    ),
    ("/dev/full", "--output /dev/full: cannot write it (No space left on device)"),
]


VERBS = [["slurm", "topology", "--racks", "1"], ["slurm", "import"]]


@pytest.mark.parametrize("verb", VERBS, ids=["topology", "import"])
@pytest.mark.parametrize(("path", "says"), BAD_OUTPUTS, ids=["directory", "empty", "no-folder", "dev-full"])
def test_slurm_output_that_cannot_be_written_is_one_line(
    verb: list[str], path: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if path == "/dev/full" and not os.path.exists(path):
        pytest.skip("no /dev/full here")
    _fake_import(monkeypatch)
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke(*verb, "-o", path.format(tmp=tmp_path))
    assert code == 2 and out == ""
    assert says.format(tmp=tmp_path) in one_error_line(err), err


def test_slurm_output_is_replaced_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=kept Nodes=n[0-1]\n")
    real = Path.write_text

    def disk_full(self: Path, data: str, *args: object, **kwargs: object) -> int:
        real(self, data[: len(data) // 2])  # half of it reaches the disk, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_text", disk_full)
    code, _, err = invoke("slurm", "topology", "--racks", "2", "-o", str(conf))
    monkeypatch.undo()
    assert code == 2 and "cannot write it (No space left on device)" in one_error_line(err)
    assert conf.read_text() == "SwitchName=kept Nodes=n[0-1]\n"  # the file Slurm reads is as it was
    assert [p.name for p in tmp_path.iterdir()] == ["topology.conf"]  # no temporary file left behind
    code, _, err = invoke("slurm", "topology", "--racks", "2", "-o", str(conf))
    assert code == 0 and err == f"wrote {conf}\n" and "SwitchName=r001 " in conf.read_text()


# ------------------------------------------------------------------------------------------ bench --philly
@pytest.fixture
def no_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A benchmark run started, or a trace read from something other than a regular file (a device is read
    until memory runs out, a pipe without a writer for ever), fails the test instead."""
    from rackscale import bench
    from rackscale.bench import simulate
    from rackscale.workloads import trace_rows

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a benchmark run started on a bad --philly")

    real = trace_rows.read_text

    def regular_only(path: str | os.PathLike[str], what: str) -> tuple[str, str]:
        if not os.path.isfile(path):
            raise AssertionError(f"{path} was read as a trace")
        return real(path, what)

    monkeypatch.setattr(bench, "run_isolated", refuse)
    monkeypatch.setattr(simulate, "run_isolated", refuse)
    monkeypatch.setattr(trace_rows, "read_text", regular_only)


def _philly(tmp_path: Path, kind: str) -> str:
    p = tmp_path / "philly.csv"
    if kind == "folder":
        return str(tmp_path)
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "empty":
        p.write_text("")
    elif kind == "latin-1":
        p.write_bytes(b"timestamp,duration,num_gpus,cluster\n2017-10-03 00:00:00,60,1,caf\xe9\n")
    elif kind == "no-header":
        p.write_text("2017-10-03 00:00:00,60,1,a\n")
    else:
        return kind  # a path as it is
    return str(p)


BAD_PHILLY = [
    ("folder", "not a regular file (a folder, a device or a pipe)"),
    ("/dev/zero", "/dev/zero: not a regular file"),
    ("fifo", "not a regular file"),
    ("empty", "empty file: no header line"),
    ("latin-1", "not UTF-8 text"),
    ("no-header", "the header lacks the columns"),
]


@pytest.mark.usefixtures("no_runs")
@pytest.mark.parametrize("verb", [["simulate", "--scenario", "philly-speed"], ["predict"]], ids=["simulate", "predict"])
@pytest.mark.parametrize(("kind", "says"), BAD_PHILLY, ids=[k for k, _ in BAD_PHILLY])
def test_a_bad_philly_trace_is_one_line_before_any_run(verb: list[str], kind: str, says: str, tmp_path: Path) -> None:
    code, out, err = invoke("bench", *verb, "--philly", _philly(tmp_path, kind))
    assert code == 2 and out == ""
    assert says in one_error_line(err), err
    assert err.startswith("error: ")  # no progress bar's blank line before it


# ------------------------------------------------------------------------------------------ bench service
@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """A served process started (or a load sized) before the options were checked fails the test."""
    from rackscale.bench import service, service_scale

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the benchmark started before its options were checked")

    monkeypatch.setattr(service, "run_service_benchmark", refuse)
    monkeypatch.setattr(service_scale, "run_scale_benchmark", refuse)


BENCH_SERVICE = [
    (["--jobs", "1000000000000"], "--jobs must be at most 10000000"),
    (["--backlog", HUGE], "--backlog must be at most 10000000"),
    (["--concurrency", "1000000000"], "--concurrency must be at most 1024"),
    (["--workers", "1000000"], "--workers must be at most 64"),
    (["--speed", "0"], "--speed must be at least 0.001"),
    (["--speed", "-1"], "--speed must be at least 0.001"),
    (["--speed", "nan"], "--speed must be at least 0.001"),
    (["--speed", "inf"], "--speed must be a finite number (got inf)"),
    (["--rate", "inf"], "--rate must be a finite number (got inf)"),
    (["--duration-limit", "inf"], "--duration-limit must be at most 315576000"),
    (["--duration-limit", "1e308"], "--duration-limit must be at most 315576000"),
    (["--backlog", "10", "--list-every", "inf"], "--list-every must be a finite number (got inf)"),
    (["-o", "xml"], "--output: 'xml' is not one of 'table', 'json', 'yaml'"),
    (["--json", "-o", "yaml"], "--json means -o json, and -o yaml was given too"),
    (["--durability", "FULL"], "--durability must be normal or full (got 'FULL')"),
    (["--durability", ""], "--durability must be normal or full (got '')"),
    (["--backlog", "10", "--crash-after", "5"], "--crash-after is for the load mode; --backlog measures the scale"),
    (["--backlog", "10", "--jobs", "5"], "--jobs is for the load mode"),
    (["--backlog", "10", "--durability", "full"], "--durability is for the load mode"),
    (["--page-loads", "0"], "--page-loads is for the scale mode: give --backlog N too, or drop it"),
    (["--cycle-max-busy", "0.5"], "--cycle-max-busy is for the scale mode"),
]


@pytest.mark.usefixtures("no_server")
@pytest.mark.parametrize(("args", "says"), BENCH_SERVICE, ids=[" ".join(a)[:40] for a, _ in BENCH_SERVICE])
def test_bench_service_refuses_a_typo_before_any_server_starts(args: list[str], says: str) -> None:
    code, out, err = invoke("bench", "service", *args)
    assert code == 2 and out == ""
    assert says in one_error_line(err), err


# ------------------------------------------------------------------------------------------ bench perf-peer
PERF_PEER = [
    (["--venv", ""], "--venv is empty: give the peer's virtualenv folder"),
    (["--venv", "  ", "--install"], "--venv is empty"),
    (["--venv", "/dev/zero", "--install"], "cannot make a virtualenv at /dev/zero (--venv)"),
    (["--venv", "{tmp}/missing"], "make the venv with --install (about 850 MB), or give --venv PATH"),
]


@pytest.mark.parametrize(("args", "says"), PERF_PEER, ids=[" ".join(a) for a, _ in PERF_PEER])
def test_bench_perf_peer_venv_is_checked_in_one_line(args: list[str], says: str, tmp_path: Path) -> None:
    code, out, err = invoke("bench", "perf-peer", *(a.format(tmp=tmp_path) for a in args))
    assert code == 2 and out == ""
    said = "".join(line for line in err.splitlines(keepends=True) if not line.startswith("creating a virtualenv"))
    assert says in one_error_line(said), err


@pytest.mark.parametrize(
    ("target", "says"),
    [("killed", "was killed by signal 9"), ("raises", "exited with code 1")],
    ids=["killed-by-a-signal", "a-traceback-in-the-run"],
)
def test_a_run_whose_process_dies_is_a_bench_run_error(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], target: str, says: str
) -> None:
    """A real child process that ends without its result: the error says how, and where its own error is."""
    from rackscale.bench import BenchRunError, run_isolated

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))  # the child imports tests.bench
    with pytest.raises(BenchRunError, match=says) as got:
        run_isolated(f"tests.bench.crashing:{target}", {}, progress=lambda values: None)
    assert f"({target})" in str(got.value) and "above" in str(got.value)
    if target == "raises":
        assert "MemoryError" in capfd.readouterr().err  # the child's own traceback, on stderr


@pytest.mark.parametrize(
    ("verb", "runner"),
    [
        (["placement", "--gpus", "720"], "rackscale.cli.bench.run_benchmark"),
        (["simulate", "--scenario", "synthetic"], "rackscale.bench.simulate.run_simulation_benchmark"),
    ],
    ids=["placement", "simulate"],
)
def test_a_run_whose_process_dies_is_one_error_line(
    monkeypatch: pytest.MonkeyPatch, verb: list[str], runner: str
) -> None:
    """The verb's side: one line and exit 2, not the parent's RuntimeError traceback."""
    from rackscale.bench import BenchRunError

    def dies(**_: Any) -> Any:
        raise BenchRunError(target="rackscale.bench.simulate:run_one", returncode=-9)

    monkeypatch.setattr(runner, dies)  # where the verb reads it
    code, out, err = invoke("bench", *verb)
    assert code == 2 and out == ""
    assert "run_one) was killed by signal 9" in one_error_line(err)
