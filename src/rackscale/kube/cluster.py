"""Kubernetes Nodes (as JSON dicts) -> the cluster model, with the rack and region read from node labels.

Pure functions over the API server's JSON: no client library, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from rackscale.model.topology import (
    DEFAULT_NODE_LABEL,
    DEFAULT_RACK_LABEL,
    DEFAULT_REGION_LABEL,
    GPUCluster,
    NodeDecl,
    TopologyLevel,
)

Obj = Mapping[str, Any]

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
UNKNOWN_MODEL = "unknown"
DEFAULT_REGION = "default"


@dataclass(frozen=True, slots=True)
class LabelKeys:
    """The node labels rackscale reads; the same keys as the cluster model's :class:`TopologyLevel`."""

    region: str = DEFAULT_REGION_LABEL
    rack: str = DEFAULT_RACK_LABEL
    node: str = DEFAULT_NODE_LABEL
    gpu_product: str = GPU_PRODUCT_LABEL
    gpu_resource: str = GPU_RESOURCE

    @property
    def levels(self) -> tuple[TopologyLevel, ...]:
        return (
            TopologyLevel("region", self.region),
            TopologyLevel("rack", self.rack),
            TopologyLevel("node", self.node),
        )


_SUFFIX = {
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


def parse_quantity(q: object) -> Decimal:
    """A Kubernetes resource quantity (``"500m"``, ``"16Gi"``, ``8``) as a Decimal. Raises ``ValueError``."""
    if isinstance(q, int | float):
        return Decimal(str(q))
    m = _QUANTITY.match(str(q).strip())
    if m is None:
        raise ValueError(f"not a Kubernetes quantity: {q!r}")
    return Decimal(m.group(1)) * _SUFFIX[m.group(2) or ""]


def milli(q: object) -> int:
    return int((parse_quantity(q) * 1000).to_integral_value(rounding="ROUND_CEILING"))


def mib(q: object) -> int:
    return int((parse_quantity(q) / (1 << 20)).to_integral_value(rounding="ROUND_CEILING"))


def whole(q: object) -> int:
    return int(parse_quantity(q).to_integral_value(rounding="ROUND_CEILING"))


def gpu_counts(node: Obj, gpu_resource: str) -> tuple[int, int]:
    """(capacity, allocatable) GPUs; capacity is allocatable when the node does not say it (kube.health)."""
    status = node.get("status") or {}
    alloc = whole((status.get("allocatable") or {}).get(gpu_resource, 0))
    cap = (status.get("capacity") or {}).get(gpu_resource)
    return max(whole(cap), alloc) if cap is not None else alloc, alloc


def node_available(node: Obj) -> bool:
    """Ready and not cordoned: rackscale places new pods only there."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def node_decl(node: Obj, keys: LabelKeys) -> NodeDecl:
    """One node as the model declares it. A node without the rack label is a domain of its own."""
    md = node.get("metadata") or {}
    name = str(md["name"])
    labels = md.get("labels") or {}
    alloc = (node.get("status") or {}).get("allocatable") or {}
    gpus, _ = gpu_counts(node, keys.gpu_resource)  # capacity: a GPU gone from allocatable is failed, not removed
    return NodeDecl(
        name=name,
        rack=str(labels.get(keys.rack) or f"node:{name}"),
        region=str(labels.get(keys.region) or DEFAULT_REGION),
        gpus=gpus,
        gpu_model=str(labels.get(keys.gpu_product) or UNKNOWN_MODEL),
        cpu_milli=milli(alloc.get("cpu", 0)),
        memory_mib=mib(alloc.get("memory", 0)) if "memory" in alloc else 0,
    )


def topology_signature(nodes: Iterable[Obj], keys: LabelKeys) -> tuple[NodeDecl, ...]:
    """What the cluster model depends on; the model is rebuilt only when it changes."""
    return tuple(sorted((node_decl(n, keys) for n in nodes), key=lambda d: d.name))


def build_cluster(decls: Iterable[NodeDecl], keys: LabelKeys, *, name: str = "kubernetes") -> GPUCluster:
    """Index the nodes into regions > racks > nodes.

    A clique id seen in two regions, or a clique mixing GPU models (the model wants one per NVLink domain), is
    split into one rack per (region, clique, model) rather than refused: the labels describe the hardware, and a
    scheduler cannot reject the cluster it is given.
    """
    decls = list(decls)
    regions_of: dict[str, set[str]] = {}
    models_of: dict[str, set[str]] = {}
    for d in decls:
        regions_of.setdefault(d.rack, set()).add(d.region)
        if d.gpus > 0:
            models_of.setdefault(d.rack, set()).add(d.gpu_model)
    fixed: list[NodeDecl] = []
    for d in decls:
        rack = d.rack
        if len(regions_of[rack]) > 1:
            rack = f"{d.region}/{rack}"
        if len(models_of.get(d.rack, ())) > 1:
            rack = f"{rack}/{d.gpu_model}"
        fixed.append(
            NodeDecl(d.name, rack, d.region, d.gpus, d.gpu_model, d.cpu_milli, d.memory_mib) if rack != d.rack else d
        )
    fixed.sort(key=lambda d: d.gpus == 0)  # a rack takes its GPU model from its first node: GPU nodes first
    return GPUCluster.from_nodes(fixed, name=name, levels=keys.levels)
