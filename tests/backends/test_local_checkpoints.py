"""Jobs' checkpoint folders on the hot storage tier, with real processes and real files (issue 15, part 3).

With a hot tier (``checkpoint_root``; ``rackscale serve --tier hot=PATH``) the local backend gives each job
``RACKSCALE_CHECKPOINT_DIR=<hot>/checkpoints/<job>``, created 0700 and owned by the run-as user; the storage
lifecycle later moves what the job wrote there, under the same relative path::

    <hot>/checkpoints/           0711, the service's (jobs pass through, do not list it)
    <hot>/checkpoints/train-1/   0700, the run-as user's  <- RACKSCALE_CHECKPOINT_DIR
        step-1.pt  --(older than hot-tier)-->  <warm>/checkpoints/train-1/step-1.pt

As root the jobs run as ``nobody`` for real (the tiers and the data dir live under a 0711 folder every user
may pass through); as another user they run as that user.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.backends.test_local import exit_of, job, on
from tests.backends.test_local_isolation import kill_wrappers

from rackscale.backends.local import (
    CHECKPOINT_ENV,
    CHECKPOINTS_FOLDER,
    LocalBackend,
    LocalBackendError,
    checkpoint_dir,
    make_local_backend,
)
from rackscale.storage.config import TIERS, Lifecycle, Tier
from rackscale.storage.lifecycle import DEFAULT_INCLUDE, run_lifecycle

DAY = 86_400
POLICY = Lifecycle(hot_s=7 * DAY, warm_s=30 * DAY, cold_s=180 * DAY)  # the plan's ConfigMap
SH = "/bin/sh"
# Writes one checkpoint into the folder it was given and prints that folder (or "unset").
WRITE_CKPT = 'echo "${RACKSCALE_CHECKPOINT_DIR-unset}"; echo weights > "$RACKSCALE_CHECKPOINT_DIR/step-1.pt"'
PRINT_CKPT = 'echo "${RACKSCALE_CHECKPOINT_DIR-unset}"'


@pytest.fixture
def top() -> Iterator[Path]:
    """A folder every user may search (0711), holding the data dir and the three tiers."""
    t = Path(tempfile.mkdtemp(prefix="rackscale-ckpt-", dir="/tmp" if Path("/tmp").is_dir() else None))
    os.chmod(t, 0o711)
    for tier in TIERS:
        (t / str(tier)).mkdir()
        os.chmod(t / str(tier), 0o711)
    yield t
    kill_wrappers(t / "data")
    shutil.rmtree(t, ignore_errors=True)


def roots(top: Path) -> dict[Tier, Path]:
    return {tier: top / str(tier) for tier in TIERS}


def log_of(b: LocalBackend, name: str) -> str:
    return b.log_path(name).read_text().strip()


def test_the_lifecycle_manages_the_folder_the_backend_names() -> None:
    assert (CHECKPOINTS_FOLDER,) == DEFAULT_INCLUDE  # the backend cannot import storage: the name is repeated


def test_a_job_writes_its_checkpoint_on_the_hot_tier_and_the_lifecycle_moves_it(top: Path) -> None:
    hot, warm = top / "hot", top / "warm"
    b = LocalBackend(top / "data", [0], checkpoint_root=hot)  # as root: jobs run as nobody
    b.start(job("train-1", SH, "-c", WRITE_CKPT), on("train-1", 0), now=0.0)
    e = exit_of(b, "train-1")
    assert (e.ok, e.exit_code) == (True, 0), e
    folder = hot / "checkpoints" / "train-1"
    assert log_of(b, "train-1") == str(folder)
    st = os.lstat(folder)
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o700, b.user.uid, b.user.gid)
    assert stat.S_IMODE(os.lstat(hot / "checkpoints").st_mode) == 0o711
    ckpt = folder / "step-1.pt"
    assert (ckpt.read_text(), ckpt.stat().st_uid) == ("weights\n", b.user.uid)  # written by the job's user

    report = run_lifecycle(roots=roots(top), policy=POLICY, now=time.time() + 8 * DAY)
    assert [(m.rel, m.src, m.dst) for m in report.moved] == [("checkpoints/train-1/step-1.pt", Tier.HOT, Tier.WARM)]
    assert not ckpt.exists()
    assert (warm / "checkpoints" / "train-1" / "step-1.pt").read_text() == "weights\n"


@pytest.mark.parametrize(
    ("hot_tier", "spec_env", "expected"),
    [
        (False, {}, "unset"),
        (False, {CHECKPOINT_ENV: "/elsewhere"}, "/elsewhere"),
        (True, {}, "{hot}/checkpoints/job-a"),
        (True, {CHECKPOINT_ENV: "/elsewhere"}, "{hot}/checkpoints/job-a"),
    ],
    ids=["no-tier", "no-tier-job-env-kept", "tier", "tier-wins-over-job-env"],
)
def test_the_variable_is_set_only_with_a_hot_tier(
    top: Path, hot_tier: bool, spec_env: dict[str, str], expected: str
) -> None:
    hot = top / "hot"
    b = LocalBackend(top / "data", [0], checkpoint_root=hot if hot_tier else None)
    b.start(job("job-a", SH, "-c", PRINT_CKPT, env=spec_env), on("job-a", 0), now=0.0)
    assert exit_of(b, "job-a").ok
    assert log_of(b, "job-a") == expected.format(hot=hot)
    assert (hot / "checkpoints").exists() is hot_tier  # no hot tier: nothing is created there


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (42, "checkpoint_root must be an absolute path (got 42)"),
        ("", "checkpoint_root must be an absolute path (got '')"),
        ("relative/hot", "checkpoint_root must be an absolute path (got 'relative/hot')"),
        ("/hot\x00x", "checkpoint_root must be an absolute path"),
        ("{top}/missing", "checkpoint_root {top}/missing: FileNotFoundError"),
        ("{top}/a-file", "checkpoint_root {top}/a-file is not a folder"),
    ],
    ids=["number", "empty", "relative", "nul", "missing", "a-file"],
)
def test_a_bad_checkpoint_root_option_is_one_error_naming_it(top: Path, value: object, message: str) -> None:
    (top / "a-file").write_text("")
    if isinstance(value, str):
        value = value.format(top=top)
    with pytest.raises(LocalBackendError) as err:
        make_local_backend(top / "data", None, {"gpus": [0], "checkpoint_root": value})
    text = str(err.value)
    assert text.startswith(message.format(top=top)) and "\n" not in text
    assert "--tier hot=" in text  # the fix
    assert not (top / "data").exists()  # refused before anything is set up


def test_the_option_reaches_the_backend_resolved(top: Path) -> None:
    os.symlink(top / "hot", top / "hot-link")
    b, _ = make_local_backend(top / "data", None, {"gpus": [0], "checkpoint_root": str(top / "hot-link")})
    assert b.checkpoint_root == (top / "hot").resolve()
    b2, _ = make_local_backend(top / "data", None, {"gpus": [0]})
    assert b2.checkpoint_root is None


@pytest.mark.parametrize("kind", ["symlink", "file"])
def test_a_checkpoints_entry_that_is_not_a_folder_is_refused_at_start_up(top: Path, kind: str) -> None:
    """A symlinked ``checkpoints`` would be refused by the lifecycle as a whole: its files would never move."""
    hot = top / "hot"
    (top / "outside").mkdir()
    if kind == "symlink":
        os.symlink(top / "outside", hot / "checkpoints")
    else:
        (hot / "checkpoints").write_text("")
    with pytest.raises(LocalBackendError, match="is not a folder"):
        LocalBackend(top / "data", [0], checkpoint_root=hot)


@pytest.mark.parametrize(
    "name",
    ["..", ".", "a/b", "../x", "/etc", "", "a\x00b"],
    ids=["dotdot", "dot", "slash", "up", "abs", "empty", "nul"],
)
def test_a_job_name_never_escapes_the_checkpoints_folder(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="cannot name a checkpoint folder"):
        checkpoint_dir(tmp_path, name)


@pytest.mark.parametrize("name", ["..", "../escape", "a/b"], ids=["dotdot", "up", "slash"])
def test_the_backend_refuses_such_a_job_and_creates_nothing(top: Path, name: str) -> None:
    b = LocalBackend(top / "data", [0], checkpoint_root=top / "hot")
    b.start(job(name, SH, "-c", WRITE_CKPT), on(name, 0), now=0.0)
    e = exit_of(b, name)
    assert not e.ok and "cannot run a job named" in e.reason
    assert sorted(p.name for p in (top / "hot" / "checkpoints").iterdir()) == []
    assert sorted(p.name for p in top.iterdir()) == ["cold", "data", "hot", "warm"]


def test_a_symlink_planted_as_the_jobs_folder_fails_the_job_and_writes_nothing_outside(top: Path) -> None:
    hot = top / "hot"
    (top / "outside").mkdir()
    b = LocalBackend(top / "data", [0], checkpoint_root=hot)
    os.symlink(top / "outside", hot / "checkpoints" / "job-a")
    b.start(job("job-a", SH, "-c", WRITE_CKPT), on("job-a", 0), now=0.0)
    e = exit_of(b, "job-a")
    assert not e.ok and "cannot start the job: NotADirectoryError" in e.reason, e
    assert list((top / "outside").iterdir()) == []


PLAN_CONFIGMAP = """apiVersion: v1
kind: ConfigMap
metadata:
  name: storage-lifecycle
