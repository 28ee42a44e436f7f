"""End to end with the real engines: rackscale /metrics -> Prometheus (deploy/prometheus/rules.yml) ->
Alertmanager -> a webhook. A job left waiting makes RackscaleJobPendingTooLong fire and reach the webhook."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from tests.deploy.engines import Engine, start_alertmanager, start_prometheus, webhook_receiver
from tests.service.conftest import serve_in_thread, small_cluster

from rackscale.service.app import ServiceConfig

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "rules.yml"
ALERT = "RackscaleJobPendingTooLong"


def fast_rules(dest: Path) -> None:
    """deploy/prometheus/rules.yml with every `for:` rewritten to 1s, so an alert fires a second after its
    condition holds (the expressions and thresholds are the real ones)."""
    text, n = re.subn(r"(?m)^(\s+)for: \S+", r"\1for: 1s", RULES.read_text())
    assert n >= 5, "expected a `for:` per alert in rules.yml"
    header = "# A copy of deploy/prometheus/rules.yml for the e2e test: every `for:` rewritten to 1s.\n"
    dest.write_text(header + text)


def wait(pred: Any, *, timeout: float, what: str, engines: list[Engine]) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {e.name} log:\n{e.log_tail()}" for e in engines)
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{logs}")
        time.sleep(0.2)


def test_job_pending_too_long_reaches_the_webhook(tmp_path: Path) -> None:
    # Auth on, as in production: Prometheus scrapes with a scrape token (its `authorization` setting).
    admin, scrape = "admin-token-0123456789abcdef", "scrape-token-0123456789abcdef"
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        yaml.safe_dump(
            {
                "tokens": [
                    {"name": "ops", "role": "admin", "token": admin},
                    {"name": "prometheus", "role": "scrape", "token": scrape},
                ]
            }
        )
    )
    (tmp_path / "scrape.token").write_text(scrape + "\n")
    cfg = ServiceConfig(
        data_dir=tmp_path / "data", cluster=small_cluster(), speed=1000.0, interval_s=0.01, tokens_file=tokens
    )
    engines: list[Engine] = []
    with serve_in_thread(cfg) as live, webhook_receiver() as hook, live.client(admin) as api:
        with live.client(scrape) as c:
            assert c.get("/metrics").status_code == 200
            assert c.get("/v1/jobs").status_code == 403  # a scrape token reads /metrics only
        with live.client(None) as c:
            assert c.get("/metrics").status_code == 401
        try:
            am_config = tmp_path / "alertmanager.yml"
            am_config.write_text(
                yaml.safe_dump(
                    {
                        "route": {
                            "receiver": "hook",
                            "group_by": ["alertname", "queue"],
                            "group_wait": "1s",
                            "group_interval": "1s",
                            "repeat_interval": "1m",
                        },
                        "receivers": [{"name": "hook", "webhook_configs": [{"url": hook.url}]}],
                    }
                )
            )
            am = start_alertmanager(am_config, tmp_path)
            engines.append(am)

            fast_rules(tmp_path / "rules.yml")
            prom_config = tmp_path / "prometheus.yml"
            prom_config.write_text(
                yaml.safe_dump(
                    {
                        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                        "rule_files": ["rules.yml"],
                        "alerting": {
                            "alertmanagers": [{"static_configs": [{"targets": [am.url.removeprefix("http://")]}]}]
                        },
                        "scrape_configs": [
                            {
                                "job_name": "rackscale",
                                "metrics_path": "/metrics",
                                "authorization": {"type": "Bearer", "credentials_file": str(tmp_path / "scrape.token")},
                                "static_configs": [{"targets": [live.url.removeprefix("http://")]}],
                            }
                        ],
                    }
                )
            )
            prom = start_prometheus(prom_config, tmp_path)
            engines.append(prom)

            # Prometheus scrapes the service and loaded every rule of the real file.
            def scraped() -> bool:
                r = httpx.get(f"{prom.url}/api/v1/query", params={"query": 'up{job="rackscale"}'}, timeout=2)
                result = r.json()["data"]["result"]
                return bool(result) and result[0]["value"][1] == "1"

            wait(scraped, timeout=20, what="Prometheus to scrape the service", engines=engines)
            groups = httpx.get(f"{prom.url}/api/v1/rules", timeout=2).json()["data"]["groups"]
            loaded = {rule["name"] for g in groups for rule in g["rules"]}
            assert ALERT in loaded and "rackscale:idle_rate:ratio_rate10m" in loaded

            # Fill both racks, then one more job waits; its age grows 1000 service seconds a wall second.
            for i, gpus in enumerate((72, 72, 72)):
                r = api.post(
                    "/v1/jobs",
                    json={"name": f"train-{i}", "kind": "training", "gpus": gpus, "durationEstimateSeconds": 1e7},
                )
                assert r.status_code == 201, r.text
            wait(
                lambda: api.get("/v1/jobs/train-1").json()["status"] == "running",
                timeout=10,
                what="the first two jobs to run",
                engines=engines,
            )
            assert api.get("/v1/jobs/train-2").json()["status"] == "pending"

            def delivered() -> list[dict[str, Any]]:
                return [a for a in hook.alerts() if a["labels"].get("alertname") == ALERT and a["status"] == "firing"]

            got = wait(delivered, timeout=60, what=f"{ALERT} to reach the webhook", engines=engines)
            alert = got[0]
            assert alert["labels"]["queue"] == "default"
            assert alert["labels"]["job"] == "rackscale"
            assert alert["labels"]["severity"] == "warning"
            assert "queue default" in alert["annotations"]["description"]
            # The job the alert is about is still the one waiting.
            assert api.get("/v1/jobs/train-2").json()["status"] == "pending"
        finally:
            for engine in reversed(engines):
                engine.stop()
