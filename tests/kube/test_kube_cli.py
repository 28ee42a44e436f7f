"""`rackscale kube-scheduler`: the settings file the Kubernetes manifest mounts loads through the command's
own loader, the health server answers the probes the manifest declares, and the scrape it announces points
at that server."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from rackscale.cli.app import app
from rackscale.cli.kube import load_settings, serve_health

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def test_the_manifests_settings_load(tmp_path: Path) -> None:
    cm = yaml.safe_load((DEPLOY / "scheduler-config.yaml").read_text())
    f = tmp_path / "scheduler.yaml"
    f.write_text(cm["data"]["scheduler.yaml"])
    assert load_settings(f) == {
        "scheduler_name": "rackscale",
        "rack_label": "nvidia.com/gpu.clique",
        "region_label": "topology.kubernetes.io/region",
        "gpu_resource": "nvidia.com/gpu",
        "lease_name": "rackscale",
        "lease_namespace": "kube-system",
    }
    args = yaml.safe_load((DEPLOY / "scheduler-deployment.yaml").read_text())["spec"]["template"]["spec"]
    container = args["containers"][0]
    assert "--config=/etc/rackscale/scheduler.yaml" in container["args"]
    port = next(
        p["containerPort"] for p in container["ports"] if p["name"] == container["livenessProbe"]["httpGet"]["port"]
    )
    assert f"--health-port={port}" in container["args"]
    # Prometheus finds /metrics there (pod annotations), and the example config's job scrapes that port.
    annotations = yaml.safe_load((DEPLOY / "scheduler-deployment.yaml").read_text())["spec"]["template"]["metadata"][
        "annotations"
    ]
    assert annotations == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(port),
        "prometheus.io/path": "/metrics",
    }
    jobs = yaml.safe_load((DEPLOY.parent / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]
    (job,) = [j for j in jobs if j["job_name"] == "rackscale-kube-scheduler"]
    assert job["metrics_path"] == "/metrics" and job["static_configs"][0]["targets"] == [f"127.0.0.1:{port}"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        pytest.param("schedulerName: [a]", "scheduler_name", id="not-a-string"),
        pytest.param("schedulerNme: x", "unknown key 'schedulerNme'", id="typo"),
        pytest.param("- a", "expected a mapping", id="a-list"),
        pytest.param("a: [", "cannot read", id="bad-yaml"),
        # Keys rackscale reads whatever the file says: another value would be ignored without a word.
        pytest.param(
            "annotations: {podGroup: example.com/group}",
            "annotations.podGroup is 'example.com/group', but rackscale reads 'rackscale.io/pod-group' only",
            id="another-pod-group-key",
        ),
        pytest.param("annotations: {minMember: x/y}", "reads 'rackscale.io/min-member' only", id="another-min-member"),
        pytest.param("annotations: {minGpus: a/b}", "unknown key annotations.'minGpus'", id="annotation-unknown"),
        pytest.param(
            "labels: {node: example.com/host}", "reads 'kubernetes.io/hostname' only", id="another-node-label"
        ),
        pytest.param("labels: {rak: example.com/rack}", "unknown key labels.'rak'", id="label-typo"),
        pytest.param("leaderElection: {leaseNme: x}", "unknown key leaderElection.'leaseNme'", id="lease-typo"),
        pytest.param("labels: [rack]", "labels must be a mapping", id="labels-a-list"),
    ],
)
def test_bad_settings_name_the_problem(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(text)
    with pytest.raises(ValueError, match=needle):
        load_settings(f)


class _Sched:
    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.synced = {"nodes": False, "pods": False}


def _get(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_health_endpoints_follow_the_scheduler() -> None:
    sched = _Sched()
    server = serve_health(sched, 0)
    port = server.server_address[1]
    try:
        assert (_get(port, "/healthz"), _get(port, "/readyz")) == (200, 503)  # alive, caches not synced yet
        sched.synced.update(nodes=True, pods=True)
        assert _get(port, "/readyz") == 200
        sched.stopping.set()
        assert (_get(port, "/healthz"), _get(port, "/readyz")) == (503, 503)
        assert _get(port, "/nope") == 404
        assert _get(port, "/metrics") == 404  # no registry given: nothing to export
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    ("price", "words"),
    [
        pytest.param("-1", "must be at least 0", id="negative"),
        pytest.param("nan", "must be at least 0", id="nan"),
        pytest.param("inf", "inf is not a price", id="infinite"),
        pytest.param("2,5", "must be a number", id="not-a-number"),
        pytest.param("2.5", "cannot load the Kubernetes configuration", id="a-price-goes-on-to-connect"),
    ],
)
def test_the_price_is_a_finite_number_from_0(tmp_path: Path, price: str, words: str) -> None:
    """--price-per-gpu-hour (rackscale_cost_per_hour): refused before anything connects unless a finite number >= 0."""
    out = CliRunner().invoke(
        app, ["kube-scheduler", "--price-per-gpu-hour", price, "--kubeconfig", str(tmp_path / "none")]
    )
    assert out.exit_code == 2 and words in out.output, out.output
