"""``rackscale compare-arch``: the same workload on two architectures, measured by this model.

The seed claims that rack-scale NVLink domains give x28 cluster throughput and /15 cost per token versus
a conventional architecture. This command measures what *this model* says instead, and prints the
assumptions behind the numbers: it is a what-if of the performance model, not a benchmark of hardware.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.text import Text

from rackscale.cli.output import OutputFormat, console, emit, err_console, fail, printable
from rackscale.sim.summary import currency_code


def compare_arch(
    racks: int = typer.Option(4, "--racks", help="NVL72 racks of architecture A (B gets as many GPUs)."),
    node_gpus: int = typer.Option(8, "--node-gpus", help="GPUs per node (= NVLink domain) of B."),
    n_jobs: int = typer.Option(600, "--n-jobs", min=1, help="Jobs in the synthetic mix."),
    price_a: float = typer.Option(20.0, "--price-a", min=0.0, help="Price per GPU-hour on A."),
    price_b: float = typer.Option(20.0, "--price-b", min=0.0, help="Price per GPU-hour on B."),
    policy: str = typer.Option("rackscale", "--policy", help="Scheduling profile used on both."),
    seed: int = typer.Option(0, "--seed", help="Seed of the synthetic workload."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Run one workload on A (NVL72 racks: 72 GPUs per NVLink domain, RDMA between racks) and on B
    (the same number of GPUs in nodes of --node-gpus GPUs, each node its own NVLink domain, RDMA between
    nodes) and report the measured throughput and cost-per-token ratios A/B beside the seed's claims.

    Example: rackscale compare-arch --racks 8
    """
    from rackscale.model.topology import GPUCluster, Pricing
    from rackscale.scheduler import PROFILES
    from rackscale.sim import SimConfig, Simulator
    from rackscale.workloads import SyntheticConfig, synthetic_jobs

    if policy not in PROFILES:
        fail(f"unknown policy {policy!r}; choose one of: {', '.join(PROFILES)}")
    if racks < 1:  # checked here, not by typer, for the same one-line error as ``simulate --racks 0``
        fail(f"--racks must be at least 1 (got {racks})")
    if node_gpus < 1:
        fail(f"--node-gpus must be at least 1 (got {node_gpus})")
    gpus = racks * 72
    if gpus % node_gpus:
        fail(f"--node-gpus must divide the {gpus} GPUs of A (e.g. 4 or 8)")
    arch_a = GPUCluster.uniform(name=f"{racks} x NVL72", racks_per_region=racks, pricing=Pricing(price_a))
    arch_b = GPUCluster.uniform(
        name=f"{gpus // node_gpus} x {node_gpus}-GPU nodes",
        racks_per_region=gpus // node_gpus,
        nodes_per_rack=1,
        gpus_per_node=node_gpus,
        pricing=Pricing(price_b),
    )
    jobs = synthetic_jobs(SyntheticConfig(jobs=n_jobs, max_gpus=gpus, seed=seed))
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
    code = currency_code(arch_a.pricing.currency)
    assumptions = [
        f"A: {arch_a.name}; B: {arch_b.name}; {gpus} GPUs each; the same {len(jobs)}-job synthetic mix (seed {seed}).",
        f"NVLink {arch_a.tiers.nvlink.bandwidth_gbps:g} Gb/s per GPU inside a domain; RDMA "
        f"{arch_a.tiers.rdma.bandwidth_gbps:g} Gb/s per GPU NIC between domains, on both.",
        f"Same GPU speed on both; price per GPU-hour {code} {price_a:,.2f} (A) and {code} {price_b:,.2f} (B).",
        "n/a: a ratio with no data on one side (e.g. no inference served, no job completed).",
        "Throughput = work done over the makespan of the same workload: when both clusters keep up with the "
        "arrivals, most of the gain shows in job completion time rather than in throughput.",
        "The seed's claims (x28 throughput, /15 cost per token) are claims; these ratios are this model's.",
    ]
    payload = {"A": a, "B": b, "ratios": ratios, "seed_claims": {"throughput_x": 28, "cost_per_token_divided_by": 15}}
    if as_json:
        emit({**payload, "assumptions": assumptions}, OutputFormat.json)
        return
    rows = [
        {"measure": k, "A / B (measured)": "n/a" if v is None else f"x{v:,.2f}", "seed claims": _claim(k)}
        for k, v in ratios.items()
    ]
    emit(rows, OutputFormat.table, title="architecture A vs B")
    for line in assumptions:
        console.print(Text(f"- {printable(line)}"), highlight=False)


def _ratio(x: float | None, y: float | None) -> float | None:
    """``x / y``; ``None`` where either side has no data (e.g. no job completed) or ``y`` is 0."""
    return x / y if x is not None and y else None


def _claim(key: str) -> str:
    return {"training_throughput_x": "x28", "cost_per_million_tokens_divided_by": "/15"}.get(key, "")
