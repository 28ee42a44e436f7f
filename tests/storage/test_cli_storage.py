"""`rackscale storage lifecycle` end to end on real files: table and JSON, dry run, exit codes, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.cli.app import app
from rackscale.storage.config import Tier

from .helpers import make_tiers, put, tree
from .test_config import PLAN_CONFIGMAP

runner = CliRunner()
NOW_ISO = "2025-06-15T15:06:40Z"  # helpers.NOW


def _setup(tmp_path: Path) -> tuple[list[str], dict[Tier, Path]]:
    roots = make_tiers(tmp_path)
    put(roots[Tier.HOT], "checkpoints/job-a/step-50.pt", b"x" * 64, age_days=10)
    put(roots[Tier.HOT], "checkpoints/job-a/step-99.pt", b"y" * 32, age_days=1)
    cfg = tmp_path / "storage-lifecycle.yaml"
    cfg.write_text(PLAN_CONFIGMAP)
    args = ["storage", "lifecycle", "--config", str(cfg), "--now", NOW_ISO]
    return [*args, *(f"--tier={t}={p}" for t, p in roots.items())], roots


def test_json_report_and_the_move(tmp_path: Path) -> None:
    args, roots = _setup(tmp_path)
    r = runner.invoke(app, [*args, "-o", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["moved"] == [
        {"path": "checkpoints/job-a/step-50.pt", "from": "hot", "to": "warm", "bytes": 64, "outcome": "moved"}
    ]
    assert doc["tiers"]["warm"]["bytesAfter"] == 64
    assert (roots[Tier.WARM] / "checkpoints/job-a/step-50.pt").exists()


def test_dry_run_table_changes_nothing(tmp_path: Path) -> None:
    args, roots = _setup(tmp_path)
    before = tree(roots)
    r = runner.invoke(app, [*args, "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "would move hot -> warm: checkpoints/job-a/step-50.pt (64 bytes)" in r.stdout
    assert tree(roots) == before


def test_a_refusal_exits_1(tmp_path: Path) -> None:
    args, roots = _setup(tmp_path)
    put(roots[Tier.WARM], "checkpoints/job-a/step-50.pt", b"other", age_days=10)
    r = runner.invoke(app, args)
    assert r.exit_code == 1
    assert "refused hot: checkpoints/job-a/step-50.pt: a different file of the same name" in r.stdout


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: [*a, "--now", "yesterday"], "--now must be an ISO 8601 time"),
        (lambda a: [*a, "--now", "2025-06-15T00:00"], "--now needs a time zone"),
        (lambda a: [*a, "--tier", "hot=/x"], "--tier hot is given twice"),
        (lambda a: [*a, "--include", "../etc"], "--include '../etc'"),
        (lambda a: [x.replace("cold=", "frozen=") for x in a], "'frozen' is no tier"),
    ],
    ids=["bad-now", "naive-now", "repeated-tier", "escaping-include", "unknown-tier"],
)
def test_bad_options_are_one_line_exit_2(tmp_path: Path, change: object, message: str) -> None:
    args, _ = _setup(tmp_path)
    r = runner.invoke(app, change(args))  # type: ignore[operator]
    assert r.exit_code == 2
    assert message in r.stderr
    assert "Traceback" not in r.output


def test_a_bad_config_names_the_field(tmp_path: Path) -> None:
    args, _ = _setup(tmp_path)
    (tmp_path / "storage-lifecycle.yaml").write_text(PLAN_CONFIGMAP.replace('"30d"', '"3d"'))
    r = runner.invoke(app, args)
    assert r.exit_code == 2
    assert "data.warm-tier: must be longer than hot-tier" in r.stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--tier", "hot=/x"], "--tier is for the storage lifecycle: give --storage-lifecycle FILE too"),
        (["--storage-lifecycle", "CFG", "--tier", "hot=/x"], "no folder for tier(s) warm, cold"),
        (["--storage-lifecycle", "CFG", "--storage-every", "1y"], "--storage-every has the unknown unit 'y'"),
    ],
    ids=["tier-without-config", "missing-tiers", "bad-every"],
)
def test_serve_storage_options_fail_before_start(tmp_path: Path, extra: list[str], message: str) -> None:
    cfg = tmp_path / "storage-lifecycle.yaml"
    cfg.write_text(PLAN_CONFIGMAP)
    args = ["serve", "--data-dir", str(tmp_path / "data"), *[str(cfg) if a == "CFG" else a for a in extra]]
    r = runner.invoke(app, args)
    assert r.exit_code == 2
    assert message in r.stderr
    assert not (tmp_path / "data").exists()  # nothing was started
