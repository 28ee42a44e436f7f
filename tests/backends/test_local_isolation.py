"""The local backend keeps tenants' jobs away from the service, with real processes (no mocks).

A job runs as an unprivileged user (``nobody`` here) when the service is root, cannot read the data dir's
files, gets an environment of its own (not the service's), cannot reach the wrapper through its ``env``, and
its log is capped. A job's bad argv or env is a failed exit, never an exception out of ``start``.

CI runs as root, so the user switch is exercised for real; the tests that need it are skipped elsewhere.
The data dir lives in a directory every user may pass through (pytest's ``tmp_path`` is under a 0700 one),
and job commands are ``/bin/sh`` and ``/usr/bin/python3``: ``nobody`` cannot execute this venv's Python,
which lives under ``/root`` (0700). The wrapper itself still runs with ``sys.executable``, as root.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.backends.test_local import exit_of, gone, job, on, read, until

from rackscale.backends.base import Exit, RunningJobRecord
from rackscale.backends.local import (
    DEFAULT_JOB_USERS,
    ROOT_REFUSED,
    LocalBackend,
    LocalBackendError,
    _is_our_wrapper,
    make_local_backend,
    resolve_run_as,
)
from rackscale.backends.local_run import DRAIN_S

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="switching to another user needs root (CI runs as root)")
SYS_PY = "/usr/bin/python3"
needs_sys_py = pytest.mark.skipif(not os.access(SYS_PY, os.X_OK), reason=f"needs {SYS_PY}")
CAP = 64 * 1024


def default_job_user() -> pwd.struct_passwd:
    for name in DEFAULT_JOB_USERS:
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    pytest.skip("neither rackscale-job nor nobody exists")


def kill_wrappers(data: Path) -> None:
    for pid_file in (data / "run").glob("*.pid"):
        pid = read(pid_file)
        if pid.isdigit() and _is_our_wrapper(int(pid), pid_file.with_suffix(".exit")):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pid), signal.SIGKILL)


@pytest.fixture
def data() -> Iterator[Path]:
    """The data dir, inside a directory every user may search (mode 0711)."""
    top = Path(tempfile.mkdtemp(prefix="rackscale-iso-", dir="/tmp" if Path("/tmp").is_dir() else None))
    os.chmod(top, 0o711)
    d = top / "data"
    yield d
    kill_wrappers(d)
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def backend(data: Path) -> Iterator[LocalBackend]:
    """Jobs as the default user (nobody, as root), logs capped at 64 KiB."""
    b = LocalBackend(data, [0, 1], grace_s=2.0, max_log_bytes=CAP)
    yield b
    for name in list(b.running()):
        b.stop(name, now=0.0)
    until(lambda: (b.poll(0.0), not b._stopping)[1], what="the test's processes to be gone")


def sh(script: str, *args: str) -> tuple[str, ...]:
    return ("/bin/sh", "-c", script, "sh", *args)


def log_lines(b: LocalBackend, name: str) -> list[str]:
    return b.log_path(name).read_text(errors="replace").splitlines()


# ---------------------------------------------------------------------- the user
@needs_root
def test_a_root_service_runs_jobs_as_nobody_with_no_supplementary_groups(backend: LocalBackend) -> None:
    user = default_job_user()
    backend.start(job("who", *sh('id -u; id -g; id -G; echo "$HOME $USER $LOGNAME"')), on("who", 0), now=0)
    assert exit_of(backend, "who").ok
    work = backend.work_dir / "who"
    home = user.pw_dir if Path(user.pw_dir).is_dir() else str(work)  # nobody's is /nonexistent
    uid, gid = str(user.pw_uid), str(user.pw_gid)
    assert log_lines(backend, "who") == [uid, gid, gid, f"{home} {user.pw_name} {user.pw_name}"]


@needs_root
def test_files_and_directories_get_their_modes_and_owner(backend: LocalBackend, data: Path) -> None:
    backend.start(job("modes", *sh("echo hi")), on("modes", 0), now=0)
    assert exit_of(backend, "modes").ok
    user = default_job_user()
    expected = {  # path: (mode, owner uid)
        data: (0o711, 0),
        data / "run": (0o700, 0),
        data / "logs": (0o700, 0),
        data / "work": (0o711, 0),
        data / "work" / "modes": (0o700, user.pw_uid),
        data / "logs" / "modes.log": (0o600, 0),
    }
    got = {p: (stat.S_IMODE(p.stat().st_mode), p.stat().st_uid) for p in expected}
    assert got == expected


@needs_root
@needs_sys_py
def test_a_job_cannot_read_the_services_files(backend: LocalBackend, data: Path) -> None:
    """The store, the tokens file, other jobs' logs and the run/ files are out of a job's reach; its own
    work dir is not."""
    for name in ("tokens", "rackscale.db"):
        (data / name).write_text("admin: plaintext-admin-token\n")
        os.chmod(data / name, 0o600)  # as the service's umask 077 leaves them
    backend.start(job("other", *sh("echo other job secret")), on("other", 1), now=0)
    assert exit_of(backend, "other").ok
    probes = {
        "read the tokens file": f"open({str(data / 'tokens')!r}).read()",
        "read the store": f"open({str(data / 'rackscale.db')!r}).read()",
        "list the data dir": f"os.listdir({str(data)!r})",
        "list run/": f"os.listdir({str(data / 'run')!r})",
        "list logs/": f"os.listdir({str(data / 'logs')!r})",
        "read another job's log": f"open({str(data / 'logs' / 'other.log')!r}).read()",
        "list work/": f"os.listdir({str(data / 'work')!r})",
        "write into the data dir": f"open({str(data / 'planted')!r}, 'w')",
        "make a work dir": f"os.mkdir({str(data / 'work' / 'planted')!r})",
        "write into its own work dir": f"open({str(data / 'work' / 'probe' / 'mine')!r}, 'w').write('x')",
    }
    code = (
        "import json, os\nout = {}\n"
        "for name, expr in json.loads(os.environ['PROBES']).items():\n"
        "    try:\n        eval(expr)\n        out[name] = 'ok'\n"
        "    except Exception as e:\n        out[name] = type(e).__name__\n"
        "print(json.dumps(out))"
    )
    backend.start(job("probe", SYS_PY, "-c", code, env={"PROBES": json.dumps(probes)}), on("probe", 0), now=0)
    assert exit_of(backend, "probe").ok, read(backend.log_path("probe"))
    got = json.loads(log_lines(backend, "probe")[-1])
    assert got == {name: "PermissionError" for name in probes} | {"write into its own work dir": "ok"}
    assert not (data / "planted").exists() and not (data / "work" / "planted").exists()


@needs_root
def test_a_command_the_job_user_may_not_execute_fails_with_126_and_says_as_whom(
    backend: LocalBackend, data: Path
) -> None:
    script = data.parent / "root-only.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    os.chmod(script, 0o700)
    backend.start(job("denied", str(script)), on("denied", 0), now=0)
    e = exit_of(backend, "denied")
    assert (e.ok, e.exit_code) == (False, 126)
    assert "Permission denied" in e.reason and f"the job runs as uid {default_job_user().pw_uid}" in e.reason


# ---------------------------------------------------------------------- the environment
def test_the_services_environment_does_not_reach_the_job(
    backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in {
        "RACKSCALE_TOKEN": "s3cret-admin-token",
        "DATABASE_URL": "postgresql://rs:pw@db/rs",
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
    }.items():
        monkeypatch.setenv(key, value)
    spec_env = {"FOO": "bar baz", "CUDA_VISIBLE_DEVICES": "7", "RACKSCALE_JOB": "spoofed", "PATH": "/usr/bin:/bin"}
    backend.start(job("env", "/usr/bin/env", env=spec_env), on("env", 1), now=0)
    assert exit_of(backend, "env").ok
    env = dict(line.split("=", 1) for line in log_lines(backend, "env"))
    user = backend.user
    assert env.pop("HOME") in (user.home, str(backend.work_dir / "env"))
    assert env == {
        "PATH": "/usr/bin:/bin",  # the job's env wins over the base...
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "USER": user.name,
        "LOGNAME": user.name,
        "FOO": "bar baz",
        "CUDA_VISIBLE_DEVICES": "1",  # ...and these win over the job's env
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "RACKSCALE_JOB": "env",
    }


def test_the_base_path_is_the_services(backend: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    monkeypatch.delenv("TZ", raising=False)
    backend.start(job("path", *sh('echo "$PATH|${TZ-unset}"')), on("path", 0), now=0)
    assert exit_of(backend, "path").ok
    assert log_lines(backend, "path") == ["/usr/local/bin:/usr/bin:/bin|unset"]


def test_the_jobs_env_does_not_reach_the_wrapper(backend: LocalBackend, tmp_path: Path) -> None:
    """PYTHONPATH with a sitecustomize, PYTHONSTARTUP, PYTHONHOME and LD_PRELOAD in the job's env: the job
    sees them; the wrapper (python -I, an environment of its own) does not."""
    evil = tmp_path / "evil"
    evil.mkdir()
    marker = tmp_path / "marker"
    payload = f"import os, sys\nwith open({str(marker)!r}, 'a') as f: f.write(f'{{os.getpid()}} {{sys.argv!r}}\\n')\n"
    for name in ("sitecustomize.py", "usercustomize.py", "startup.py"):
        (evil / name).write_text(payload)
    # The bait works on a Python that is not isolated:
    subprocess.run([sys.executable, "-c", "pass"], env={**os.environ, "PYTHONPATH": str(evil)}, check=True)
    assert marker.read_text().strip(), "the sitecustomize bait did not fire"
    marker.unlink()

    spec_env = {
        "PYTHONPATH": str(evil),
        "PYTHONSTARTUP": str(evil / "startup.py"),
        "PYTHONHOME": "/nonexistent",
        "LD_PRELOAD": "/nonexistent.so",
    }
    script = (
        'echo "$PYTHONPATH|$PYTHONSTARTUP|$PYTHONHOME|$LD_PRELOAD"; : > ready\n'
        "while [ ! -e go ]; do sleep 0.02; done\necho done; exit 3"
    )
    backend.start(job("bait", *sh(script), env=spec_env), on("bait", 0), now=0)
    work = backend.work_dir / "bait"
    until(lambda: (work / "ready").exists(), what="the job to start")
    wrapper = backend._runs["bait"].pid
    assert Path(f"/proc/{wrapper}/environ").read_bytes() == f"PATH={os.defpath}\0".encode()
    assert Path(f"/proc/{wrapper}/cmdline").read_bytes().split(b"\0")[1] == b"-I"
    assert not backend.env_path("bait").exists()  # read and deleted by the wrapper
    (work / "go").touch()
    e = exit_of(backend, "bait")
    assert (e.ok, e.exit_code, e.reason) == (False, 3, "exit code 3: done")  # recorded by the wrapper
    assert f"{evil}|{evil}/startup.py|/nonexistent|/nonexistent.so" in log_lines(backend, "bait")
    assert not marker.exists(), marker.read_text()


# ---------------------------------------------------------------------- the log cap
def writer(total: int, code: int) -> tuple[str, ...]:
    """A job that writes about ``total`` bytes of numbered lines, then ``the last line``, and exits ``code``."""
    script = (
        "import sys\nn = int(sys.argv[1]) // 12\n"
        "for i in range(n): sys.stdout.write('line %06d\\n' % i)\n"
        "print('the last line'); sys.exit(int(sys.argv[2]))"
    )
    return (SYS_PY, "-c", script, str(total), str(code))


MARKER = re.compile(r"^\[rackscale: log truncated: (\d+) bytes dropped \(cap (\d+) bytes\)\]$")


@needs_sys_py
@pytest.mark.parametrize(
    ("total", "code", "truncated"),
    [
        pytest.param(CAP // 2, 0, False, id="fits"),
        pytest.param(10 * CAP, 1, True, id="10x-fails"),
        pytest.param(10 * CAP, 0, True, id="10x-completes"),
    ],
)
def test_the_log_is_capped_and_keeps_its_last_line(
    backend: LocalBackend, total: int, code: int, truncated: bool
) -> None:
    backend.start(job("chatty", *writer(total, code)), on("chatty", 0), now=0)
    e = exit_of(backend, "chatty")
    written = (total // 12) * 12 + len("the last line\n")
    dropped = int(read(backend.exit_path("chatty")).split()[2])  # "<pid> <code> <dropped>"
    raw = backend.log_path("chatty").read_bytes()
    lines = raw.decode().splitlines()
    assert lines[-1] == "the last line"
    markers = [m for m in map(MARKER.match, lines) if m]
    if not truncated:
        assert (dropped, markers, len(raw)) == (0, [], written)
        assert e == Exit("chatty", code == 0, code, "exit code 0" if code == 0 else "exit code 1: the last line")
        return
    assert len(markers) == 1 and int(markers[0][2]) == CAP
    marker_len = len(markers[0][0]) + 1
    assert len(raw) <= CAP + marker_len
    assert int(markers[0][1]) == dropped == written - (len(raw) - marker_len)
    assert lines[0] == "line 000000"  # the head is kept, then the marker, then the tail
    note = " (log truncated: " + f"{dropped / 1024:.1f}".removesuffix(".0") + " KiB dropped at the 64 KiB cap)"
    assert e == Exit("chatty", code == 0, code, ("exit code 0" if code == 0 else "exit code 1: the last line") + note)


@needs_sys_py
def test_the_cap_is_for_the_file_a_rerun_gets_what_is_left(backend: LocalBackend) -> None:
    backend.start(job("again", *writer(CAP // 2, 1)), on("again", 0), now=0)
    assert exit_of(backend, "again").exit_code == 1
    first = backend.log_path("again").stat().st_size
    backend.start(job("again", *writer(10 * CAP, 2)), on("again", 0), now=0)  # run again (as after a preemption)
    e = exit_of(backend, "again")
    raw = backend.log_path("again").read_bytes()
    lines = raw.decode().splitlines()
    markers = [line for line in lines if MARKER.match(line)]
    assert len(markers) == 1 and len(raw) <= CAP + len(markers[0]) + 1
    assert lines[first // 12 - 1 : first // 12 + 1] == ["the last line", "line 000000"]  # the rerun appended
    assert lines[-1] == "the last line"
    assert e.exit_code == 2 and e.reason.startswith("exit code 2: the last line (log truncated: ")
    # A third run finds the file full: only its marker is written, and the reason does not quote it.
    backend.start(job("again", *writer(1000, 4)), on("again", 0), now=0)
    e = exit_of(backend, "again")
    assert MARKER.match(log_lines(backend, "again")[-1])
    assert e.reason.startswith("exit code 4 (log truncated: ")


@pytest.mark.parametrize(
    ("script", "at_most"),
    [
        pytest.param("sleep 300 & echo $! > bg.pid; echo started", 3.0, id="silent-grandchild"),
        pytest.param(
            "(while :; do echo spam; sleep 0.01; done) & echo $! > bg.pid; echo started", DRAIN_S + 3, id="chatty"
        ),
    ],
)
def test_a_grandchild_holding_the_pipe_open_does_not_hold_the_job(
    backend: LocalBackend, script: str, at_most: float
) -> None:
    t0 = time.monotonic()
    backend.start(job("bg", *sh(script)), on("bg", 0), now=0)
    e = exit_of(backend, "bg")
    assert time.monotonic() - t0 < at_most
    assert e == Exit("bg", True, 0, "exit code 0")
    assert "started" in log_lines(backend, "bg")
    bg = int(read(backend.work_dir / "bg" / "bg.pid"))
    until(lambda: gone(bg), what="what the job left behind to be killed")


@needs_sys_py
def test_signals_to_the_wrapper_alone_do_not_stop_it_or_its_output(backend: LocalBackend) -> None:
    script = (
        "import os, sys, time\nprint('before', flush=True)\nopen('ready', 'w').close()\n"
        "while not os.path.exists('go'): time.sleep(0.01)\n"
        "for i in range(2000): print('after', i)\n"
    )
    backend.start(job("sigs", SYS_PY, "-c", script), on("sigs", 0), now=0)
    work = backend.work_dir / "sigs"
    until(lambda: (work / "ready").exists(), what="the job to start")
    wrapper = backend._runs["sigs"].pid
    for _ in range(20):
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            os.kill(wrapper, sig)
        time.sleep(0.005)
    (work / "go").touch()
    for _ in range(50):  # while it pumps
        os.kill(wrapper, signal.SIGTERM)
    assert exit_of(backend, "sigs") == Exit("sigs", True, 0, "exit code 0")
    assert log_lines(backend, "sigs") == ["before"] + [f"after {i}" for i in range(2000)]


# ---------------------------------------------------------------------- a job's bad strings
@pytest.mark.parametrize("fine_first", [False, True], ids=["bad-first", "fine-first"])
def test_bad_argv_or_env_fails_that_job_and_not_the_others(backend: LocalBackend, fine_first: bool) -> None:
    bad = {  # job: (command, env, exception named in the reason)
        "nul-argv": (sh("echo 'a\0b'"), {}, "ValueError"),
        "nul-env": (sh("echo hi"), {"X": "a\0b"}, "ValueError"),
        "nul-env-name": (sh("echo hi"), {"X\0Y": "1"}, "ValueError"),
        "eq-env-name": (sh("echo hi"), {"A=B": "1"}, "ValueError"),
        "surrogate-argv": (("/bin/echo", "\ud800"), {}, "UnicodeEncodeError"),
        "surrogate-env": (sh("echo hi"), {"X": "\udfff"}, "UnicodeEncodeError"),
    }
    names = [*bad, "fine"] if not fine_first else ["fine", *bad]
    for name in names:
        command, env, _ = bad.get(name, (sh("echo fine"), {}, ""))
        backend.start(job(name, *command, env=env), on(name, 0, milli=100), now=0)  # start never raises
    assert backend.running() == frozenset({"fine"})
    leftovers = {p.name for p in backend.run_dir.iterdir() if not p.name.startswith(("fine.", ".fine."))}
    assert leftovers == set()  # the failed starts left no run/ files
    seen: list[Exit] = []

    def fine_ended() -> bool:
        seen.extend(backend.poll(0.0))
        return "fine" in {e.job for e in seen}

    until(fine_ended, what="fine to end")
    got = {e.job: e for e in seen}
    assert got.pop("fine") == Exit("fine", True, 0, "exit code 0")
    assert sorted(got) == sorted(bad)
    for name, (_, _, exc) in bad.items():
        assert (got[name].ok, got[name].exit_code) == (False, None)
        assert got[name].reason.startswith(f"cannot start the job: {exc}: "), got[name].reason
    assert log_lines(backend, "fine") == ["fine"]


# ---------------------------------------------------------------------- options
def test_the_exit_file_of_an_older_wrapper_still_reads_on_adopt(data: Path) -> None:
    dead = subprocess.Popen(["/bin/sh", "-c", "exit 0"])
    dead.wait()
    b = LocalBackend(data, [0], max_log_bytes=CAP)
    cut = "exit code 5: last words (log truncated: 2 MiB dropped at the 64 KiB cap)"
    cases = {  # job: (exit file, the exit adopt reports), in the order adopt reports them (by name)
        "cut": (f"{dead.pid} 5 2097152\n", Exit("cut", False, 5, cut)),
        "new": (f"{dead.pid} 0 0\n", Exit("new", True, 0, "exit code 0")),
        "old": (f"{dead.pid} 4\n", Exit("old", False, 4, "exit code 4: last words")),  # two fields
    }
    running: dict[str, RunningJobRecord] = {}
    for name, (text, _) in cases.items():
        (data / "run" / f"{name}.pid").write_text(f"{dead.pid}\n")
        (data / "run" / f"{name}.exit").write_text(text)
        b.log_path(name).write_text("first\nlast words\n")
        running[name] = RunningJobRecord(job(name, "/bin/true"), on(name, 0), 0.0)
    assert b.adopt(running, 1.0) == [want for _, want in cases.values()]
    b.poll(2.0)
    assert sorted(p.name for p in b.run_dir.iterdir()) == []


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        pytest.param({"max_log_bytes": 100}, "--max-log-bytes", id="cap-too-small"),
        pytest.param({"max_log_bytes": "64M"}, "--max-log-bytes", id="cap-not-int"),
        pytest.param({"max_log_bytes": True}, "--max-log-bytes", id="cap-bool"),
        pytest.param({"allow_root_jobs": "yes"}, "--allow-root-jobs", id="allow-not-bool"),
        pytest.param({"run_as": ""}, "--run-as", id="run-as-empty"),
        pytest.param({"run_as": 0}, "--run-as", id="run-as-not-str"),
        pytest.param({"run_as": "no-such-user-rs"}, "--run-as no-such-user-rs: no such user", id="unknown-user"),
        pytest.param({"stop_grace_s": -1}, "--stop-grace", id="grace"),
        pytest.param(
            {"run_as": "root"}, ROOT_REFUSED if IS_ROOT else "needs the service to run as root", id="root-refused"
        ),
        pytest.param({"run_as": "0"}, ROOT_REFUSED if IS_ROOT else "needs the service to run as root", id="uid-0"),
    ],
)
def test_bad_options_are_refused_naming_the_flag(data: Path, options: dict[str, object], flag: str) -> None:
    with pytest.raises(LocalBackendError) as err:
        make_local_backend(data, None, {"gpus": [0], **options})
    assert flag in str(err.value)


@needs_root
def test_root_jobs_need_allow_root_jobs(data: Path) -> None:
    b, _ = make_local_backend(data, None, {"gpus": [0], "run_as": "root", "allow_root_jobs": True})
    assert (b.user.uid, b.user.switch) == (0, True)
    nobody, _ = make_local_backend(data, None, {"gpus": [0], "max_log_bytes": 4096})
    assert (nobody.user.name, nobody.max_log_bytes) == (default_job_user().pw_name, 4096)


def test_what_run_as_resolves_to_for_a_service_that_is_not_root() -> None:
    """``euid`` stands for the service's user: the decision alone, whoever runs the test."""
    nobody = default_job_user()
    me = resolve_run_as(None, euid=nobody.pw_uid)
    assert (me.name, me.uid, me.switch) == (nobody.pw_name, nobody.pw_uid, False)
    assert resolve_run_as(nobody.pw_name, euid=nobody.pw_uid) == me
    with pytest.raises(LocalBackendError, match="needs the service to run as root"):
        resolve_run_as("root", euid=nobody.pw_uid)
    with pytest.raises(LocalBackendError, match="--run-as no-such-user-rs"):
        resolve_run_as("no-such-user-rs", euid=nobody.pw_uid)
    root = resolve_run_as("root", allow_root_jobs=True, euid=0)
    assert (root.uid, root.switch) == (0, True)
    with pytest.raises(LocalBackendError, match="refusing to run tenant jobs as root"):
        resolve_run_as("root", euid=0)


@pytest.mark.skipif(IS_ROOT, reason="the warning is for a service that is not root")
def test_a_service_that_is_not_root_warns_that_jobs_run_as_it(data: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="rackscale.backends.local"):
        b = LocalBackend(data, [0])
    assert b.user.uid == os.geteuid() and not b.user.switch
    assert [r.message for r in caplog.records if "does not run as root" in r.message]
