"""``topology.conf`` (and node lines for ``slurm.conf``) from a rackscale cluster.

- ``tree`` (topology/tree, every Slurm version incl. 22.05): one leaf switch per rack (NVLink domain) with its
  nodes, one switch per region above its racks, and a ``spine`` above the regions when there are several.
- ``block`` (topology/block, Slurm >= 23.11): one ``BlockName`` per rack and ``BlockSizes``: the base block
  size (nodes of the smallest rack) and its power-of-two multiples up to the whole cluster, as Slurm requires
  (each size a power-of-two multiple of the one before).
"""

from __future__ import annotations

from rackscale.model.topology import GPUCluster
from rackscale.slurm.hostlist import compress

FORMATS = ("tree", "block")
SPINE = "spine"


def tree_conf(cluster: GPUCluster) -> str:
    lines = [f"# topology/tree for {cluster.name}: rack switches (NVLink domains) > region switches > spine"]
    for rack in cluster.racks:
        lines.append(f"SwitchName={rack.name} Nodes={compress(cluster.nodes[n].name for n in rack.nodes)}")
    for region in cluster.regions:
        lines.append(f"SwitchName={region.name} Switches={compress(cluster.racks[r].name for r in region.racks)}")
    if len(cluster.regions) > 1:
        lines.append(f"SwitchName={SPINE} Switches={compress(g.name for g in cluster.regions)}")
    return "\n".join(lines) + "\n"


def block_sizes(cluster: GPUCluster) -> list[int]:
    base = min(len(r.nodes) for r in cluster.racks)
    sizes = [base]
    while sizes[-1] * 2 <= base * len(cluster.racks):
        sizes.append(sizes[-1] * 2)
    return sizes


def block_conf(cluster: GPUCluster) -> str:
    lines = [f"# topology/block (Slurm >= 23.11) for {cluster.name}: one block per NVLink domain"]
    for rack in cluster.racks:
        lines.append(f"BlockName={rack.name} Nodes={compress(cluster.nodes[n].name for n in rack.nodes)}")
    lines.append(f"BlockSizes={','.join(map(str, block_sizes(cluster)))}")
    return "\n".join(lines) + "\n"


def topology_conf(cluster: GPUCluster, fmt: str = "tree") -> str:
    if fmt == "tree":
        return tree_conf(cluster)
    if fmt == "block":
        return block_conf(cluster)
    raise ValueError(f"unknown topology format {fmt!r} (use tree or block)")


def node_lines(cluster: GPUCluster, *, resources: bool = False) -> str:
    """``NodeName=`` lines for slurm.conf, one per rack: GPUs as gres, rack and region as node features.
    ``resources``: also ``CPUs=`` and ``RealMemory=`` from the spec."""
    lines: list[str] = []
    for rack in cluster.racks:
        first = cluster.nodes[rack.nodes[0]]
        extra = f" CPUs={max(1, first.cpu_milli // 1000)} RealMemory={first.memory_mib}" if resources else ""
        names = compress(cluster.nodes[n].name for n in rack.nodes)
        region = cluster.regions[rack.region].name
        lines.append(f"NodeName={names} Gres=gpu:{rack.gpus_per_node}{extra} Features={rack.name},{region}")
    return "\n".join(lines) + "\n"
