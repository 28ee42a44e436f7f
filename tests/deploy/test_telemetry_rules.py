"""The seed's alert table on real telemetry: each alert reads a `rackscale:*` rule that takes an exporter's
series when present and rackscale's model otherwise (deploy/prometheus/rules.yml, group rackscale.telemetry);
its promtool cases (rules_telemetry_test.yml, run by test_prometheus_rules.py) cover the real series, the
fallback and both; every dashboard panel on those rules names its source."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "rules.yml"
TELEMETRY_TEST = DEPLOY / "prometheus" / "rules_telemetry_test.yml"
DASHBOARD = DEPLOY / "grafana" / "rackscale.json"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"

TELEMETRY_RULES = (
    "rackscale:gpu_utilization:ratio",
    "rackscale:network_latency_p99:seconds",
    "rackscale:storage_iops:rate5m",
    "rackscale:jobs_failed:increase5m",
)

# alert, the rule it must read, the raw series it must no longer read directly, the input kinds for which a
# promtool case must see it fire and one must see it stay silent. Storage has no model ("fallback" records
# nothing, so only silent); failed jobs have no exporter but rackscale itself (only "real").
ALERTS = [
    (
        "RackscaleGPUUtilizationSustainedHigh",
        "rackscale:gpu_utilization:ratio",
        "rackscale_gpu_utilization_ratio",
        {"real", "fallback", "both"},
        {"real", "fallback", "both"},
    ),
    (
        "RackscaleNetworkLatencyP99High",
        "rackscale:network_latency_p99:seconds",
        "rackscale_network_latency_p99_seconds",
        {"real", "fallback", "both"},
        {"real", "fallback", "both"},
    ),
    ("StorageIOPSLow", "rackscale:storage_iops:rate5m", "node_disk_reads_completed_total", {"both"}, {"fallback"}),
    (
        "RackscaleFailedJobsRising",
        "rackscale:jobs_failed:increase5m",
        "rackscale_jobs_finished_total",
        {"real"},
        {"real"},
    ),
]


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def cases() -> list[dict[str, Any]]:
    tests: list[dict[str, Any]] = yaml.safe_load(TELEMETRY_TEST.read_text())["tests"]
    return tests


def kind(case: dict[str, Any]) -> str:
    prefix = str(case["name"]).split(":", 1)[0]
    assert prefix in {"real", "fallback", "both"}, f"case {case['name']!r}: name it real:/fallback:/both:"
    return prefix


@pytest.mark.parametrize(("alert", "rule", "raw", "fires", "silent"), ALERTS, ids=[a[0] for a in ALERTS])
def test_alert_reads_its_rule_and_is_tested_on_each_input(
    alert: str, rule: str, raw: str, fires: set[str], silent: set[str]
) -> None:
    expr = next(r["expr"] for r in rules() if r.get("alert") == alert)
    assert rule in expr and raw not in expr, f"{alert} must read {rule}, not {raw}"
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in cases():
        for check in case.get("alert_rule_test", []):
            if check["alertname"] == alert:
                (firing if check.get("exp_alerts") else quiet).add(kind(case))
    assert firing >= fires, f"{alert}: no firing case for {sorted(fires - firing)}"
    assert quiet >= silent, f"{alert}: no silent case for {sorted(silent - quiet)}"
    for case in cases():
        for check in case.get("alert_rule_test", []):
            for exp in check.get("exp_alerts") or []:
                assert "source" in exp["exp_labels"], f"{case['name']}: a firing alert says its source"


def test_every_telemetry_rule_is_evaluated_with_its_source() -> None:
    """Each `rackscale:*` telemetry rule's value is checked by a promql_expr_test, every sample labelled."""
    recorded = {r["record"] for r in rules() if "record" in r}
    assert set(TELEMETRY_RULES) <= recorded
    seen: set[str] = set()
    for case in cases():
        for check in case.get("promql_expr_test", []):
            if check["expr"] in TELEMETRY_RULES:
                seen.add(check["expr"])
                for sample in check["exp_samples"]:
                    assert 'source="' in sample["labels"], f"{case['name']}: {sample['labels']} has no source"
    # Failed jobs are checked through the alert cases only (the offsets compare the recorded series).
    assert seen >= set(TELEMETRY_RULES) - {"rackscale:jobs_failed:increase5m"}


def test_dashboard_panels_on_telemetry_say_their_source() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    on_rules = [
        p for p in dashboard["panels"] if any(r in t["expr"] for t in p.get("targets", []) for r in TELEMETRY_RULES)
    ]
    shown = {r for p in on_rules for t in p["targets"] for r in TELEMETRY_RULES if r in t["expr"]}
    assert shown == set(TELEMETRY_RULES)
    for p in on_rules:
        assert "source" in p["description"], f"{p['title']}: the description must name its source"
        for t in p["targets"]:
            assert "{{source}}" in t["legendFormat"], f"{p['title']}: the legend must show the source label"
    # The utilisation and latency panels read the rules (real when present), not only the modelled metrics.
    for p in dashboard["panels"]:
        for t in p.get("targets", []):
            assert "rackscale_gpu_utilization_ratio" not in t["expr"], p["title"]
            assert "rackscale_network_latency_p99_seconds" not in t["expr"], p["title"]


def test_example_prometheus_config_scrapes_the_exporters() -> None:
    jobs = {j["job_name"]: j for j in yaml.safe_load(PROMETHEUS.read_text())["scrape_configs"]}
    assert {"rackscale", "node", "dcgm", "nvidia-smi"} <= jobs.keys()
    probes = [j for j in jobs.values() if j.get("metrics_path") == "/probe"]
    assert probes, "no blackbox_exporter probe job"
    for job in probes:
        tiers = {sc.get("labels", {}).get("tier") for sc in job["static_configs"]}
        assert tiers <= {"nvlink", "rdma"} and None not in tiers, f"{job['job_name']}: each probe target names its tier"
