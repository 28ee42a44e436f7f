"""`--prometheus-url` (ServiceConfig.prometheus_url) gives the runner's autoscaler a Prometheus to read."""

from __future__ import annotations

from pathlib import Path

from tests.service.conftest import small_cluster

from rackscale.service.app import ServiceConfig, build_service
from rackscale.service.load_signal import NoSource, PrometheusSource


def test_a_prometheus_url_reaches_the_autoscaler(tmp_path: Path) -> None:
    svc = build_service(
        ServiceConfig(data_dir=tmp_path / "a", cluster=small_cluster(), prometheus_url="http://127.0.0.1:9"),
        start=False,
    )
    try:
        source = svc.ctx.runner.autoscaler.source
        assert isinstance(source, PrometheusSource) and source.url == "http://127.0.0.1:9"
    finally:
        svc.close()
    svc = build_service(ServiceConfig(data_dir=tmp_path / "b", cluster=small_cluster()), start=False)
    try:
        assert isinstance(svc.ctx.runner.autoscaler.source, NoSource)  # holds, saying no Prometheus is configured
    finally:
        svc.close()
