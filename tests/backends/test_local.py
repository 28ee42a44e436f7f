"""The local backend with real processes (no mocks): GPUs by CUDA_VISIBLE_DEVICES, logs, exit codes, argv
without a shell, stopping a process group, adopting jobs after a restart, and one job through the service.

Every wait is bounded (``until``); a job that should run "a while" waits for a file the test writes, so no
test depends on how fast the machine is.

These jobs run as the test's own user (``run_as`` it, ``allow_root_jobs`` when that is root), so that their
commands may be this interpreter (``sys.executable``, which an unprivileged user may not reach); running as
an unprivileged user, the environment, the wrapper's isolation and the log cap are in
``test_local_isolation.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.service.conftest import wait_for

from rackscale.backends.base import Exit, RunningJobRecord
from rackscale.backends.local import (
    DEFAULT_GRACE_S,
    LOST,
    NO_COMMAND,
    LocalBackend,
    LocalBackendError,
    _is_our_wrapper,
    discover_gpus,
    local_cluster,
    make_local_backend,
)
from rackscale.backends.local_backend import MAX_JOB_NAME
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobSpec, batch

PY = sys.executable
TIMEOUT = 15.0
ME = pwd.getpwuid(os.geteuid()).pw_name
AS_ME: dict[str, object] = {"run_as": ME, "allow_root_jobs": True}


def local(data: Path, gpus: list[int], *, grace_s: float = DEFAULT_GRACE_S) -> LocalBackend:
    """A backend whose jobs run as the test's own user."""
    return LocalBackend(data, gpus, grace_s=grace_s, run_as=ME, allow_root_jobs=True)


def until(pred: Callable[[], object], *, timeout: float = TIMEOUT, what: str = "condition") -> object:
    return wait_for(pred, timeout=timeout, what=what)


def job(name: str, *command: str, env: dict[str, str] | None = None) -> JobSpec:
    return batch(name, gpus=1, command=tuple(command), env=tuple((env or {}).items()))


def on(name: str, *slots: int, milli: int = 1000) -> Placement:
    return Placement(name, (NodeAlloc(0, tuple(slots), milli),), 1)


def py(code: str) -> tuple[str, ...]:
    return (PY, "-c", code)


def exit_of(b: LocalBackend, name: str, *, timeout: float = TIMEOUT) -> Exit:
    """Poll until ``name`` exits; no other job may exit meanwhile."""
    seen: list[Exit] = []

    def check() -> Exit | None:
        seen.extend(b.poll(time.monotonic()))
        return next((e for e in seen if e.job == name), None)

    e = until(check, timeout=timeout, what=f"{name} to exit")
    assert isinstance(e, Exit)
    assert [x.job for x in seen] == [name], seen
    return e