data:
  hot-tier: "7d"
  warm-tier: "30d"
  cold-tier: "180d"
"""


@pytest.mark.parametrize(
    ("backend", "expected"), [("local", "hot"), ("sim", None)], ids=["local-gets-hot", "sim-gets-none"]
)
def test_serve_passes_the_hot_tier_to_the_local_backend(
    top: Path, monkeypatch: pytest.MonkeyPatch, backend: str, expected: str | None
) -> None:
    """`rackscale serve --backend local --storage-lifecycle F --tier hot=...`: the config built_service gets
    (captured, then refused, so nothing is served)."""
    pytest.importorskip("fastapi")
    from typer.testing import CliRunner

    import rackscale.service.app as service_app
    from rackscale.cli.app import app

    seen: list[service_app.ServiceConfig] = []

    def capture(config: service_app.ServiceConfig, **_: object) -> object:
        seen.append(config)
        raise service_app.ServiceConfigError("captured")

    monkeypatch.setattr(service_app, "build_service", capture)
    cfg = top / "storage-lifecycle.yaml"
    cfg.write_text(PLAN_CONFIGMAP)
    tiers = [a for t in TIERS for a in ("--tier", f"{t}={top / str(t)}")]
    args = ["serve", "--backend", backend, "--gpus", "0", "--data-dir", str(top / "data"), "--no-auth"]
    result = CliRunner().invoke(app, [*args, "--storage-lifecycle", str(cfg), *tiers])
    assert "captured" in result.output, result.output
    assert [c.backend_options.get("checkpoint_root") for c in seen] == [
        str((top / expected).resolve()) if expected else None
    ]
