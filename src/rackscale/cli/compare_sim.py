"""``rackscale compare-arch --simulate``: the synthetic job mix scheduled on two ``GPUCluster`` shapes.

This is the report ``compare-arch`` gave before the LLM performance model existed, kept because its KPIs
(JCT, makespan, work done over the makespan) say how the *scheduler* copes with each shape. They are not
the architecture's throughput: the mix's work is fixed and both shapes mostly keep up with its arrivals,
so the ratios sit near 1 whatever the hardware (issue 12). The model's figures are ``compare-arch``
without ``--simulate``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from rackscale.cli.output import OutputFormat, console, emit, err_console, fail, printable
from rackscale.cli.perf_args import finish

if TYPE_CHECKING:
    from rackscale.llm.hardware import System
    from rackscale.model.topology import GPUCluster

TITLE = "scheduling KPIs, not the architecture's throughput: A vs B"
DEFAULT_RACKS, DEFAULT_NODE_GPUS, DEFAULT_JOBS = 4, 8, 600
# Past these the run does not finish (10**11 racks never get built; 10**9 jobs never get made): one line instead.
# 2,000 NVL72 racks are 144,000 GPUs, past `bench placement`'s 100,000; 100,000 jobs take hours already.
MAX_RACKS, MAX_JOBS = 2_000, 100_000


def _clusters(
    sys_a: System, sys_b: System, specs: tuple[Path | None, Path | None], racks: int, node_gpus: int
) -> tuple[GPUCluster, GPUCluster]:
    """A: ``racks`` NVL72 racks (or the ``--a-spec`` cluster); B: as many GPUs in ``node_gpus``-GPU nodes."""
    from rackscale.loaders import load_cluster
    from rackscale.model.specs import SpecError
    from rackscale.model.topology import GPUCluster, Pricing

    loaded: list[GPUCluster | None] = []
    for spec in specs:
        try:
            loaded.append(None if spec is None else load_cluster(spec))
        except SpecError as err:
            fail(str(err))
    a = loaded[0] or GPUCluster.uniform(
        name=f"{racks} x NVL72", racks_per_region=racks, pricing=Pricing(sys_a.price_per_gpu_hour, "USD")
    )
    gpus = a.total_gpus
    if loaded[1] is not None:
        return a, loaded[1]
    if gpus % node_gpus:
        fail(f"--node-gpus must divide the {gpus} GPUs of A (e.g. 4 or 8)")
    b = GPUCluster.uniform(
        name=f"{gpus // node_gpus} x {node_gpus}-GPU nodes",
        racks_per_region=gpus // node_gpus,
        nodes_per_rack=1,
        gpus_per_node=node_gpus,
        pricing=Pricing(sys_b.price_per_gpu_hour, "USD"),
    )
    return a, b


def simulate_arch(
    sys_a: System,
    sys_b: System,
    specs: tuple[Path | None, Path | None],
    *,
    racks: int | None,
    node_gpus: int | None,
    n_jobs: int | None,
    policy: str | None,
    seed: int | None,
    fmt: OutputFormat,
) -> None:
    from rackscale.scheduler import PROFILES
    from rackscale.sim import SimConfig, Simulator
    from rackscale.sim.summary import currency_code
    from rackscale.workloads import SyntheticConfig, synthetic_jobs

    policy = policy or "rackscale"
    seed = 0 if seed is None else seed
    if policy not in PROFILES:
        fail(f"unknown policy {policy!r}; choose one of: {', '.join(PROFILES)}")
    if racks is not None and specs[0] is not None:
        fail("give --racks or --a-spec, not both")
    racks = DEFAULT_RACKS if racks is None else racks
    if racks < 1:  # checked here, not by typer, for the same one-line error as ``simulate --racks 0``
        fail(f"--racks must be at least 1 (got {racks})")
    if racks > MAX_RACKS:
        fail(f"--racks must be at most {MAX_RACKS:,} (got {racks:,})")
    if n_jobs is not None and n_jobs > MAX_JOBS:
        fail(f"--n-jobs must be at most {MAX_JOBS:,} (got {n_jobs:,})")
    node_gpus = DEFAULT_NODE_GPUS if node_gpus is None else node_gpus
    if node_gpus < 1:
        fail(f"--node-gpus must be at least 1 (got {node_gpus})")
    arch_a, arch_b = _clusters(sys_a, sys_b, specs, racks, node_gpus)
    gpus = min(arch_a.total_gpus, arch_b.total_gpus)
    jobs = synthetic_jobs(SyntheticConfig(jobs=DEFAULT_JOBS if n_jobs is None else n_jobs, max_gpus=gpus, seed=seed))
    out: dict[str, Any] = {}
    with err_console.status("simulating both architectures..."):
        for key, cluster in (("A", arch_a), ("B", arch_b)):
            out[key] = Simulator(cluster, jobs, SimConfig(policy=policy, seed=seed)).run().kpis.as_dict()
    a, b = out["A"], out["B"]
    ratios = {
        "training_throughput_x": _ratio(a["training_samples_per_s"], b["training_samples_per_s"]),
        "inference_throughput_x": _ratio(a["inference_tokens_per_s"], b["inference_tokens_per_s"]),
        "cost_per_million_tokens_divided_by": _ratio(b["cost_per_million_tokens"], a["cost_per_million_tokens"]),
        "cost_per_million_samples_divided_by": _ratio(b["cost_per_million_samples"], a["cost_per_million_samples"]),
        "mean_jct_divided_by": _ratio(b["mean_jct_s"], a["mean_jct_s"]),
    }
    code_a, code_b = currency_code(arch_a.pricing.currency), currency_code(arch_b.pricing.currency)
    assumptions = [
        f"A: {arch_a.name}; B: {arch_b.name}; the same {len(jobs)}-job synthetic mix (seed {seed}), policy {policy}.",
        f"A: {arch_a.total_gpus} GPUs, NVLink {arch_a.tiers.nvlink.bandwidth_gbps:g} Gb/s per GPU in a domain, "
        f"RDMA {arch_a.tiers.rdma.bandwidth_gbps:g} Gb/s per GPU between domains; B: {arch_b.total_gpus} GPUs, "
        f"NVLink {arch_b.tiers.nvlink.bandwidth_gbps:g} Gb/s, RDMA {arch_b.tiers.rdma.bandwidth_gbps:g} Gb/s.",
        f"Price per GPU-hour {code_a} {arch_a.pricing.per_gpu_hour:,.2f} (A) and {code_b} "
        f"{arch_b.pricing.per_gpu_hour:,.2f} (B).",
        "n/a: a ratio with no data on one side (e.g. no inference served, no job completed).",
        "Throughput = work done over the makespan of the same workload: when both clusters keep up with the "
        "arrivals, most of the gain shows in job completion time rather than in throughput.",
        "These are scheduling KPIs, not the architecture's throughput; the seed's claims (x28 throughput, /15 "
        "cost per token) are set beside the performance model's figures by compare-arch without --simulate.",
    ]
    payload = {
        "measures": TITLE,
        "A": a,
        "B": b,
        "ratios": ratios,
        "seed_claims": {"throughput_x": 28, "cost_per_token_divided_by": 15},
        "assumptions": assumptions,
    }
    if finish(payload, fmt, False):
        return
    rows = [{"measure": k, "A / B (simulated)": "n/a" if v is None else f"x{v:,.2f}"} for k, v in ratios.items()]
    emit(rows, OutputFormat.table, title=TITLE)
    for line in assumptions:
        console.print(Text(f"- {printable(line)}"), highlight=False)


def _ratio(x: float | None, y: float | None) -> float | None:
    """``x / y``; ``None`` where either side has no data (e.g. no job completed) or ``y`` is 0."""
    return x / y if x is not None and y else None
