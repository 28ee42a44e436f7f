"""Against a REAL Slurm 24.11 with topology/block (Debian 13 root, chroot; rackscale.slurm.block), 2 blocks x
4 nodes x 4 fake GPUs, topology.conf from rackscale's own ``block_conf``::

    block r000: r000-n00 r000-n01 r000-n02 r000-n03      BlockSizes=4,8
    block r001: r001-n00 r001-n01 r001-n02 r001-n03      (aggregated block r[000-001]: all 8)

The root is built once per session in a fresh /tmp/rs-block-root-* (debootstrap, ~1 min) and removed after,
or reused from $RACKSCALE_SLURM_BLOCK_ROOT (built there if it is not yet; kept). Skipped only when the
machine cannot do it (not root, no debootstrap/chroot/mount): the skip names what is missing."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.slurm.conftest import _drain

from rackscale.backends.slurm import SlurmBackend
from rackscale.bench.slurm_compare import Engine, compare
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import batch
from rackscale.slurm import block
from rackscale.slurm.block import BlockSlurm
from rackscale.slurm.commands import SlurmError, SlurmJob
from rackscale.slurm.importer import import_cluster

SPEC = GPUCluster.uniform(name="slurm-block-test", racks_per_region=2, nodes_per_rack=4, gpus_per_node=4)
TIMEOUT = 30.0


@pytest.fixture(scope="module")  # not the session's: its daemons would keep busy the host of every later test
def block_cluster(block_root: Path) -> Iterator[BlockSlurm]:
    emu = block.start(SPEC, block_root)
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture
def slurm(block_cluster: BlockSlurm) -> Iterator[BlockSlurm]:
    """The session's cluster, with no job left from an earlier test (before and after)."""
    _drain(block_cluster)
    yield block_cluster
    _drain(block_cluster)


def _wait(emu: BlockSlurm, job_id: str, *states: str, timeout: float = TIMEOUT) -> SlurmJob:
    deadline = time.monotonic() + timeout
    while True:
        j = emu.slurm.job(job_id)
        if j is not None and j.state in states:
            return j
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} not {states} after {timeout}s: {j}")
        time.sleep(0.1)


def _sleep(emu: BlockSlurm, *args: str) -> str:
    return emu.slurm.sbatch([*args, "--gres=gpu:4", "--output=/dev/null", "--wrap", "sleep 60"])


def test_slurm_24_11_reads_rackscales_block_conf_and_imports_back(slurm: BlockSlurm) -> None:
    assert "24.11" in slurm.slurm.run(["scontrol", "--version"]).stdout
    topo = slurm.slurm.topology()
    assert [(t.get("BlockName"), t.get("Nodes"), t.get("BlockSize")) for t in topo if "BlockName" in t] == [
        ("r000", "r000-n[00-03]", "4"),
        ("r001", "r001-n[00-03]", "4"),
    ]
    assert [t.get("BlockSize") for t in topo if "AggregatedBlock" in t] == ["8"]
    got = import_cluster(slurm.slurm)
    assert [(r.name, [got.nodes[n].name for n in r.nodes]) for r in got.racks] == [
        (r.name, [SPEC.nodes[n].name for n in r.nodes]) for r in SPEC.racks
    ]


