"""The GPU topology check and the node labels it implies (plan sections 4.1 and 5.1).

Labels, as GPU Feature Discovery (GFD, NVIDIA/k8s-device-plugin) writes them:
- ``nvidia.com/gpu.count`` and ``nvidia.com/gpu.product`` (the NVML name, spaces -> ``-``):
  internal/lm/resource.go, ``countLabel`` and ``productLabel``;
- ``nvidia.com/gpu.clique`` = ``<ClusterUUID>.<CliqueId>`` of the GPU fabric, only when every
  fabric-attached GPU of the node reports the same pair: internal/lm/imex.go, ``newImexLabeler``.
rackscale's Kubernetes scheduler reads its rack (NVLink domain) from that same clique label
(rackscale.model.topology.DEFAULT_RACK_LABEL) and a node without it is "a domain of its own"
(rackscale.kube.cluster.node_decl), so the clique is emitted only when the fabric reports one, never
invented from the matrix: an 8-GPU NVSwitch board has no fabric clique, and is its own domain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rackscale.model.topology import DEFAULT_RACK_LABEL
from rackscale.preflight.checks import Check, CheckName, Options, Status
from rackscale.preflight.host_facts import RC_NOT_FOUND, HostProbe
from rackscale.preflight.topo import Link, TopoError, Topology, affinity, describe_islands, islands, parse_topo

GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # also rackscale.kube.cluster.GPU_PRODUCT_LABEL (gpu model)
CLIQUE_LABEL = DEFAULT_RACK_LABEL  # "nvidia.com/gpu.clique"
_ZERO_UUID = re.compile(r"^[0-]+$")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuFacts:
    topo: Topology | None
    why: str  # why there is no topology ("nvidia-smi not found"), or ""
    error: str  # the parse error of a matrix that did not read, or ""
    names: tuple[str, ...]
    clique: str | None  # "<ClusterUUID>.<CliqueId>" when the fabric reports one


def parse_fabric(text: str) -> list[tuple[str, str]]:
    """(ClusterUUID, CliqueId) of each GPU's "Fabric" section of ``nvidia-smi -q``; fields of other sections
    with the same names are not read."""
    out: list[tuple[str, str]] = []
    indent: int | None = None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        depth = len(line) - len(line.lstrip())
        if indent is not None and line.strip() and depth <= indent:
            out.append((fields.get("ClusterUUID", ""), fields.get("CliqueId", "")))
            indent, fields = None, {}
        if line.strip() == "Fabric":
            indent, fields = depth, {}
        elif indent is not None and ":" in line:
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    if indent is not None:
        out.append((fields.get("ClusterUUID", ""), fields.get("CliqueId", "")))
    return out


def fabric_clique(pairs: list[tuple[str, str]]) -> str | None:
    """GFD's rule: one (ClusterUUID, CliqueId) over the fabric-attached GPUs, else no label. A GPU that
    reports N/A or the all-zero UUID is not on a multi-node fabric."""
    attached = {(u, c) for u, c in pairs if u and c and u != "N/A" and c != "N/A" and not _ZERO_UUID.match(u)}
    if len(attached) != 1:
        return None
    ((uuid, clique_id),) = attached
    return f"{uuid}.{clique_id}"


def gather(probe: HostProbe) -> GpuFacts:
    """Run nvidia-smi once per host (cached on the probe): topology, names and fabric."""
    cached = probe.cache.get("gpu")
    if isinstance(cached, GpuFacts):
        return cached
    rc, out = probe.command("nvidia-smi", "topo", "--matrix")
    topo: Topology | None = None
    why = error = ""
    if rc == RC_NOT_FOUND:
        why = "nvidia-smi not found"
    elif rc != 0:
        why = f"`nvidia-smi topo --matrix` exited {rc} (no GPU or no driver loaded)"
    else:
        try:
            topo = parse_topo(out)
        except TopoError as err:
            error = str(err)
    names: tuple[str, ...] = ()
    clique = None
    if topo is not None:
        rc, out = probe.command("nvidia-smi", "--query-gpu=name", "--format=csv,noheader")
        names = tuple(n.strip() for n in out.splitlines() if n.strip()) if rc == 0 else ()
        rc, out = probe.command("nvidia-smi", "-q")
        clique = fabric_clique(parse_fabric(out)) if rc == 0 else None
    facts = GpuFacts(topo=topo, why=why, error=error, names=names, clique=clique)
    probe.cache["gpu"] = facts
    return facts


def labels(facts: GpuFacts) -> dict[str, str]:
    """The node labels the topology implies (GFD's keys; the clique only from the fabric)."""
    if facts.topo is None:
        return {}
    out = {GPU_COUNT_LABEL: str(len(facts.topo.gpus))}
    if facts.names:
        out[GPU_PRODUCT_LABEL] = facts.names[0].replace(" ", "-")
    if facts.clique:
        out[CLIQUE_LABEL] = facts.clique
    return out


def topology(probe: HostProbe, _opts: Options) -> list[Check]:
    facts = gather(probe)
    c = CheckName.topology
    if facts.error:
        return [
            Check(
                check=c,
                name="nvidia-smi topo",
                status=Status.FAIL,
                found=facts.error,
                required="a readable topology matrix",
                fix="run `nvidia-smi topo --matrix` by hand",
            )
        ]
    if facts.topo is None:
        return [
            Check(
                check=c,
                name="nvidia-smi topo",
                status=Status.SKIP,
                found=facts.why,
                required="NVLink islands and GPU-NIC affinity",
            )
        ]
    topo = facts.topo
    groups = islands(topo)
    n = len(topo.gpus)
    shown = f"{n} GPUs, islands {describe_islands(groups)}"
    if len(groups) == 1:
        isl = Check(
            check=c,
            name="nvlink islands",
            status=Status.PASS,
            found=f"{shown} (one NVLink domain)",
            required="all GPUs of the node in one NVLink domain",
        )
    elif len(groups[0]) == 1:
        isl = Check(
            check=c,
            name="nvlink islands",
            status=Status.WARN,
            found=f"{n} GPUs, PCIe only (no NVLink)",
            required="all GPUs of the node in one NVLink domain",
            fix="declare the cluster as PCIe (`nvlink: disabled`, one GPU per domain) or use NVLink nodes",
        )
    else:
        isl = Check(
            check=c,
            name="nvlink islands",
            status=Status.WARN,
            found=shown,
            required="all GPUs of the node in one NVLink domain",
            fix="place jobs within one island (e.g. CUDA_VISIBLE_DEVICES) or declare the islands as domains",
        )
    out = [isl]
    for a in affinity(topo):
        if a.link is None:
            out.append(
                Check(
                    check=c,
                    name=f"{a.gpu} -> NIC",
                    status=Status.SKIP,
                    found="no NIC in the matrix",
                    required="a NIC at PIX/PXB (GPUDirect RDMA)",
                )
            )
            continue
        close = a.link in (Link.PIX, Link.PXB)
        out.append(
            Check(
                check=c,
                name=f"{a.gpu} -> NIC",
                status=Status.PASS if close else Status.WARN,
                found=f"{','.join(a.nics)} ({a.link.value})",
                required="a NIC at PIX/PXB (GPUDirect RDMA)",
                fix=""
                if close
                else "no NIC shares a PCIe switch with this GPU: RDMA goes through the CPU "
                "(on Grace/GB200, NVLink-C2C makes every GPU-NIC cell SYS; that is expected there)",
            )
        )
    return out
