"""``--cluster-spec FILE``: does this host look like the nodes the cluster spec declares?

The spec is loaded as ``rackscale simulate --cluster`` loads it (:func:`rackscale.loaders.load_cluster`,
both kinds); the model makes a rack an NVLink domain, so the spec expects a node's GPUs to share NVLink,
unless the seed form says ``nvlink: disabled``. Compared: GPUs per node, NVLink vs PCIe, the GPU model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rackscale.preflight.checks import Check, CheckName, Options, Status, worst
from rackscale.preflight.gpu import gather
from rackscale.preflight.host_facts import HostProbe
from rackscale.preflight.topo import islands

_OFF = {"false", "disabled", "off", "no", "0"}


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecExpect:
    name: str
    gpus_per_node: tuple[int, ...]
    nvlink: bool
    gpu_models: tuple[str, ...]


def expectation(path: Path) -> SpecExpect:
    """Raises :class:`rackscale.model.spec_errors.SpecError` (one line per problem) for a bad spec."""
    from rackscale.loaders import load_cluster, read_text

    cluster = load_cluster(path)
    nvlink = True
    try:
        docs: list[Any] = list(yaml.safe_load_all(read_text(path)))
    except yaml.YAMLError:
        docs = []  # load_cluster read it, so this does not happen; the toggle then keeps its default
    for d in docs:
        if isinstance(d, dict) and d.get("kind") == "GpuCluster" and isinstance(d.get("spec"), dict):
            nvlink = str(d["spec"].get("nvlink", True)).strip().lower() not in _OFF
    gpn = tuple(sorted({n.gpus for n in cluster.nodes if n.gpus > 0}))
    models = tuple(sorted({n.gpu_model for n in cluster.nodes if n.gpus > 0}))
    return SpecExpect(name=cluster.name, gpus_per_node=gpn, nvlink=nvlink, gpu_models=models)


def _norm(s: str) -> str:
    return "".join(ch for ch in s.lower() if ch.isalnum())


def compare(probe: HostProbe, exp: SpecExpect, source: str) -> list[Check]:
    c = CheckName.spec
    facts = gather(probe)
    per = "/".join(str(g) for g in exp.gpus_per_node) or "0"
    want = f"{per} GPUs per node{' with NVLink' if exp.nvlink else ', PCIe'} ({source})"
    if facts.topo is None:
        return [Check(check=c, name=exp.name, status=Status.SKIP, found=facts.why or facts.error, required=want)]
    n = len(facts.topo.gpus)
    groups = islands(facts.topo)
    link = (
        "NVLink"
        if len(groups) == 1 and n > 1
        else "PCIe only"
        if len(groups[0]) == 1 and n > 1
        else (f"NVLink islands of {'/'.join(str(len(g)) for g in groups)}" if n > 1 else "one GPU")
    )
    parts: list[Status] = [Status.PASS if n in exp.gpus_per_node else Status.FAIL]
    if exp.nvlink and n > 1 and len(groups) > 1:
        parts.append(Status.FAIL if len(groups[0]) == 1 else Status.WARN)
    status = worst(parts)
    out = [
        Check(
            check=c,
            name=exp.name,
            status=status,
            found=f"this host has {n}, {link}",
            required=f"spec says {want}",
            fix="" if status is Status.PASS else "fix the spec (gpusPerNode, nvlink) or run this node elsewhere",
        )
    ]
    if facts.names and exp.gpu_models:
        product = facts.names[0]
        ok = any(_norm(m) in _norm(product) for m in exp.gpu_models)
        out.append(
            Check(
                check=c,
                name="gpu model",
                status=Status.PASS if ok else Status.WARN,
                found=product,
                required=f"spec gpuType {'/'.join(exp.gpu_models)}",
                fix="" if ok else "the spec's gpuType names another GPU: fix it, or the speeds it implies are wrong",
            )
        )
    return out


def spec(probe: HostProbe, opts: Options) -> list[Check]:
    if opts.cluster_spec is None:
        return [
            Check(
                check=CheckName.spec,
                name="cluster spec",
                status=Status.SKIP,
                found="not asked (--cluster-spec FILE)",
                required="the host matches the spec's nodes",
            )
        ]
    cached = probe.cache.get("spec")
    exp = cached if isinstance(cached, SpecExpect) else expectation(opts.cluster_spec)
    return compare(probe, exp, opts.cluster_spec.name)
