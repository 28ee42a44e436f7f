"""Fixtures: the fake API server, real ``kubernetes`` clients pointed at it, and node/pod builders."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client  # the dev extra installs it (pip install -e '.[dev]')
from tests.kube.fake_apiserver import FakeAPIServer
from tests.service.conftest import wait_for as service_wait_for

from rackscale.kube.scheduler import KubeScheduler, KubeSchedulerConfig

Obj = dict[str, Any]


wait_for = service_wait_for  # one polling helper for every test package


def node(name: str, rack: str | None, *, gpus: int = 8, region: str = "region-a", product: str = "H100") -> Obj:
    labels = {
        "kubernetes.io/hostname": name,
        "topology.kubernetes.io/region": region,
        "nvidia.com/gpu.product": product,
    }
    if rack is not None:
        labels["nvidia.com/gpu.clique"] = rack
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus), "pods": "110"},
            "capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus), "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(
    name: str,
    *,
    gpus: int = 8,
    scheduler: str = "rackscale",
    group: str | None = None,
    min_member: int | None = None,
    priority: int | None = None,
    node_name: str | None = None,
    namespace: str = "default",
) -> Obj:
    ann: dict[str, str] = {}
    if group is not None:
        ann["rackscale.io/pod-group"] = group
    if min_member is not None:
        ann["rackscale.io/min-member"] = str(min_member)
    spec: Obj = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "main",
                "image": "trainer:latest",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"cpu": "4", "memory": "32Gi"}},
            }
        ],
    }
    if priority is not None:
        spec["priority"] = priority
    if node_name is not None:
        spec["nodeName"] = node_name
    return {
        "metadata": {"name": name, "namespace": namespace, "annotations": ann},
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def add_racks(fake: FakeAPIServer, racks: int = 4, nodes: int = 4, gpus: int = 8) -> None:
    for r in range(racks):
        for n in range(nodes):
            fake.put("nodes", node(f"r{r}-n{n}", f"clique-{r}", gpus=gpus))


def rack_of(fake: FakeAPIServer, node_name: str) -> str:
    n = fake.get("nodes", node_name)
    assert n is not None
    return str(n["metadata"]["labels"]["nvidia.com/gpu.clique"])


def bound_to(fake: FakeAPIServer, key: str) -> str | None:
    p = fake.get("pods", key)
    return None if p is None else p["spec"].get("nodeName")


def events_for(fake: FakeAPIServer, name: str, reason: str | None = None) -> list[Obj]:
    return [
        e
        for e in fake.items("events")
        if (e.get("involvedObject") or {}).get("name") == name and (reason is None or e.get("reason") == reason)
    ]


@pytest.fixture
def fake() -> Iterator[FakeAPIServer]:
    s = FakeAPIServer().start()
    yield s
    s.stop()


@pytest.fixture
def api_client(fake: FakeAPIServer) -> Callable[[], client.ApiClient]:
    made: list[client.ApiClient] = []

    def make() -> client.ApiClient:
        cfg = client.Configuration(host=fake.host)
        c = client.ApiClient(cfg)
        made.append(c)
        return c

    return make


FAST = KubeSchedulerConfig(
    lease_duration_s=1.5,
    renew_interval_s=0.2,
    watch_timeout_s=5,
    retry_interval_s=0.5,
    report_interval_s=60.0,
    backoff_s=0.1,
)


@pytest.fixture
def start_scheduler(api_client: Callable[[], client.ApiClient]) -> Iterator[Callable[..., KubeScheduler]]:
    running: list[KubeScheduler] = []

    def start(config: KubeSchedulerConfig = FAST, **kw: Any) -> KubeScheduler:
        s = KubeScheduler(api_client(), config, **kw).start()
        running.append(s)
        return s

    yield start
    for s in running:
        s.stop(release=False, timeout=3.0)
