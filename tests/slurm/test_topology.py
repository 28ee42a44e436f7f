"""topology.conf (tree, block) and node lines from a rackscale cluster; Slurm hostlist expressions. Pure."""

from __future__ import annotations

import pytest

from rackscale.model.topology import GPUCluster
from rackscale.slurm.hostlist import compress, expand
from rackscale.slurm.importer import cluster_from_records, cluster_yaml, gres_gpus
from rackscale.slurm.topology import block_sizes, node_lines, topology_conf

ONE_REGION = GPUCluster.uniform(name="a", racks_per_region=2, nodes_per_rack=3, gpus_per_node=4)
TWO_REGIONS = GPUCluster.uniform(name="b", regions=2, racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)
NVL72 = GPUCluster.uniform(name="c", racks_per_region=4)


@pytest.mark.parametrize(
    ("cluster", "fmt", "text"),
    [
        (
            ONE_REGION,
            "tree",
            "# topology/tree for a: rack switches (NVLink domains) > region switches > spine\n"
            "SwitchName=r000 Nodes=r000-n[00-02]\n"
            "SwitchName=r001 Nodes=r001-n[00-02]\n"
            "SwitchName=region-0 Switches=r[000-001]\n",
        ),
        (
            TWO_REGIONS,
            "tree",
            "# topology/tree for b: rack switches (NVLink domains) > region switches > spine\n"
            "SwitchName=g0-r000 Nodes=g0-r000-n[00-01]\n"
            "SwitchName=g0-r001 Nodes=g0-r001-n[00-01]\n"
            "SwitchName=g1-r000 Nodes=g1-r000-n[00-01]\n"
            "SwitchName=g1-r001 Nodes=g1-r001-n[00-01]\n"
            "SwitchName=region-0 Switches=g0-r[000-001]\n"
            "SwitchName=region-1 Switches=g1-r[000-001]\n"
            "SwitchName=spine Switches=region-[0-1]\n",
        ),
        (
            ONE_REGION,
            "block",
            "# topology/block (Slurm >= 23.11) for a: one block per NVLink domain\n"
            "BlockName=r000 Nodes=r000-n[00-02]\n"
            "BlockName=r001 Nodes=r001-n[00-02]\n"
            "BlockSizes=3,6\n",
        ),
        (
            NVL72,
            "block",
            "# topology/block (Slurm >= 23.11) for c: one block per NVLink domain\n"
            "BlockName=r000 Nodes=r000-n[00-17]\n"
            "BlockName=r001 Nodes=r001-n[00-17]\n"
            "BlockName=r002 Nodes=r002-n[00-17]\n"
            "BlockName=r003 Nodes=r003-n[00-17]\n"
            "BlockSizes=18,36,72\n",
        ),
    ],
)
def test_topology_conf_exact_text(cluster: GPUCluster, fmt: str, text: str) -> None:
    assert topology_conf(cluster, fmt) == text


def test_block_sizes_are_power_of_two_multiples_of_the_smallest_rack() -> None:
    three = GPUCluster.uniform(racks_per_region=3)
    assert block_sizes(three) == [18, 36]  # 72 > 3 racks' 54 nodes
    assert block_sizes(GPUCluster.uniform(racks_per_region=1)) == [18]
    with pytest.raises(ValueError, match="tree or block"):
        topology_conf(three, "torus")


def test_node_lines_carry_gres_and_rack_region_features() -> None:
    assert node_lines(ONE_REGION) == (
        "NodeName=r000-n[00-02] Gres=gpu:4 Features=r000,region-0\n"
        "NodeName=r001-n[00-02] Gres=gpu:4 Features=r001,region-0\n"
    )
    assert "CPUs=144 RealMemory=1048576" in node_lines(ONE_REGION, resources=True)


@pytest.mark.parametrize(
    ("names", "expr"),
    [
        (["node01", "node02", "node03"], "node[01-03]"),
        (["node01"], "node01"),
        (["n1", "n2", "n4", "n5", "n7"], "n[1-2,4-5,7]"),
        (["r000-n00", "r000-n01", "r001-n00"], "r000-n[00-01],r001-n00"),
        (["login", "n03", "n01", "n02"], "login,n[01-03]"),
        (["a9", "a10", "a11"], "a9,a[10-11]"),  # widths differ: not one zero-padded range
        (["x1", "x1"], "x1"),
    ],
)
def test_hostlist_compress_and_expand(names: list[str], expr: str) -> None:
    assert compress(names) == expr
    assert sorted(expand(expr)) == sorted(set(names))


def test_hostlist_expand_forms() -> None:
    assert expand("tux[0-2,12],s[1-2]x") == ["tux0", "tux1", "tux2", "tux12", "s1x", "s2x"]
    assert expand("(null)") == [] and expand("") == []
    with pytest.raises(ValueError):
        expand("n[1-")
    with pytest.raises(ValueError):
        expand("n[a-b]")


def test_gres_parsing() -> None:
    assert gres_gpus("gpu:4") == (4, None)
    assert gres_gpus("gpu:h100:8(S:0-1)") == (8, "h100")
    assert gres_gpus("(null)") == (0, None)


def test_import_without_topology_uses_features_and_names_pools_when_not_uniform() -> None:
    nodes = [
        {
            "NodeName": "a1",
            "Gres": "gpu:h100:8",
            "AvailableFeatures": "rackA,west",
            "CPUTot": "64",
            "RealMemory": "1024",
        },
        {
            "NodeName": "a2",
            "Gres": "gpu:h100:8",
            "AvailableFeatures": "rackA,west",
            "CPUTot": "64",
            "RealMemory": "1024",
        },
        {
            "NodeName": "b1",
            "Gres": "gpu:h100:8",
            "AvailableFeatures": "rackB,west",
            "CPUTot": "64",
            "RealMemory": "1024",
        },
    ]
    c = cluster_from_records(nodes, [])
    assert [r.name for r in c.racks] == ["rackA", "rackB"] and c.total_gpus == 24 and c.gpu_models == ("H100",)
    text = cluster_yaml(c)
    assert "pools:" in text and "NOTE" in text
    from rackscale.loaders import parse_cluster_text

    back = parse_cluster_text(text)
    assert back.total_gpus == 24 and len(back.racks) == 2


def test_the_batch_script_quotes_values_and_never_writes_a_non_identifier_name(tmp_path: object) -> None:
    """The spec refuses such names (a 422 at the API); a JobSpec built in code is guarded here too."""
    from pathlib import Path

    from rackscale.backends.slurm import SlurmBackend, slurm_priority
    from rackscale.model.placement import NodeAlloc, Placement
    from rackscale.model.workload import training
    from rackscale.slurm.commands import Slurm

    assert isinstance(tmp_path, Path)
    cluster = GPUCluster.uniform(name="t", racks_per_region=1)
    backend = SlurmBackend(Slurm(), cluster, tmp_path)
    spec = training(
        "j", 4, command=("echo", "a b; $(x)"), env=(("OK_1", "v w'x"), ("BAD;rm -rf /", "1")), priority=1_000_000
    )
    args = backend.sbatch_args(spec, Placement("j", (NodeAlloc(0, (0, 1, 2, 3)),), 4))
    script = Path(args[-1]).read_text().splitlines()
    assert script == ["#!/bin/sh", "export OK_1='v w'\"'\"'x'", "exec echo 'a b; $(x)'"]
    assert f"--priority={slurm_priority(1_000_000)}" in args and "--nodelist=r000-n00" in args
    assert slurm_priority(0) < slurm_priority(1_000_000) and slurm_priority(-5_000_000) == 1
