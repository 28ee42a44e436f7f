"""deploy/grafana/rackscale.json: Grafana cannot run here, so the dashboard is checked structurally (what an
import needs), its metric names against what the service exports, and its PromQL by the real promtool."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.deploy import exported, metric_of
from tests.deploy.engines import require

from rackscale.service.metrics import METRIC_NAMES

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "rackscale.json"
METRIC_RE = re.compile(r"\brackscale_[a-z0-9_]+")
DATASOURCE = "${datasource}"

# The metrics a rackscale operator must be able to see on the dashboard.
MUST_SHOW = (
    "rackscale_schedule_attempts_total",
    "rackscale_scheduling_attempt_duration_seconds",
    "rackscale_pending_jobs",
    "rackscale_rack_gpus_allocated",
    "rackscale_gpu_idle_while_waiting_seconds_total",
    "rackscale_traffic_bytes_total",
    "rackscale_cost_per_token",
    "rackscale_inference_p99_latency_seconds",
    "rackscale_preemption_victims_total",
    "rackscale_oldest_pending_job_age_seconds",
)


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in dashboard["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # panels inside a collapsed row
    return out


def exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]


def test_dashboard_header(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "rackscale"
    assert dashboard["title"]
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert "id" not in dashboard or dashboard["id"] is None  # an import must not carry a database id


def test_datasource_variable(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource"
    assert ds["query"] == "prometheus"
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"]["uid"] == DATASOURCE, v["name"]


def test_panels_structure(dashboard: dict[str, Any]) -> None:
    ps = [p for p in panels(dashboard) if p["type"] != "row"]
    assert len(ps) >= 10
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    kinds = {p["type"] for p in ps}
    assert {"timeseries", "stat", "gauge"} <= kinds
    for p in ps:
        title = p.get("title")
        assert title, p["id"]
        grid = p["gridPos"]
        assert {"x", "y", "w", "h"} <= grid.keys(), title
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, title
        assert p["datasource"]["uid"] == DATASOURCE, title
        assert p["datasource"]["type"] == "prometheus", title
        targets = p.get("targets")
        assert targets, f"{title}: no targets"
        ref_ids = [t["refId"] for t in targets]
        assert len(ref_ids) == len(set(ref_ids)), f"{title}: refIds repeat"
        for t in targets:
            assert t["expr"].strip(), f"{title}: empty expr"
            assert t["datasource"]["uid"] == DATASOURCE, title


def test_panels_do_not_overlap(dashboard: dict[str, Any]) -> None:
    cells: dict[tuple[int, int], str] = {}
    for p in panels(dashboard):
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]


def test_kpi_panels(dashboard: dict[str, Any]) -> None:
    """The idle rate and the intra-rack share are single-number panels, not buried in a graph."""
    by_title = {p["title"]: p for p in panels(dashboard)}
    idle = [p for t, p in by_title.items() if "idle rate" in t.lower() and p["type"] in {"stat", "gauge"}]
    share = [p for t, p in by_title.items() if "intra-rack" in t.lower() and p["type"] in {"stat", "gauge"}]
    assert idle and share
    assert any("rackscale_gpu_idle_while_waiting_seconds_total" in t["expr"] for p in idle for t in p["targets"])
    assert any('tier="nvlink"' in t["expr"] for p in share for t in p["targets"])


def test_every_expression_names_exported_metrics(dashboard: dict[str, Any]) -> None:
    for expr in exprs(dashboard):
        unknown = [m for m in METRIC_RE.findall(expr) if not exported(m)]
        assert not unknown, f"not exported by rackscale: {unknown} in {expr}"


def test_important_metrics_are_shown(dashboard: dict[str, Any]) -> None:
    shown = {metric_of(m) for expr in exprs(dashboard) for m in METRIC_RE.findall(expr)}
    missing = [m for m in MUST_SHOW if m not in shown]
    assert not missing, f"no panel shows {missing}"
    assert set(MUST_SHOW) <= set(METRIC_NAMES)


def test_expressions_parse(dashboard: dict[str, Any], tmp_path: Path) -> None:
    """Every expression is valid PromQL: the real promtool parses them as recording rules (Grafana's
    variables replaced by the values Grafana would put in)."""
    rules = []
    for i, expr in enumerate(exprs(dashboard)):
        concrete = expr.replace("$__rate_interval", "1m").replace("$instance", ".*")
        assert "$" not in concrete, f"unknown Grafana variable in {expr}"
        rules.append({"record": f"dashboard:expr_{i}", "expr": concrete})
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    r = subprocess.run([require("promtool"), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
