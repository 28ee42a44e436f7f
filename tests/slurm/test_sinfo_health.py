"""``sinfo -N -h -o '%N|%T|%E'`` lines -> NodeHealth (slurm/commands.py), and the Slurm backend's health
read: throttled to ``health_interval_s``, at once after a poll saw a job end NODE_FAIL. No Slurm needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackscale.backends.slurm import SlurmBackend
from rackscale.host.parts import NodeHealth, NodeState
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import training
from rackscale.slurm.commands import Slurm, SlurmJob, parse_sinfo_health


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("n1|idle|none", None),
        ("n1|allocated|none", None),
        ("n1|mixed|none", None),
        ("n1|down*|Not responding", (NodeState.DOWN, "Not responding")),
        ("n1|down|admin took it", (NodeState.DOWN, "admin took it")),
        ("n1|idle*|none", (NodeState.NOT_RESPONDING, "idle*")),
        ("n1|allocated*|none", (NodeState.NOT_RESPONDING, "allocated*")),
        ("n1|drained|firmware", (NodeState.DRAIN, "firmware")),
        ("n1|draining|firmware", (NodeState.DRAIN, "firmware")),
        ("n1|drained*|firmware", (NodeState.DRAIN, "firmware")),
        ("n1|fail|bad dimm", (NodeState.FAIL, "bad dimm")),
        ("n1|failing|bad dimm", (NodeState.DRAIN, "bad dimm")),
        ("n1|idle+drain|x", (NodeState.DRAIN, "x")),
        ("n1|down+drain*|x", (NodeState.DOWN, "x")),
        ("n1|inval|bad gres", (NodeState.DOWN, "bad gres")),
        ("n1|idle~|none", None),  # powered off by power saving: Slurm powers it up for a job
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_sinfo_states_map_to_health(line: str, want: tuple[NodeState, str] | None) -> None:
    got = parse_sinfo_health(line + "\n")
    assert [(h.node, h.state, h.reason) for h in got] == ([] if want is None else [("n1", *want)])


def test_a_node_in_two_partitions_is_reported_once() -> None:
    got = parse_sinfo_health("n1|down*|Not responding\nn1|down*|Not responding\nn2|idle|none\n")
    assert [h.node for h in got] == ["n1"]


class FakeSlurm(Slurm):
    """Counts the sinfo reads; answers a fixed job table."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.table: dict[str, SlurmJob] = {}

    def node_health(self) -> list[NodeHealth]:
        self.reads += 1
        return parse_sinfo_health("r000-n00|down*|Not responding\n")

    def jobs(self, *, uid: int | None = None) -> dict[str, SlurmJob]:
        return dict(self.table)  # every job is the service's own here

    def user_id(self) -> int:
        return 0


def job(state: str) -> SlurmJob:
    return SlurmJob("7", "rs-g", state, "None", 0, 0, ("r000-n00",), "", "", "", "")


def test_health_is_read_at_its_interval_and_at_once_after_a_node_fail(tmp_path: Path) -> None:
    cluster = GPUCluster.uniform(name="t", racks_per_region=1, nodes_per_rack=2, gpus_per_node=4)
    slurm = FakeSlurm()
    b = SlurmBackend(slurm, cluster, tmp_path, poll_interval_s=0.5, health_interval_s=5.0)
    assert [h.state for h in b.health(0.0)] == [NodeState.DOWN] and slurm.reads == 1
    b.health(1.0)
    assert slurm.reads == 1  # cached within the interval
    b._jobs["g"] = "7"
    slurm.table = {"7": job("NODE_FAIL")}
    [ex] = b.poll(2.0)
    assert not ex.ok and "NODE_FAIL" in ex.reason
    b.health(2.0)
    assert slurm.reads == 2  # at once: the runner requeues the job before the failed exit reaches it
    b.health(3.0)
    assert slurm.reads == 2
    b.health(7.5)
    assert slurm.reads == 3


def test_jobs_are_submitted_without_slurms_own_requeue(tmp_path: Path) -> None:
    cluster = GPUCluster.uniform(name="t", racks_per_region=1, nodes_per_rack=2, gpus_per_node=4)
    b = SlurmBackend(FakeSlurm(), cluster, tmp_path)
    assert "--no-requeue" in b.sbatch_args(training("j", 4), Placement("j", (NodeAlloc(0, (0, 1, 2, 3)),), 1))