def gone(pid: int) -> bool:
    """No such process, or a zombie (dead, waiting for whoever reaps orphans here)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone before, or while, it was read
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


def wait_file(path: Path) -> str:
    until(lambda: read(path), what=f"{path.name} to be written")
    return read(path)


@pytest.fixture
def data(tmp_path: Path) -> Iterator[Path]:
    """The data directory. Afterwards, jobs a failed test left running (the service leaves its jobs running
    when it stops, by design) are killed: every wrapper named in run/*.pid."""
    d = tmp_path / "data"
    yield d
    for pid_file in (d / "run").glob("*.pid"):
        pid = read(pid_file)
        if pid.isdigit() and _is_our_wrapper(int(pid), pid_file.with_suffix(".exit")):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pid), signal.SIGKILL)


@pytest.fixture
def backend(data: Path) -> Iterator[LocalBackend]:
    b = local(data, [2, 3], grace_s=5.0)
    yield b
    for name in list(b.running()):
        b.stop(name, now=0.0)
    until(lambda: (b.poll(0.0), not b._stopping)[1], what="the test's processes to be gone")


# A job that runs until the test creates `go` in its working directory, then exits with argv[1].
WAIT_FOR_GO = "import os,sys,time\nwhile not os.path.exists('go'): time.sleep(0.02)\nsys.exit(int(sys.argv[1]))"


# ---------------------------------------------------------------------- GPUs, environment, logs, exits
def test_cuda_visible_devices_is_the_physical_gpus_of_the_placement(backend: LocalBackend) -> None:
    keys = "('CUDA_VISIBLE_DEVICES', 'RACKSCALE_JOB', 'FOO')"
    code = f"import os; open('env', 'w').write(' '.join(os.environ[k] for k in {keys}))"
    cases = {"slot1": on("slot1", 1), "both": on("both", 0, 1), "share": on("share", 0, milli=500)}
    for name, placement in cases.items():
        backend.start(job(name, *py(code), env={"FOO": "bar baz", "CUDA_VISIBLE_DEVICES": "9"}), placement, now=0)
        assert exit_of(backend, name).ok
    work = backend.work_dir
    assert (work / "slot1" / "env").read_text() == "3 slot1 bar baz"  # --gpus 2,3: slot 1 is GPU 3
    assert (work / "both" / "env").read_text() == "2,3 both bar baz"
    assert (work / "share" / "env").read_text() == "2 share bar baz"  # a shared slice sees its GPU too


def test_stdout_and_stderr_land_in_the_log(backend: LocalBackend) -> None:
    backend.start(
        job("talk", *py("import sys; print('to stdout'); print('to stderr', file=sys.stderr)")), on("talk", 0), now=0
    )
    assert exit_of(backend, "talk").ok
    lines = backend.log_path("talk").read_text().splitlines()
    assert sorted(lines) == ["to stderr", "to stdout"]


def test_exit_0_completes_and_a_nonzero_exit_fails_with_its_code_and_last_log_line(backend: LocalBackend) -> None:
    backend.start(job("good", *py("pass")), on("good", 0), now=0)
    assert exit_of(backend, "good") == Exit("good", True, 0, "exit code 0")
    backend.start(
        job("bad", *py("import sys; print('step 1'); print('boom: out of memory'); sys.exit(3)")), on("bad", 1), now=0
    )
    e = exit_of(backend, "bad")
    assert (e.ok, e.exit_code) == (False, 3)
    assert e.reason == "exit code 3: boom: out of memory"


def test_a_job_killed_by_a_signal_says_which(backend: LocalBackend) -> None:
    backend.start(job("sig", *py("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")), on("sig", 0), now=0)
    e = exit_of(backend, "sig")
    assert (e.ok, e.exit_code) == (False, 128 + signal.SIGKILL)
    assert e.reason.startswith("killed by signal SIGKILL")


def test_a_sigterm_from_outside_is_recorded_as_the_jobs_end(backend: LocalBackend) -> None:
    """Someone else signals the job's group (not a stop): the wrapper outlives it and records how it ended."""
    code = "import time; open('ready', 'w').write('1'); time.sleep(120)"
    backend.start(job("termed", *py(code)), on("termed", 0), now=0)
    wait_file(backend.work_dir / "termed" / "ready")
    os.killpg(backend._runs["termed"].pid, signal.SIGTERM)
    e = exit_of(backend, "termed")
    assert (e.ok, e.exit_code, e.reason) == (False, 128 + signal.SIGTERM, "killed by signal SIGTERM")


def test_argv_is_passed_literally_with_no_shell(backend: LocalBackend) -> None:
    args = ["a; rm -rf x", "$HOME", "*", "'quoted' \"twice\"", "$(touch pwned)", "back`tick`", ""]
    code = "import json, sys; open('argv.json','w').write(json.dumps(sys.argv[1:]))"
    backend.start(job("argv", *py(code), *args), on("argv", 0), now=0)
    assert exit_of(backend, "argv").ok
    work = backend.work_dir / "argv"
    assert json.loads((work / "argv.json").read_text()) == args  # each one argv element, unexpanded
    assert not (work / "pwned").exists()


def test_a_command_that_cannot_run_fails_with_127_and_says_why(backend: LocalBackend) -> None:
    backend.start(job("nope", "/no/such/program", "x"), on("nope", 0), now=0)
    e = exit_of(backend, "nope")
    assert (e.ok, e.exit_code) == (False, 127)
    assert "cannot run '/no/such/program'" in e.reason


def test_a_job_without_a_command_fails_at_once_with_the_reason(backend: LocalBackend) -> None:
    backend.start(job("empty"), on("empty", 0), now=0)
    assert backend.poll(0.0) == [Exit("empty", False, None, NO_COMMAND)]
    assert backend.running() == frozenset()


# ---------------------------------------------------------------------- stop
def test_stop_kills_the_whole_process_group_and_reports_no_exit(backend: LocalBackend) -> None:
    code = (
        "import subprocess, sys, time\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "open('pids.tmp','w').write(f'{__import__(\"os\").getpid()} {g.pid}')\n"
        "__import__('os').replace('pids.tmp', 'pids')\n"
        "time.sleep(120)"
    )
    backend.start(job("tree", *py(code)), on("tree", 0), now=0)
    child, grandchild = map(int, wait_file(backend.work_dir / "tree" / "pids").split())
    assert not gone(child) and not gone(grandchild)
    t0 = time.monotonic()
    backend.stop("tree", now=0)
    assert time.monotonic() - t0 < 1.0
    exits: list[Exit] = []

    def polled(done: Callable[[], bool]) -> Callable[[], bool]:
        def check() -> bool:
            exits.extend(backend.poll(0.0))
            return done()

        return check

    until(polled(lambda: gone(child) and gone(grandchild)), what="the group to die")
    until(polled(lambda: not backend._stopping), what="the stop to finish")
    assert exits == []  # a stopped job is not an exit
    assert not backend.pid_path("tree").exists() and not backend.exit_path("tree").exists()


def test_stop_escalates_to_sigkill_after_the_grace_period_without_blocking(data: Path) -> None:
    b = local(data, [0], grace_s=0.5)
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "open('ready', 'w').write('1')\n"
        "time.sleep(120)"
    )
    b.start(job("stubborn", *py(code)), on("stubborn", 0), now=0)
    wait_file(b.work_dir / "stubborn" / "ready")
    pid = b._runs["stubborn"].pid
    t0 = time.monotonic()
    b.stop("stubborn", now=0)
    assert time.monotonic() - t0 < 0.2  # the runner thread is not held for the grace period
    b.poll(0.0)
    assert not b._stopping[0].killed_at  # SIGTERM ignored, still inside its grace
    until(lambda: (b.poll(0.0), not b._stopping)[1], what="SIGKILL to end the group")
    assert time.monotonic() - t0 >= 0.5
    assert gone(pid)


# ---------------------------------------------------------------------- restart
def record(spec: JobSpec, placement: Placement) -> RunningJobRecord:
    return RunningJobRecord(spec, placement, 0.0)


def test_a_restarted_backend_adopts_a_running_job_and_one_that_ended_while_down(data: Path) -> None:
    b1 = local(data, [2, 3])
    long_job, short_job = job("long", *py(WAIT_FOR_GO), "5"), job("short", *py("print('done early')"))
    b1.start(long_job, on("long", 0), now=0)
    b1.start(short_job, on("short", 1), now=0)
    long_pid = b1._runs["long"].pid
    b1.close()  # the service goes down; its jobs keep running
    wait_file(data / "run" / "short.exit")  # "short" ends while the service is down

    b2 = local(data, [2, 3])
    exits = b2.adopt({"long": record(long_job, on("long", 0)), "short": record(short_job, on("short", 1))}, 1.0)
    assert exits == [Exit("short", True, 0, "exit code 0")]
    assert b2.running() == frozenset({"long"})
    assert b2.poll(2.0) == []
    assert not gone(long_pid)
    (b2.work_dir / "long" / "go").touch()
    e = exit_of(b2, "long")
    assert (e.ok, e.exit_code, e.reason) == (False, 5, "exit code 5")
    b2.poll(3.0)  # the exits are recorded by now: their run/ files go
    assert sorted(p.name for p in (data / "run").iterdir()) == []


def test_adopt_stops_what_the_store_does_not_call_running_and_reports_the_lost(data: Path) -> None:
    b1 = local(data, [0, 1])
    b1.start(job("stray", *py(WAIT_FOR_GO), "0"), on("stray", 0), now=0)
    stray_pid = b1._runs["stray"].pid
    b1.close()
    # "ghost": the store says running; its pid file names a process that is gone, and there is no exit file.
    dead = subprocess.Popen([PY, "-c", "pass"])
    dead.wait()
    (data / "run" / "ghost.pid").write_text(f"{dead.pid}\n")
    ghost = job("ghost", *py("pass"))

    b2 = local(data, [0, 1], grace_s=5.0)
    exits = b2.adopt({"ghost": record(ghost, on("ghost", 1))}, 1.0)
    assert exits == [Exit("ghost", False, None, LOST)]
    assert b2.running() == frozenset()
    until(lambda: (b2.poll(2.0), gone(stray_pid) and not b2._stopping)[1], what="the stray job to be stopped")
    assert not (data / "run" / "stray.pid").exists()


def test_adopt_starts_a_job_the_service_recorded_but_never_started(data: Path) -> None:
    b = local(data, [0])
    spec = job("late", *py("print('ran after all')"))
    assert b.adopt({"late": record(spec, on("late", 0))}, 1.0) == []
    assert exit_of(b, "late").ok
    assert b.log_path("late").read_text() == "ran after all\n"


# ---------------------------------------------------------------------- discovery
def test_no_gpus_found_or_declared_raises_with_the_hint() -> None:
    with pytest.raises(LocalBackendError) as err:
        discover_gpus({}, None, nvml=lambda: None)
    assert "--gpus 0,1" in str(err.value) and "nvidia-ml-py" in str(err.value)
    assert isinstance(err.value, ValueError)
    with pytest.raises(LocalBackendError, match="nvidia-ml-py"):
        discover_gpus({}, GPUCluster.uniform(racks_per_region=1, nodes_per_rack=2), nvml=lambda: None)
    with pytest.raises(LocalBackendError, match="not a GPU index"):
        discover_gpus({"gpus": ["x"]}, None, nvml=lambda: None)


def test_gpus_come_from_the_option_else_nvml_else_the_given_cluster() -> None:
    four_h200 = ["NVIDIA H200"] * 4
    assert discover_gpus({"gpus": [2, 3]}, None, nvml=lambda: None) == ((2, 3), "local")
    assert discover_gpus({"gpus": [3, 1]}, None, nvml=lambda: four_h200) == ((3, 1), "H200")
    assert discover_gpus({}, None, nvml=lambda: four_h200) == ((0, 1, 2, 3), "H200")
    one_node = GPUCluster.uniform(racks_per_region=1, nodes_per_rack=1, gpus_per_node=2, gpu_model="L4")
    assert discover_gpus({}, one_node, nvml=lambda: None) == ((0, 1), "L4")
    with pytest.raises(LocalBackendError, match="NVML sees 4 GPU"):
        discover_gpus({"gpus": [4]}, None, nvml=lambda: four_h200)


def test_the_cluster_is_one_node_named_after_the_host() -> None:
    import socket

    c = local_cluster(2, "H200")
    assert [(n.name, n.gpus, n.gpu_model) for n in c.nodes] == [(socket.gethostname(), 2, "H200")]
    assert len(c.racks) == 1 and c.total_gpus == 2


def test_make_local_backend_maps_slots_to_the_gpus_given(tmp_path: Path) -> None:
    b, cluster = make_local_backend(tmp_path / "data", None, {"gpus": [0], "stop_grace_s": 1, **AS_ME})
    assert (b.gpus, b.grace_s, cluster.total_gpus) == ((0,), 1.0, 1)
    assert (b.user.name, b.max_log_bytes) == (ME, 64 * 1024 * 1024)
    assert b.devices(on("x", 0)) == [0]


# ---------------------------------------------------------------------- through the service
def test_a_job_runs_through_the_service_on_the_local_backend(data: Path) -> None:
    pytest.importorskip("fastapi")
    from tests.service.conftest import serve_in_thread, wait_for

    from rackscale.service.app import ServiceConfig

    cfg = ServiceConfig(data_dir=data, backend="local", backend_options={"gpus": [0, 1], **AS_ME}, interval_s=0.01)
    with serve_in_thread(cfg) as live, live.client() as c:
        code = "import os;print(os.environ['CUDA_VISIBLE_DEVICES'])"
        r = c.post("/v1/jobs", json={"name": "hello", "kind": "batch", "gpus": 1, "command": [PY, "-c", code]})
        assert r.status_code in (200, 201, 202), r.text

        def done() -> dict[str, object] | None:
            got: dict[str, object] = c.get("/v1/jobs/hello").json()
            return got if got["status"] in ("completed", "failed") else None

        out = wait_for(done, timeout=TIMEOUT, what="hello to finish")
        assert isinstance(out, dict)
        assert (out["status"], out["exitCode"]) == ("completed", 0), out
        assert (data / "logs" / "hello.log").read_text().strip() in ("0", "1")


def test_a_job_survives_a_service_restart_and_reports_its_exit_code(data: Path) -> None:
    pytest.importorskip("fastapi")
    from tests.service.conftest import serve_in_thread, wait_for

    from rackscale.service.app import ServiceConfig

    cfg = ServiceConfig(data_dir=data, backend="local", backend_options={"gpus": [0], **AS_ME}, interval_s=0.01)
    body = {"name": "survivor", "kind": "batch", "gpus": 1, "command": [PY, "-c", WAIT_FOR_GO, "7"]}
    with serve_in_thread(cfg) as live, live.client() as c:
        assert c.post("/v1/jobs", json=body).status_code in (200, 201, 202)
        wait_for(lambda: c.get("/v1/jobs/survivor").json()["status"] == "running", timeout=TIMEOUT, what="running")
        wait_for(lambda: read(data / "run" / "survivor.pid"), timeout=TIMEOUT, what="its pid file")
    pid = int((data / "run" / "survivor.pid").read_text())
    assert not gone(pid)  # the service stopped; the job did not
    with serve_in_thread(cfg) as live, live.client() as c:
        assert c.get("/v1/jobs/survivor").json()["status"] == "running"
        (data / "work" / "survivor" / "go").touch()

        def ended() -> dict[str, object] | None:
            got: dict[str, object] = c.get("/v1/jobs/survivor").json()
            return got if got["status"] != "running" else None

        out = wait_for(ended, timeout=TIMEOUT, what="survivor to end")
        assert isinstance(out, dict)
        assert (out["status"], out["exitCode"]) == ("failed", 7), out
        assert (out["reason"], out["message"]) == ("BackendFailed", "exit code 7"), out


def test_cancelling_through_the_service_kills_the_process(data: Path) -> None:
    pytest.importorskip("fastapi")
    from tests.service.conftest import serve_in_thread, wait_for

    from rackscale.service.app import ServiceConfig

    cfg = ServiceConfig(data_dir=data, backend="local", backend_options={"gpus": [0], **AS_ME}, interval_s=0.01)
    body = {"name": "doomed", "kind": "batch", "gpus": 1, "command": [PY, "-c", WAIT_FOR_GO, "0"]}
    with serve_in_thread(cfg) as live, live.client() as c:
        assert c.post("/v1/jobs", json=body).status_code in (200, 201, 202)
        pid = int(str(wait_for(lambda: read(data / "run" / "doomed.pid"), timeout=TIMEOUT, what="its pid file")))
        assert c.delete("/v1/jobs/doomed").status_code in (200, 202, 204)
        wait_for(lambda: gone(pid), timeout=TIMEOUT, what="the process to be killed")
        wait_for(lambda: not (data / "run" / "doomed.pid").exists(), timeout=TIMEOUT, what="its pid file to go")
        assert c.get("/v1/jobs/doomed").json()["status"] == "cancelled"


def test_nvml_names_the_gpus_and_a_broken_nvml_counts_as_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """``nvml_gpu_names`` against a stand-in ``pynvml`` module (no GPU here): names by index (bytes from old
    versions decoded), shutdown always called; an NVML that cannot initialise means no NVML."""
    import types

    from rackscale.backends.local import nvml_gpu_names

    calls: list[str] = []
    fake = types.ModuleType("pynvml")
    fake.nvmlInit = lambda: calls.append("init")  # type: ignore[attr-defined]
    fake.nvmlShutdown = lambda: calls.append("shutdown")  # type: ignore[attr-defined]
    fake.nvmlDeviceGetCount = lambda: 2  # type: ignore[attr-defined]
    fake.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    fake.nvmlDeviceGetName = lambda h: [b"NVIDIA H200", "NVIDIA H200"][h]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert nvml_gpu_names() == ["NVIDIA H200", "NVIDIA H200"]
    assert calls == ["init", "shutdown"]

    def no_driver() -> None:
        raise RuntimeError("NVML Shared Library Not Found")

    fake.nvmlInit = no_driver  # type: ignore[attr-defined]
    assert nvml_gpu_names() is None


@pytest.mark.parametrize(
    ("length", "runs"),
    [(MAX_JOB_NAME, True), (MAX_JOB_NAME + 1, False), (253, False)],
    ids=["at-most", "one-more", "253"],
)
def test_a_name_too_long_for_the_files_is_refused_in_words(backend: LocalBackend, length: int, runs: bool) -> None:
    """The spec allows names of 253 characters; the job's files add up to 18 (``.<name>.exit.<pid>.tmp``).
    Past 237 the start failed with the OS's "File name too long" on a path; it now says why and the fix."""
    name = "a" * length
    backend.start(job(name, *py("pass")), on(name, 0), now=0)
    e = exit_of(backend, name)
    assert e.ok is runs, e.reason
    if not runs:
        assert f"give it a name of at most {MAX_JOB_NAME} characters" in e.reason
        assert "Errno" not in e.reason and not list(backend.run_dir.iterdir())