@pytest.mark.parametrize(
    ("held", "args", "state", "racks"),
    [
        (["r000-n[00-01]"], ["--nodes=3"], "RUNNING", {"r001"}),
        (["r000-n[00-01]", "r001-n[00-01]"], ["--nodes=3"], "PENDING", set()),
        (["r000-n[00-01]", "r001-n[00-01]"], ["--nodes=4", "--segment=2"], "RUNNING", {"r000", "r001"}),
        ([], ["--nodes=5"], "RUNNING", {"r000", "r001"}),
    ],
    ids=[
        "3-nodes-go-to-the-block-with-room",
        "3-nodes-wait-though-4-are-free-in-two-blocks",
        "segments-of-2-use-what-each-block-has",
        "5-nodes-span-the-aggregated-block",
    ],
)
def test_slurms_block_placement(
    slurm: BlockSlurm, held: list[str], args: list[str], state: str, racks: set[str]
) -> None:
    """Slurm's own placement, which (a) of the comparison relies on: a job that fits in a block is never
    split over blocks (it waits instead), unless it asks for segments."""
    for nodes in held:  # two-node blockers, pinned
        _wait(slurm, _sleep(slurm, f"--nodelist={nodes}", "--nodes=2"), "RUNNING")
    job = _sleep(slurm, *args)
    if state == "PENDING":
        time.sleep(3)  # several scheduler passes (bf_interval=1)
        got = slurm.slurm.job(job)
        assert got is not None and got.state == "PENDING" and not got.nodes, got
        return
    got = _wait(slurm, job, state)
    rack_of = {n.name: SPEC.racks[n.rack].name for n in SPEC.nodes}
    assert {rack_of[n] for n in got.nodes} == racks, got.nodes


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodelist=r000-n00,r001-n00", "--nodes=2"], "Requested node configuration is not available"),
        (["--nodelist=r000-n[02-03],r001-n[00-01]", "--nodes=4", "--segment=2"], "topology configuration"),
    ],
    ids=["a-2-node-job-pinned-over-two-blocks", "a-node-list-with-segments"],
)
def test_slurm_refuses_a_pinned_job_split_over_blocks(slurm: BlockSlurm, args: list[str], message: str) -> None:
    """Why rackscale must ask for one rack on a block cluster: its default may split a gang, and a pinned
    split of a job that fits in one block is refused at sbatch (Slurm 24.11)."""
    with pytest.raises(SlurmError, match=message):
        _sleep(slurm, *args)


def test_the_backend_runs_a_pinned_job_and_explains_a_refused_split(slurm: BlockSlurm) -> None:
    data = Path(tempfile.mkdtemp(prefix="rs-data-", dir=slurm.chroot / "tmp"))  # inside the root: sbatch reads it
    try:
        backend = SlurmBackend(slurm.slurm, SPEC, data, poll_interval_s=0)
        backend.start(batch("ok", gpus=8, command=("sh", "-c", "echo hi; exit 3")), _on("ok", 5, 6), now=0.0)
        backend.start(batch("split", gpus=8, command=("true",)), _on("split", 3, 4), now=0.0)  # r000-n03 + r001-n00
        exits = {}
        deadline = time.monotonic() + TIMEOUT
        while len(exits) < 2 and time.monotonic() < deadline:
            exits.update({e.job: e for e in backend.poll(time.monotonic())})
            time.sleep(0.1)
        assert (exits["ok"].ok, exits["ok"].exit_code) == (False, 3), exits
        assert (data / "slurm" / "ok.out").read_text().strip() == "hi"  # written in the root, read on the host
        assert not exits["split"].ok and "ask for topology required: rack" in exits["split"].reason, exits["split"]
    finally:
        shutil.rmtree(data, ignore_errors=True)


def _on(job: str, *nodes: int) -> Placement:
    return Placement(job, tuple(NodeAlloc(n, (0, 1, 2, 3)) for n in nodes), len(nodes))


def test_compare_on_topology_block(slurm: BlockSlurm) -> None:
    a, b, c = compare(slurm.slurm, SPEC, 5, seed=2, spread_s=1.0, engine=Engine.block)
    assert a.label == "slurm topology/block" and c.label == "rackscale, one rack required"
    for r in (a, c):
        assert r.jobs == r.started == r.one_rack == 5 and r.refused == 0, r
    # rackscale's default may split a gang; Slurm refuses such a split, so whatever ran sat in one block.
    assert b.started + b.refused == 5 and b.one_rack == b.started, b
    for r in (a, b, c):
        assert 0 <= r.mean_wait_s < r.mean_jct_s <= r.makespan_s, r
