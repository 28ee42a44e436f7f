"""The Slurm adapter's command prefix and root, the block importer, the block compare's job shapes, and what
the Slurm 24.11 engine says it lacks. Pure (no Slurm); the live side is tests/slurm/test_block.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackscale.backends.base import admitted
from rackscale.backends.slurm import SlurmBackend, SlurmBackendError, make_slurm_backend
from rackscale.bench.slurm_compare import SIZES, Engine, gang_sizes, slurm_flags
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobSpec, Level, TopologyConstraint, inference, training
from rackscale.slurm import block
from rackscale.slurm.commands import Slurm, SlurmError
from rackscale.slurm.importer import cluster_from_records


@pytest.mark.parametrize(
    ("inside", "want"),
    [("rs-1/slurm/j.sh", "/rs-1/slurm/j.sh"), (".", "/"), ("tmp/../tmp/x", "/tmp/x")],
    ids=["a-file-inside", "the-root-itself", "dot-dot-that-stays-inside"],
)
def test_a_path_inside_the_root_is_handed_over_as_slurm_sees_it(tmp_path: Path, inside: str, want: str) -> None:
    assert Slurm.in_root(tmp_path).path(tmp_path / inside) == want


@pytest.mark.parametrize("outside", ["../elsewhere", "/etc/passwd"], ids=["dot-dot-out", "absolute-elsewhere"])
def test_a_path_outside_the_root_is_refused_not_passed_on(tmp_path: Path, outside: str) -> None:
    with pytest.raises(SlurmError, match="outside"):
        Slurm.in_root(tmp_path / "root").path(tmp_path / "root" / outside)


def test_without_a_root_paths_pass_unchanged_and_the_prefix_goes_first(tmp_path: Path) -> None:
    assert Slurm().path(tmp_path / "x") == str(tmp_path / "x")
    # `env A=1 sh -c ...`: what runs is prefix + argv, with SLURM_CONF in the environment.
    proc = Slurm("/c/slurm.conf", prefix=("env", "A=1")).run(["sh", "-c", 'echo "$A $SLURM_CONF"'])
    assert proc.stdout.strip() == "1 /c/slurm.conf"


def test_a_tool_missing_from_the_root_names_the_root(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match=f"sbatch not found in {tmp_path}"):
        Slurm.in_root(tmp_path).sbatch(["--wrap", "true"])


def test_the_backend_hands_slurm_its_paths_inside_the_root(tmp_path: Path) -> None:
    cluster = GPUCluster.uniform(name="t", racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)
    backend = SlurmBackend(Slurm.in_root(tmp_path), cluster, tmp_path / "rs-x" / "data")
    args = backend.sbatch_args(training("j", 8), Placement("j", (NodeAlloc(2, (0, 1, 2, 3)),), 1))
    assert args[-1] == "/rs-x/data/slurm/j.sh" and (tmp_path / "rs-x/data/slurm/j.sh").is_file()
    assert "--output=/rs-x/data/slurm/j.out" in args and "--chdir=/rs-x/data/slurm" in args


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"slurm_root": "/no/such/root"}, "no such folder"),
        ({"slurm_root": ".", "slurm_conf": "/no/slurm.conf"}, "no such file in ."),
        ({"slurm_root": 3}, "must be a path"),
    ],
    ids=["root-missing", "conf-missing-inside-the-root", "root-not-a-path"],
)
def test_bad_slurm_root_options_are_refused(tmp_path: Path, options: dict[str, object], message: str) -> None:
    with pytest.raises(SlurmBackendError, match=message):
        make_slurm_backend(tmp_path, None, options)


def test_topology_block_records_make_racks_and_aggregated_blocks_are_ignored() -> None:
    """scontrol show topology of Slurm 24.11 with topology/block (as the live engine prints it)."""
    nodes = [
        {"NodeName": f"n{i}", "Gres": "gpu:4", "AvailableFeatures": f"r{i // 2},west", "CPUTot": "8"} for i in range(4)
    ]
    topo = [
        {"BlockName": "b0", "BlockIndex": "0", "Nodes": "n[0-1]", "BlockSize": "2"},
        {"BlockName": "b1", "BlockIndex": "1", "Nodes": "n[2-3]", "BlockSize": "2"},
        {"AggregatedBlock": "b[0-1]", "BlockIndex": "2", "Nodes": "n[0-3]", "BlockSize": "4"},
    ]
    got = cluster_from_records(nodes, topo)
    assert [(r.name, [got.nodes[n].name for n in r.nodes]) for r in got.racks] == [
        ("b0", ["n0", "n1"]),
        ("b1", ["n2", "n3"]),
    ]
    assert [g.name for g in got.regions] == ["west"]  # a block has no parent: the second node feature


@pytest.mark.parametrize(
    ("npr", "gpn", "want"),
    [(4, 4, SIZES), (18, 4, (20, 36, 56, 72)), (1, 8, (8,))],
    ids=["4x4-the-tree-default", "nvl72-18x4", "one-node-racks"],
)
def test_gang_sizes_are_quarters_of_a_rack_in_whole_nodes(npr: int, gpn: int, want: tuple[int, ...]) -> None:
    c = GPUCluster.uniform(name="s", racks_per_region=2, nodes_per_rack=npr, gpus_per_node=gpn)
    assert gang_sizes(c) == want


@pytest.mark.parametrize(
    ("engine", "nodes", "base", "flags"),
    [
        (Engine.tree, 3, 4, ["--switches=1"]),
        (Engine.block, 18, 18, []),  # fits a block: Slurm's block rule keeps it in one, no flag needed
        (Engine.block, 36, 18, ["--segment=18"]),
        (Engine.block, 20, 18, []),  # 18 does not divide 20: Slurm would refuse the segment size
    ],
    ids=["tree-switches", "block-fits-one", "block-two-whole-blocks", "block-no-even-segments"],
)
def test_how_slurm_is_asked_to_keep_a_gang_together(engine: Engine, nodes: int, base: int, flags: list[str]) -> None:
    assert slurm_flags(engine, nodes, base) == flags


def test_the_engine_names_what_this_machine_lacks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What the live fixture's skip message says: not root, and each tool missing (debootstrap only while
    the root is not built yet)."""
    monkeypatch.setattr(block.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(block.shutil, "which", lambda tool, path=None: None if tool == "debootstrap" else "/x")
    assert block.missing(tmp_path) == [
        "root (debootstrap, mount and chroot need uid 0)",
        "debootstrap (apt-get install debootstrap)",
    ]
    for p in block.NEEDED:
        (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / p).touch()
    assert block.missing(tmp_path) == ["root (debootstrap, mount and chroot need uid 0)"]


def test_a_root_with_something_mounted_in_it_is_not_deleted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    monkeypatch.setattr(block, "mounts_under", lambda root: [root / "dev"])
    with pytest.raises(SlurmError, match="still mounted"):
        block.remove_root(tmp_path)
    assert (tmp_path / "dev").is_dir()


# (the job, on a Slurm with topology/block?, the required level the scheduler then sees)
ADMIT = [
    pytest.param(training("fits", 8), True, "rack", id="block-a-gang-that-fits-a-block-stays-in-one"),
    pytest.param(training("big", 12), True, None, id="block-a-gang-larger-than-a-block-may-span"),
    pytest.param(training("fits", 8), False, None, id="tree-left-as-it-is"),
    pytest.param(inference("svc", 2, gpus_per_replica=4), True, "rack", id="block-inference-keeps-its-own"),
    pytest.param(
        training("region", 8, topology=TopologyConstraint(required=Level.REGION)), True, "region", id="block-own-level"
    ),
]


@pytest.mark.parametrize(("job", "blocks", "required"), ADMIT)
def test_a_block_slurm_keeps_a_gang_that_fits_a_block_in_one(
    tmp_path: Path, job: JobSpec, blocks: bool, required: str | None
) -> None:
    """Slurm 24.11's topology/block refuses a --nodelist spreading a gang that fits one block (test_block.py
    shows it live), so the backend admits such a gang as one that requires a rack: the scheduler waits for
    one instead of splitting it. Racks of 2 nodes x 4 GPUs = 8 GPUs here."""
    cluster = GPUCluster.uniform(name="t", racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)
    backend = SlurmBackend(Slurm(), cluster, tmp_path / "data", blocks=blocks)
    got = admitted(backend, job)
    assert (got.topology.required.value if got.topology.required else None) == required
    assert got.name == job.name and got.total_gpus == job.total_gpus
