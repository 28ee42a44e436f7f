"""A running Slurm as a rackscale cluster: nodes from ``scontrol show nodes``, racks from the leaf switches of
``scontrol show topology`` (topology/tree) or its base blocks (``BlockName``, topology/block; aggregated
blocks are no rack), else the first node feature (as ``rackscale slurm topology --nodes`` writes them);
regions from the switch above each leaf (else the second feature, else ``region-0``).

:func:`import_cluster` keeps Slurm's node names (what the ``slurm`` backend needs). :func:`cluster_yaml`
writes a cluster spec that :func:`rackscale.loaders.load_cluster` reads: the uniform form when the layout is
uniform and the names follow rackscale's scheme (``r000-n00``: an exact round trip), else one pool per kind
of rack (then the node names of the spec differ from Slurm's; the file says so in a comment).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import yaml

from rackscale.model.topology import GPUCluster, NodeDecl
from rackscale.slurm.commands import Slurm
from rackscale.slurm.hostlist import compress, expand

DEFAULT_GPU_MODEL = "GB200"
_GRES_GPU = re.compile(r"(?:^|,)gpu(?::([A-Za-z][^:(,]*))?:(\d+)")


def gres_gpus(gres: str) -> tuple[int, str | None]:
    """``gpu:4``, ``gpu:h100:8(S:0-1)``, ``gpu:a100:2,gpu:h100:2`` -> (count, type or None)."""
    count = 0
    kind: str | None = None
    for m in _GRES_GPU.finditer(gres):
        count += int(m.group(2))
        kind = kind or m.group(1)
    return count, kind


def cluster_from_records(
    nodes: Sequence[Mapping[str, str]],
    switches: Sequence[Mapping[str, str]],
    *,
    name: str = "slurm",
    gpu_model: str | None = None,
) -> GPUCluster:
    leaf_of: dict[str, str] = {}
    parent_of: dict[str, str] = {}
    blocks: set[str] = set()
    for sw in switches:
        if "BlockName" in sw:  # topology/block: a base block is a rack; aggregated blocks are no region
            for n in expand(sw.get("Nodes", "")):
                leaf_of.setdefault(n, sw["BlockName"])
            blocks.add(sw["BlockName"])
            continue
        sname = sw.get("SwitchName", "")
        for child in expand(sw.get("Switches", "")):
            parent_of[child] = sname
        if sw.get("Level", "0") == "0":
            for n in expand(sw.get("Nodes", "")):
                leaf_of.setdefault(n, sname)
    decls: list[NodeDecl] = []
    for rec in nodes:
        node = rec.get("NodeName", "")
        if not node:
            continue
        count, kind = gres_gpus(rec.get("Gres", ""))
        feats = [f for f in rec.get("AvailableFeatures", "").split(",") if f and f != "(null)"]
        if node in leaf_of:
            rack = leaf_of[node]
            region = parent_of.get(rack, "region-0")
            if rack in blocks and len(feats) > 1:  # blocks have no parent: the region is the second feature
                region = feats[1]
        elif feats:
            rack = feats[0]
            region = feats[1] if len(feats) > 1 else "region-0"
        else:
            rack, region = node, "region-0"
        cpus = int(rec.get("CPUTot", "1") or 1)
        mem = int(rec.get("RealMemory", "1") or 1)
        decls.append(
            NodeDecl(
                name=node,
                rack=rack,
                region=region,
                gpus=count,
                gpu_model=gpu_model or (kind.upper() if kind else DEFAULT_GPU_MODEL),
                cpu_milli=max(1, cpus) * 1000,
                memory_mib=max(1, mem),
            )
        )
    # Group by rack, racks in the order Slurm lists their first node (from_nodes keeps declaration order).
    order: dict[str, int] = {}
    for d in decls:
        order.setdefault(d.rack, len(order))
    decls.sort(key=lambda d: order[d.rack])
    return GPUCluster.from_nodes(decls, name=name)


def import_cluster(slurm: Slurm, *, name: str = "slurm", gpu_model: str | None = None) -> GPUCluster:
    return cluster_from_records(slurm.nodes(), slurm.topology(), name=name, gpu_model=gpu_model)


def _uniform_shape(c: GPUCluster) -> tuple[int, int, int, int] | None:
    """(regions, racks per region, nodes per rack, GPUs per node) if ``c`` is what the uniform spec builds."""
    g = len(c.regions)
    rpr = len(c.regions[0].racks)
    npr = len(c.racks[0].nodes)
    gpn = c.nodes[0].gpus
    if any(len(r.racks) != rpr for r in c.regions) or gpn < 1:
        return None
    if len(c.gpu_models) != 1 or any(len(r.nodes) != npr for r in c.racks):
        return None
    if any((n.gpus, n.cpu_milli, n.memory_mib) != (gpn, c.nodes[0].cpu_milli, c.nodes[0].memory_mib) for n in c.nodes):
        return None
    expect = GPUCluster.uniform(regions=g, racks_per_region=rpr, nodes_per_rack=npr, gpus_per_node=gpn)
    names = [(n.name, c.racks[n.rack].name, c.regions[n.region].name) for n in c.nodes]
    want = [(n.name, expect.racks[n.rack].name, expect.regions[n.region].name) for n in expect.nodes]
    return (g, rpr, npr, gpn) if names == want else None


def _node_res(cpu_milli: int, memory_mib: int) -> dict[str, float]:
    return {"cpu": cpu_milli / 1000, "memoryGiB": round(memory_mib / 1024, 6)}


def cluster_yaml(c: GPUCluster) -> str:
    """A ``kind: Cluster`` spec for ``c``, with a comment listing Slurm's nodes per rack."""
    header = [f"# imported from Slurm: {len(c.racks)} racks, {len(c.nodes)} nodes, {c.total_gpus} GPUs"]
    header += [
        f"#   {r.name} ({c.regions[r.region].name}): {compress(c.nodes[n].name for n in r.nodes)}" for r in c.racks
    ]
    first = c.nodes[0]
    shape = _uniform_shape(c)
    spec: dict[str, object]
    if shape is not None:
        g, rpr, npr, gpn = shape
        spec = {
            "regions": g,
            "racksPerRegion": rpr,
            "nodesPerRack": npr,
            "gpusPerNode": gpn,
            "gpuType": first.gpu_model,
            "node": _node_res(first.cpu_milli, first.memory_mib),
        }
    else:
        header.append("# NOTE: not a uniform grid with rackscale names: written as pools, whose node names are")
        header.append("# <pool>-r000-n00...; the slurm backend imports the live cluster and keeps Slurm's names.")
        pools: dict[tuple[str, int, int, str, int, int], list[int]] = {}
        for r in c.racks:
            n0 = c.nodes[r.nodes[0]]
            key = (c.regions[r.region].name, len(r.nodes), n0.gpus, r.gpu_model, n0.cpu_milli, n0.memory_mib)
            pools.setdefault(key, []).append(r.index)
        spec = {
            "pools": [
                {
                    "name": f"pool{i}",
                    "gpuType": model,
                    "region": region,
                    "racks": len(racks),
                    "nodesPerRack": npr,
                    "gpusPerNode": max(1, gpn),
                    "node": _node_res(cpu, mem),
                }
                for i, ((region, npr, gpn, model, cpu, mem), racks) in enumerate(pools.items())
            ]
        }
    doc = {"apiVersion": "rackscale.io/v1", "kind": "Cluster", "metadata": {"name": c.name}, "spec": spec}
    return "\n".join(header) + "\n" + yaml.safe_dump(doc, sort_keys=False)
