"""``rackscale pack``: the FGD paper's static-packing experiment.

Placement cases are table-driven: a small cluster, the pods already placed, one arriving pod, and where each
policy must put it. Properties (no oversubscription, model constraints, inflation, determinism) run every
policy on a synthetic trace; one test runs the real Alibaba trace, which must be at ../shared/traces.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from rackscale.cli.pack import pack
from rackscale.pack.experiment import ALL_POLICIES, make_policy, run
from rackscale.pack.io import TraceError, read_nodes, read_pods
from rackscale.pack.state import OversubscribedError, PackState, Request, requests_of
from rackscale.pack.trace import MILLI, Nodes, Pods, inflate

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "traces" / "alibaba-openb"

# name: (GPUs, CPU milli, memory MiB, model)
NodeSpec = tuple[int, int, int, str]


def make_nodes(*specs: NodeSpec) -> Nodes:
    return Nodes.build(
        names=[f"n{i}" for i in range(len(specs))],
        gpus=[s[0] for s in specs],
        cpu_milli=[s[1] for s in specs],
        memory_mib=[s[2] for s in specs],
        models=[s[3] for s in specs],
    )


def make_pods(rows: list[tuple[int, int, int, int, str]]) -> Pods:
    """rows: (cpu, mem, num_gpu, gpu_milli, spec)."""
    return Pods.build(
        names=[f"p{i}" for i in range(len(rows))],
        cpu_milli=[r[0] for r in rows],
        memory_mib=[r[1] for r in rows],
        num_gpu=[r[2] for r in rows],
        gpu_milli=[r[3] for r in rows],
        spec=[r[4] for r in rows],
    )


def request(nodes: Nodes, *, cpu: int = 1000, gpus: int = 1, milli: int = MILLI, spec: str = "") -> Request:
    return Request(cpu=cpu, mem=1024, gpus=gpus, milli=milli if gpus else 0, allowed=nodes.model_mask(spec))


@dataclass(frozen=True)
class Case:
    id: str
    policy: str
    nodes: tuple[NodeSpec, ...]
    before: tuple[tuple[int, tuple[int, ...], int, int], ...]  # (node, gpus, milli per GPU, cpu) already placed
    pod: dict[str, int | str]
    expect: tuple[int, tuple[int, ...]]
    workload: tuple[tuple[int, int, int, int, str], ...] = ((1000, 1024, 1, 1000, ""),)


BIG, SMALL = (8, 64000, 262144, "A"), (2, 8000, 65536, "A")
CASES = [
    Case("bestfit-small-node", "BestFit", (BIG, SMALL), (), {"cpu": 4000}, (1, (0,))),
    Case("bestfit-tightest-gpu", "BestFit", (SMALL, BIG), ((0, (1,), 400, 1000),), {"milli": 500}, (0, (1,))),
    Case("bestfit-least-left", "BestFit", (SMALL, SMALL), ((1, (0,), MILLI, 1000),), {"cpu": 1000}, (1, (1,))),
    Case("dotprod-best-aligned", "DotProd", (BIG, SMALL), (), {"cpu": 4000}, (1, (0,))),
    Case("dotprod-most-free", "DotProd", (SMALL, SMALL), ((0, (0,), MILLI, 1000),), {"cpu": 4000}, (1, (0,))),
    Case(
        "clustering-same-size-gpu",
        "GpuClustering",
        (BIG, BIG, BIG),
        ((0, (0,), 500, 1000), (1, (3,), 300, 1000)),
        {"milli": 300},
        (1, (3,)),
    ),
    Case("clustering-used-before-idle", "GpuClustering", (BIG, BIG), ((1, (0,), 500, 1000),), {}, (1, (1,))),
    Case("packing-partly-used-gpu", "GpuPacking", (BIG, BIG), ((1, (5,), 600, 1000),), {"milli": 400}, (1, (5,))),
    Case(
        "packing-fewest-whole",
        "GpuPacking",
        (BIG, SMALL, BIG),
        ((0, (0,), MILLI, 1000), (1, (0,), 500, 1000)),
        {},
        (1, (1,)),
    ),
    Case(
        "rackscale-fills-the-gap",
        "rackscale",
        (BIG, BIG),
        ((1, (2,), 500, 1000),),
        {"milli": 500},
        (1, (2,)),
        ((1000, 1024, 1, 500, ""), (1000, 1024, 1, 1000, "")),
    ),
    Case(
        "rackscale-lean-pod-to-lean-node",
        "rackscale",
        ((2, 4000, 65536, "A"), (2, 32000, 65536, "A")),
        (),
        {"cpu": 2000},
        (0, (0,)),
        ((2000, 1024, 1, 1000, ""), (16000, 1024, 1, 1000, "")),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_policy_places_where_expected(case: Case) -> None:
    nodes = make_nodes(*case.nodes)
    state = PackState(nodes)
    for node, gpus, milli, cpu in case.before:
        state.place(node, gpus, request(nodes, cpu=cpu, gpus=len(gpus), milli=milli))
    policy = make_policy(case.policy, nodes=nodes, pods=make_pods(list(case.workload)))
    policy.reset(state)
    req = request(nodes, **case.pod)  # type: ignore[arg-type]
    got = policy.choose(state, req, state.feasible(req), np.random.default_rng(0))
    assert got == case.expect


def test_random_picks_only_feasible_nodes_and_all_of_them() -> None:
    nodes = make_nodes(SMALL, BIG, SMALL, (4, 64000, 262144, "B"))
    state = PackState(nodes)
    state.place(0, (0, 1), request(nodes, gpus=2))  # node 0 has no whole GPU left
    policy = make_policy("Random", nodes=nodes, pods=make_pods([(1000, 1024, 1, 1000, "")]))
    req = request(nodes, spec="A")
    rng = np.random.default_rng(1)
    picks = {policy.choose(state, req, state.feasible(req), rng)[0] for _ in range(200)}
    assert picks == {1, 2}


def synthetic() -> tuple[Nodes, Pods]:
    """A small mixed cluster (two models, CPU-poor and CPU-rich nodes) and a trace-like pod mix."""
    nodes = make_nodes(*([BIG] * 8), *([SMALL] * 6), *([(4, 32000, 131072, "B")] * 4), (1, 8000, 32768, "B"))
    rng = np.random.default_rng(7)
    rows: list[tuple[int, int, int, int, str]] = []
    for _ in range(60):  # about 50 GPUs of demand: the inflation has to add copies
        kind = rng.choice(["whole", "shared", "cpu", "multi"], p=[0.45, 0.35, 0.12, 0.08])
        cpu = int(rng.choice([2000, 4000, 8000, 12000]))
        spec = str(rng.choice(["", "", "A", "B", "A|B"]))
        if kind == "whole":
            rows.append((cpu, 16384, 1, 1000, spec))
        elif kind == "shared":
            rows.append((cpu, 8192, 1, int(rng.choice([230, 320, 470, 810])), spec))
        elif kind == "cpu":
            rows.append((cpu, 4096, 0, 0, ""))
        else:
            rows.append((4 * cpu, 65536, int(rng.choice([2, 4, 8])), 1000, spec))
    return nodes, make_pods(rows)


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_never_oversubscribes_and_honours_models(policy: str) -> None:
    nodes, pods = synthetic()
    arrivals = inflate(pods=pods, capacity_gpus=nodes.total_gpus, ratio=1.3, seed=3)
    requests = requests_of(pods=pods, nodes=nodes)
    state = PackState(nodes)
    chosen = make_policy(policy, nodes=nodes, pods=pods)
    chosen.reset(state)
    rng = np.random.default_rng(0)
    placed = 0
    for i in arrivals.order.tolist():
        req = requests[i]
        feasible = state.feasible(req)
        if not feasible.any():
            continue
        node, gpus = chosen.choose(state, req, feasible, rng)
        assert state.check(node, gpus, req) is None
        assert pods.spec[i] == "" or nodes.models[nodes.model[node]] in pods.spec[i].split("|")
        state.place(node, gpus, req)
        chosen.update(state, node)
        placed += 1
        assert (state.free >= 0).all() and (state.free <= MILLI).all()
        assert (state.cpu >= 0).all() and (state.mem >= 0).all()
    assert placed > 0
    assert (state.free[~state.exists] == 0).all()  # no milli on GPUs a node does not have
    assert int((state.gpu_cap - state.gpu_free).sum()) == state.allocated_milli
    assert int((MILLI * state.exists - state.free).sum()) == state.allocated_milli


def test_place_rejects_an_oversubscribed_gpu_cpu_or_model() -> None:
    nodes = make_nodes(SMALL, (1, 8000, 32768, "B"))
    state = PackState(nodes)
    state.place(0, (0,), request(nodes, milli=700))
    with pytest.raises(OversubscribedError):
        state.place(0, (0,), request(nodes, milli=400))
    with pytest.raises(OversubscribedError):
        state.place(0, (1,), request(nodes, cpu=9000))
    with pytest.raises(OversubscribedError):
        state.place(1, (0,), request(nodes, spec="A"))
    with pytest.raises(OversubscribedError):
        state.place(0, (2,), request(nodes))  # node 0 has two GPUs


def test_inflation_passes_130_percent_and_every_checkpoint_is_recorded() -> None:
    nodes, pods = synthetic()
    arrivals = inflate(pods=pods, capacity_gpus=nodes.total_gpus, ratio=1.3, seed=42)
    demand = pods.demand_milli[arrivals.order]
    target = 1.3 * nodes.total_gpus * MILLI
    assert demand.sum() > target >= demand[:-1].sum()
    assert sorted(arrivals.order[: pods.count].tolist()) == list(range(pods.count))  # the trace, shuffled
    assert len(arrivals.order) > pods.count
    res = run(nodes=nodes, pods=pods, policy="BestFit", seed=42)
    assert len(res.curve) == 130
    assert all(0 < a <= b for a, b in zip(res.curve, res.curve[1:], strict=False))  # never leave: monotone
    assert res.at(130) <= 100.0 and res.placed + res.failed == res.arrived == len(arrivals.order)


@pytest.mark.parametrize("policy", ["Random", "GpuClustering", "rackscale"])
def test_same_seed_gives_identical_results(policy: str) -> None:
    nodes, pods = synthetic()
    first = run(nodes=nodes, pods=pods, policy=policy, seed=5)
    assert run(nodes=nodes, pods=pods, policy=policy, seed=5) == first
    assert inflate(pods=pods, capacity_gpus=20, ratio=1.3, seed=5).order.tolist() != (
        inflate(pods=pods, capacity_gpus=20, ratio=1.3, seed=6).order.tolist()
    )


def test_real_trace_one_seed_rackscale_beats_bestfit() -> None:
    if not TRACES.is_dir():
        pytest.fail(f"the Alibaba openb trace is missing: expected {TRACES} (the shared/ folder beside the repo)")
    nodes = read_nodes(TRACES / "openb_node_list_gpu_node.csv")
    pods = read_pods(TRACES / "openb_pod_list_default.csv")
    assert (nodes.count, nodes.total_gpus, pods.count) == (1213, 6212, 8152)
    ours = run(nodes=nodes, pods=pods, policy="rackscale", seed=42).at(130)
    best_fit = run(nodes=nodes, pods=pods, policy="BestFit", seed=42).at(130)
    assert ours >= 85.0 and best_fit >= 85.0
    assert ours >= best_fit


def write_trace(tmp: Path) -> tuple[Path, Path]:
    nodes_csv = tmp / "nodes.csv"
    nodes_csv.write_text("sn,cpu_milli,memory_mib,gpu,model\na,32000,131072,4,A\nb,16000,65536,2,B\n")
    pods_csv = tmp / "pods.csv"
    lines = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos"]
    lines += [f"p{i},2000,4096,1,{(300, 1000, 500)[i % 3]},{'' if i % 4 else 'B'},LS" for i in range(12)]
    pods_csv.write_text("\n".join(lines) + "\n")
    return nodes_csv, pods_csv


def test_io_reads_the_csvs_and_names_bad_lines(tmp_path: Path) -> None:
    nodes_csv, pods_csv = write_trace(tmp_path)
    nodes, pods = read_nodes(nodes_csv), read_pods(pods_csv)
    assert nodes.total_gpus == 6 and nodes.models == ("A", "B")
    assert pods.count == 12 and pods.spec[0] == "B" and pods.gpu_milli.tolist()[:3] == [300, 1000, 500]
    pods_csv.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,lots,1,1,1000,\n")
    with pytest.raises(TraceError, match=r"pods.csv:2: column 'cpu_milli'"):
        read_pods(pods_csv)
    with pytest.raises(TraceError, match="missing column"):
        read_nodes(pods_csv)


def cli() -> typer.Typer:
    app = typer.Typer()
    app.command()(pack)
    app.command("noop")(lambda: None)  # two commands, so typer keeps the verb name
    return app


def test_cli_json_and_missing_trace_hint(tmp_path: Path) -> None:
    nodes_csv, pods_csv = write_trace(tmp_path)
    argv = ["pack", "--nodes", str(nodes_csv), "--pods", str(pods_csv), "--seeds", "2", "--workers", "1"]
    done = CliRunner().invoke(cli(), [*argv, "--policy", "rackscale", "--policy", "bestfit", "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["seeds"] == [42, 43] and list(report["policies"]) == ["rackscale", "BestFit"]
    assert set(report["policies"]["rackscale"]) >= {"80", "90", "100", "130", "unallocated_gpus_130"}
    assert report["published"]["FGD"]["130"] == 95.39
    missing = CliRunner().invoke(cli(), ["pack", "--nodes", str(tmp_path / "nope.csv"), "--pods", str(pods_csv)])
    assert missing.exit_code == 2 and "--nodes PATH" in missing.output
