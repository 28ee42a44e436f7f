"""deploy/prometheus/rules.yml: the real promtool checks it and runs its unit tests (rules_test.yml); the
YAML is also checked for the fields every alert must carry and for metric names rackscale really exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.deploy import exported
from tests.deploy.engines import require

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "rules.yml"
RULES_TEST = DEPLOY / "prometheus" / "rules_test.yml"
# The seed's alert table with real / modelled / both inputs (tests/deploy/test_telemetry_rules.py).
TELEMETRY_TEST = DEPLOY / "prometheus" / "rules_telemetry_test.yml"
UNIT_TESTS = (RULES_TEST, TELEMETRY_TEST)

# The alerts the docs and the seed's monitoring table promise.
EXPECTED_ALERTS = {
    "RackscaleGPUUtilizationSustainedHigh",
    "RackscaleNetworkLatencyP99High",
    "StorageIOPSLow",
    "RackscaleFailedJobsRising",
    "RackscaleIdleRateHigh",
    "RackscaleIntraRackShareLow",
    "RackscaleJobPendingTooLong",
    "RackscaleRunnerErrors",
    "RackscaleSchedulingCycleSlow",
    "RackscaleKubeBudgetsRefused",
    "RackscaleDown",
}

METRIC_RE = re.compile(r"\brackscale_[a-z0-9_]+")
RECORDED_RE = re.compile(r"\brackscale:[a-z0-9_:]+")


def promtool(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    binary = require("promtool")
    return subprocess.run([binary, *map(str, args)], capture_output=True, text=True, timeout=60, cwd=cwd)


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_promtool_check_rules() -> None:
    r = promtool("check", "rules", RULES)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


@pytest.mark.parametrize("unit_tests", UNIT_TESTS, ids=[p.stem for p in UNIT_TESTS])
def test_promtool_unit_tests_pass(unit_tests: Path) -> None:
    r = promtool("test", "rules", unit_tests.name, cwd=unit_tests.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_promtool_fails_a_wrong_expectation(tmp_path: Path) -> None:
    """A test file expecting the wrong thing must fail: the passing run above really checks something."""
    shutil.copy(RULES, tmp_path / "rules.yml")
    wrong = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                # 90% utilisation does not fire the alert, yet this test expects it to.
                "input_series": [{"series": 'rackscale_gpu_utilization_ratio{instance="rs:8000"}', "values": "0.9x30"}],
                "alert_rule_test": [
                    {
                        "eval_time": "20m",
                        "alertname": "RackscaleGPUUtilizationSustainedHigh",
                        "exp_alerts": [{"exp_labels": {"severity": "warning", "instance": "rs:8000"}}],
                    }
                ],
            }
        ],
    }
    (tmp_path / "wrong_test.yml").write_text(yaml.safe_dump(wrong))
    r = promtool("test", "rules", "wrong_test.yml", cwd=tmp_path)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "FAILED" in r.stdout + r.stderr


def test_every_alert_has_for_severity_summary_description() -> None:
    alerts = [rule for rule in rules() if "alert" in rule]
    assert {a["alert"] for a in alerts} == EXPECTED_ALERTS
    for a in alerts:
        name = a["alert"]
        assert a.get("for"), f"{name}: no `for:`"
        assert a.get("labels", {}).get("severity") in {"info", "warning", "critical"}, f"{name}: severity"
        annotations = a.get("annotations", {})
        assert annotations.get("summary"), f"{name}: no summary"
        assert annotations.get("description"), f"{name}: no description"
        # the text must say what was measured (the value or the labels it fired for)
        text = annotations["summary"] + annotations["description"]
        assert "$value" in text or "$labels" in text, f"{name}: annotations name neither $value nor $labels"


def test_every_alert_is_unit_tested_firing_and_not_firing() -> None:
    cases = [case for path in UNIT_TESTS for case in yaml.safe_load(path.read_text())["tests"]]
    firing: set[str] = set()
    silent: set[str] = set()
    for case in cases:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    assert firing >= EXPECTED_ALERTS, f"no firing case for {sorted(EXPECTED_ALERTS - firing)}"
    assert silent >= EXPECTED_ALERTS, f"no not-firing case for {sorted(EXPECTED_ALERTS - silent)}"


def test_rules_name_only_exported_metrics() -> None:
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    assert "rackscale:idle_rate:ratio_rate10m" in recorded
    assert "rackscale:intra_rack_share:ratio_rate10m" in recorded
    for rule in rules():
        expr = rule["expr"]
        unknown = [m for m in METRIC_RE.findall(expr) if not exported(m)]
        assert not unknown, f"{rule.get('alert') or rule.get('record')}: not exported by rackscale: {unknown}"
        missing = [m for m in RECORDED_RE.findall(expr) if m not in recorded]
        assert not missing, f"{rule.get('alert') or rule.get('record')}: no recording rule for {missing}"


def test_example_configs_are_valid() -> None:
    r = promtool("check", "config", "prometheus.yml", cwd=DEPLOY / "prometheus")
    assert r.returncode == 0, r.stdout + r.stderr
    amtool = require("amtool")
    r = subprocess.run(
        [amtool, "check-config", "alertmanager.yml"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=DEPLOY / "alertmanager",
    )
    assert r.returncode == 0, r.stdout + r.stderr
