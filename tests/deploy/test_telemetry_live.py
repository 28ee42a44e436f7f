"""The real-telemetry rules on a real Prometheus: it scrapes the service (modelled series) and a tiny exporter
serving dcgm-exporter / node_exporter / blackbox_exporter-shaped series, and the `rackscale:*` rules pick the
real series when present and rackscale's model otherwise, saying which in `source`.

    rackscale serve ----------------------.   (rackscale_gpu_utilization_ratio, ..._network_latency_p99_seconds)
    exporter /dcgm   (job dcgm)  ---------+--> Prometheus, deploy/prometheus/rules.yml --> rackscale:* {source}
    exporter /node   (job node)  ---------|
    exporter /probe  (job blackbox-rdma, tier="rdma") -'
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml
from tests.deploy.engines import Engine, start_prometheus
from tests.deploy.exporter import Exporter, dcgm_gpu_util, fake_exporter, probe
from tests.service.conftest import serve_in_thread, small_cluster

from rackscale.service.app import ServiceConfig

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "rules.yml"
Sample = dict[str, Any]


def short_window_rules(dest: Path) -> None:
    """rules.yml with its 5-minute windows cut to 5 seconds: `rate()` and `quantile_over_time()` over 5 min
    of a few seconds of data divide by the whole window. The expressions are otherwise the real file's."""
    text, n = re.subn(r"\[5m\]", "[5s]", RULES.read_text())
    assert n >= 4, "expected the telemetry rules' [5m] windows in rules.yml"
    dest.write_text("# deploy/prometheus/rules.yml with [5m] windows cut to [5s] for a live test.\n" + text)


def query(prom: Engine, expr: str) -> list[Sample]:
    r = httpx.get(f"{prom.url}/api/v1/query", params={"query": expr}, timeout=2)
    r.raise_for_status()
    result: list[Sample] = r.json()["data"]["result"]
    return result


def until(prom: Engine, what: str, pred: Callable[[], Any], *, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            log = prom.log_tail()
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n--- prometheus log:\n{log}")
        time.sleep(0.2)


def only(prom: Engine, expr: str, **labels: str) -> Callable[[], Sample | None]:
    """A check: ``expr`` has exactly one series, and it carries ``labels``."""

    def check() -> Sample | None:
        got = query(prom, expr)
        if len(got) == 1 and all(got[0]["metric"].get(k) == v for k, v in labels.items()):
            return got[0]
        return None

    return check


def value(sample: Sample) -> float:
    return float(sample["value"][1])


def prometheus_config(dest: Path, *, service: str, exporter: Exporter) -> None:
    target = exporter.url.removeprefix("http://")
    dest.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": ["rules.yml"],
                "scrape_configs": [
                    {"job_name": "rackscale", "static_configs": [{"targets": [service]}]},
                    {"job_name": "dcgm", "metrics_path": "/dcgm", "static_configs": [{"targets": [target]}]},
                    {"job_name": "node", "metrics_path": "/node", "static_configs": [{"targets": [target]}]},
                    # The operator names a probe's tier with a target label, as in deploy/prometheus/prometheus.yml.
                    {
                        "job_name": "blackbox-rdma",
                        "metrics_path": "/probe",
                        "static_configs": [{"targets": [target], "labels": {"tier": "rdma"}}],
                    },
                ],
            }
        )
    )


def test_rules_take_the_real_series_when_present_and_the_model_otherwise(tmp_path: Path) -> None:
    cfg = ServiceConfig(data_dir=tmp_path / "data", cluster=small_cluster(), speed=1.0, interval_s=0.05, no_auth=True)
    with serve_in_thread(cfg) as live, live.client(None) as api, fake_exporter() as exporter:
        # One 72-GPU job on 144 GPUs: the modelled utilisation is 0.5.
        r = api.post("/v1/jobs", json={"name": "train", "kind": "training", "gpus": 72, "durationEstimateSeconds": 1e7})
        assert r.status_code == 201, r.text
        exporter.set("/dcgm", "")  # the exporter is up but has no GPU series yet
        exporter.set("/probe", probe(70e-6))
        exporter.disk_rates["/node"] = (1000.0, 500.0)

        short_window_rules(tmp_path / "rules.yml")
        prometheus_config(tmp_path / "prometheus.yml", service=live.url.removeprefix("http://"), exporter=exporter)
        prom = start_prometheus(tmp_path / "prometheus.yml", tmp_path)
        try:
            # No DCGM series: the modelled value, from the service, with source="model".
            got = until(
                prom,
                "the modelled utilisation",
                only(prom, "rackscale:gpu_utilization:ratio", source="model", job="rackscale"),
            )
            assert value(got) == 0.5
            assert query(prom, 'rackscale:gpu_utilization:ratio{source="dcgm"}') == []

            # The exporter starts serving two GPUs at 40% and 80%: the rule takes DCGM's mean, and only it.
            exporter.set("/dcgm", dcgm_gpu_util("gpu1", [40.0, 80.0]))
            got = until(prom, "the DCGM utilisation", only(prom, "rackscale:gpu_utilization:ratio", source="dcgm"))
            assert abs(value(got) - 0.6) < 1e-9
            assert "instance" not in got["metric"]  # a mean over every GPU, not one rackscale instance

            # DCGM's series go (exporter restarted without GPUs): stale at the next scrape, back to the model.
            exporter.set("/dcgm", "")
            got = until(
                prom, "the fallback to the model", only(prom, "rackscale:gpu_utilization:ratio", source="model")
            )
            assert value(got) == 0.5

            # Network: the rdma probe's 70 us replaces the model's rdma tier; nvlink (no probe) stays modelled.
            rdma = until(
                prom,
                "the probed rdma p99",
                only(prom, 'rackscale:network_latency_p99:seconds{tier="rdma"}', source="probe"),
            )
            assert abs(value(rdma) - 70e-6) < 1e-12
            nvlink = until(
                prom,
                "the modelled nvlink p99",
                only(prom, 'rackscale:network_latency_p99:seconds{tier="nvlink"}', source="model"),
            )
            raw = query(prom, 'rackscale_network_latency_p99_seconds{tier="nvlink"}')
            assert len(raw) == 1 and value(nvlink) == value(raw[0])
            assert query(prom, 'rackscale:network_latency_p99:seconds{tier="rdma",source="model"}') == []

            # Storage: node_exporter's reads (1000/s) + writes (500/s), per node, source node_exporter. The
            # rate reads low until the window holds 5 s of samples, so wait for it to settle.
            iops_rule = only(prom, "rackscale:storage_iops:rate5m", source="node_exporter")

            def settled_iops() -> Sample | None:
                got = iops_rule()
                return got if got is not None and abs(value(got) - 1500.0) < 150.0 else None

            iops = until(prom, "1500 IOPS from node_exporter's counters", settled_iops)
            assert iops["metric"]["instance"] == exporter.url.removeprefix("http://")
        finally:
            prom.stop()
