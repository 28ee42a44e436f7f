"""The runner reads the backend's health every step (backends/health.py) and hands it to the host: a node
reported down requeues the job on it (a PREEMPTED change in the store, with the part's reason), the next
cycle of the same step places it elsewhere and the backend starts it there; a health call that raises is the
backend's error (counted), never the step's."""

from __future__ import annotations

from pathlib import Path

from tests.service.conftest import HandClock

from rackscale.backends.health import NodeHealth, NodeState
from rackscale.backends.sim import SimBackend
from rackscale.model.placement import Placement
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobSpec
from rackscale.service.live import LiveCluster
from rackscale.service.runner import Runner, spec_of
from rackscale.service.store import Store

# 2 racks x 2 nodes x 4 GPUs: an 8-GPU gang takes one rack, and there is one more rack to move it to.
CLUSTER = GPUCluster.uniform(name="health", racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)


class HealthBackend(SimBackend):
    """The simulated backend with a health report the test sets (``boom``: the call raises)."""

    def __init__(self, cluster: GPUCluster) -> None:
        super().__init__(cluster)
        self.report: list[NodeHealth] = []
        self.boom = False
        self.started: list[tuple[str, list[str]]] = []

    def health(self, now: float) -> list[NodeHealth]:
        if self.boom:
            raise RuntimeError("health source unreachable")
        return list(self.report)

    def start(self, spec: JobSpec, placement: Placement, *, now: float) -> None:
        self.started.append((spec.name, sorted(CLUSTER.nodes[a.node].name for a in placement.allocs)))
        super().start(spec, placement, now=now)


def test_a_node_down_requeues_its_gang_elsewhere_and_a_raising_health_is_counted(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    backend = HealthBackend(CLUSTER)
    clock = HandClock()
    runner = Runner(LiveCluster(CLUSTER), store, backend, clock)  # type: ignore[arg-type]
    runner.recover()
    doc = {"name": "g", "kind": "training", "gpus": 8, "gpusPerWorker": 4, "durationEstimateSeconds": 1000}
    row = store.insert_job(name="g", queue="q", kind="training", gpus=8, priority=0, doc=doc, submitted=0.0)
    runner.submitted(spec_of(row), row.seq)
    runner.step()
    [(_, first)] = backend.started
    clock.t = 10.0
    backend.report = [NodeHealth(node=first[0], state=NodeState.DOWN, reason="Not responding")]
    kinds = [(c.job, str(c.type), c.reason) for c in runner.step()]
    assert kinds == [("g", "preempted", "NodeFailed"), ("g", "scheduled", "Scheduled")]
    assert len(backend.started) == 2 and not set(backend.started[1][1]) & set(first)
    got = store.get("g")
    assert got is not None and got.status == "running"
    events = [(e.type, e.reason) for e in store.events("g")]
    assert ("preempted", "NodeFailed") in events
    [msg] = [e.message for e in store.events("g") if e.reason == "NodeFailed"]
    assert msg.startswith(f"node {first[0]} DOWN (Not responding)")

    clock.t = 20.0
    backend.boom = True
    errors = runner.errors
    assert runner.step() == []  # the host keeps what it knew
    assert runner.errors == errors + 1 and runner.live.state.failed_gpus_count == 4

    clock.t = 30.0
    backend.boom, backend.report = False, []
    runner.step()
    assert runner.live.state.failed_gpus_count == 0
    store.close()


def test_a_backend_without_health_leaves_the_host_alone(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    runner = Runner(LiveCluster(CLUSTER), store, SimBackend(CLUSTER), HandClock())  # type: ignore[arg-type]
    runner.recover()
    runner.live.part_failed(node=CLUSTER.nodes[0].name, now=0.0, why="by hand")
    runner.step()
    assert runner.live.state.failed_gpus_count == 4 and runner.errors == 0
    store.close()
