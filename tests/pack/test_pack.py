"""`rackscale pack` on the product: the shared openb reader, the paper's policies as scheduler profiles, and
the rackscale profile being the scheduler's own placer."""

from __future__ import annotations

import json
import re
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
import yaml
from typer.testing import CliRunner

import rackscale.pack.trace as trace_module
import rackscale.workloads.alibaba as alibaba_module
from rackscale.cli.app import app as rackscale_app
from rackscale.cli.pack import pack
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.spec_errors import SpecError
from rackscale.model.specs import MAX_SYNTHETIC_JOBS, MAX_TRACE_GPUS
from rackscale.model.state import ClusterState
from rackscale.model.topology import GPUCluster, NodeDecl
from rackscale.model.workload import JobKind, JobSpec, Resources, TopologyConstraint
from rackscale.pack.experiment import ALL_POLICIES, PROFILE_OF, give_workload, make_placer, requests, run
from rackscale.pack.trace import (
    MAX_ARRIVALS,
    InflationTooLarge,
    Trace,
    check_arrivals,
    expected_arrivals,
    inflate,
)
from rackscale.scheduler.framework import PLACERS, PROFILES
from rackscale.scheduler.placement.request import GroupRequest
from rackscale.scheduler.scheduler import ResourceScheduler
from rackscale.workloads.alibaba import load_alibaba_pods

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
FIVE = "name,cpu_milli,memory_mib,num_gpu,gpu_milli"


def write_trace(tmp: Path, *, five: bool = False) -> tuple[Path, Path]:
    nodes_csv = tmp / "nodes.csv"
    nodes_csv.write_text(f"{NODE_HEADER}\na,32000,131072,4,A\nb,16000,65536,2,B\nc,8000,65536,1,A\n")
    pods_csv = tmp / "pods.csv"
    if five:
        lines = [FIVE] + [f"p{i},2000,4096,{(1, 1, 0, 2)[i % 4]},{(300, 1000, 0, 1000)[i % 4]}" for i in range(12)]
    else:
        lines = [f"{FIVE},gpu_spec,qos,creation_time"]
        lines += [f"p{i},2000,4096,1,{(300, 1000, 500)[i % 3]},{'' if i % 4 else 'B'},LS,{i}" for i in range(12)]
    pods_csv.write_text("\n".join(lines) + "\n")
    return nodes_csv, pods_csv


def test_five_column_pod_list_loads_and_any_model_is_allowed(tmp_path: Path) -> None:
    nodes_csv, pods_csv = write_trace(tmp_path, five=True)
    trace = Trace.read(nodes=nodes_csv, pods=pods_csv)
    assert len(trace.pods) == 12 and trace.capacity_gpus == 7
    assert all(j.unit.gpu_models is None and j.submit_time == 0.0 for j in trace.pods)
    assert [j.unit.gpu_demand_milli for j in trace.pods[:4]] == [300, 1000, 0, 2000]
    result = run(trace=trace, policy="rackscale", seed=42)
    assert result.placed + result.failed == result.arrived and result.placed > 0


def test_reader_errors_are_those_of_trace_alibaba(tmp_path: Path) -> None:
    nodes_csv, pods_csv = write_trace(tmp_path)
    pods_csv.write_text(f"{FIVE}\np0,lots,1,1,1000\np1,1000,1,0,300\n")
    with pytest.raises(SpecError) as ours:
        Trace.read(nodes=nodes_csv, pods=pods_csv)
    with pytest.raises(SpecError) as product:
        load_alibaba_pods(pods_csv, on_error="reject")
    assert str(ours.value) == str(product.value)
    assert "pods.csv" in str(ours.value) and "cpu_milli" in str(ours.value) and "num_gpu 0" in str(ours.value)
    done = CliRunner().invoke(cli(), ["pack", "--nodes", str(nodes_csv), "--pods", str(pods_csv)])
    assert done.exit_code != 0 and "cpu_milli" in done.output


# Three nodes of model A, one rack each; the pod asks for 400 milli of one GPU and 2 cores. The target
# workload is half such pods, half one-GPU pods of 2 cores.
#
#   n0: [ 500 free ]                 32 cores free   one GPU half used
#   n1: [1000 free ]                  2 cores free   an idle GPU, CPU nearly gone
#   n2: [ 800 free ][1000 free ]     32 cores free   one GPU a fifth used, one idle
#
# GpuPacking: a partly used GPU first, the one with least free % (n0: 100 - 50/10 = 95 > n2: 92).
# BestFit: least CPU + GPU left after placing (n1: 0 cores, 600 milli left: score 96).
# FGD: n0 leaves 100 milli no pod type can use (growth -150: score 53); n1 strands its 600 milli without
#   CPU (+600: 35); n2 turns its 800 into 400 that the shared type still uses (-200: 54).
def tiny() -> ClusterState:
    decls = [
        NodeDecl("n0", "r0", "g", 1, "A", 32_000, 65_536),
        NodeDecl("n1", "r1", "g", 1, "A", 2_000, 65_536),
        NodeDecl("n2", "r2", "g", 2, "A", 32_000, 65_536),
    ]
    state = ClusterState(GPUCluster.from_nodes(decls, name="tiny"))
    for name, node, milli in (("f0", 0, 500), ("f2", 2, 200)):
        spec = JobSpec(name=name, kind=JobKind.BATCH, unit=Resources(gpus=0, gpu_milli=milli), units=1)
        state.allocate(spec, Placement(name, (NodeAlloc(node, (0,), milli, 0, 0),), 1), now=0.0)
    return state


SHARED = Resources(gpus=0, gpu_milli=400, cpu_milli=2_000)
MIX = {(2_000, 0, 1, 400, None): 1.0, (2_000, 0, 1, 1000, None): 1.0}


@pytest.mark.parametrize(("profile", "node", "gpu"), [("gpu-packing", 0, 0), ("share-best-fit", 1, 0), ("fgd", 2, 0)])
def test_each_policy_picks_its_known_node(profile: str, node: int, gpu: int) -> None:
    state = tiny()
    placer = PLACERS[PROFILES[profile].placer](0)
    give_workload(placer, MIX)
    got = placer.place(state, GroupRequest(job="p", units=1, unit=SHARED, models=("A",)))
    assert got == [NodeAlloc(node, (gpu,), 400, 2_000, 0)]


def test_every_paper_policy_is_a_registered_profile() -> None:
    assert set(ALL_POLICIES) == set(PROFILE_OF)
    for profile in PROFILE_OF.values():
        assert PROFILES[profile].placer in PLACERS


@pytest.mark.parametrize("policy", ["rackscale", "FGD", "BestFit"])
def test_pack_places_exactly_as_the_scheduler_would(tmp_path: Path, policy: str) -> None:
    """Each pod placed by pack equals what ResourceScheduler decides on the same state with the same profile."""
    trace = Trace.read(nodes=write_trace(tmp_path)[0], pods=write_trace(tmp_path)[1])
    state = ClusterState(trace.cluster)
    placer = make_placer(policy, trace=trace, seed=7)
    sched = ResourceScheduler(profile=PROFILE_OF[policy], seed=7)
    give_workload(sched, trace.workload())
    reqs = requests(trace, state)
    placed = 0
    for i, job in enumerate(trace.pods):
        ours = placer.place(state, reqs[i])
        decided = sched.schedule(state, [job], now=0.0)
        if ours is None:
            assert not decided.placed
            continue
        assert decided.placed and set(decided.placed[0].placement.allocs) == set(ours), job.name
        state.allocate(job, Placement(job.name, tuple(ours), 1), now=0.0)
        placed += 1
    assert placed >= 6


def test_rackscale_profile_is_the_scheduler_placer_with_fragmentation_for_shared_pods() -> None:
    sched = ResourceScheduler(profile="rackscale")
    give_workload(sched, MIX)
    state = tiny()
    job = JobSpec(name="p", kind=JobKind.BATCH, unit=SHARED, units=1, topology=TopologyConstraint(None, None))
    (placed,) = sched.schedule(state, [job], now=0.0).placed
    # The capacity-aware measure keeps n1's idle GPU (its CPU is nearly gone) and packs onto a used GPU.
    assert placed.placement.allocs[0].node in (0, 2)


def test_inflation_passes_130_percent_and_every_checkpoint_is_recorded(tmp_path: Path) -> None:
    trace = Trace.read(nodes=write_trace(tmp_path)[0], pods=write_trace(tmp_path)[1])
    arrivals = inflate(demand=trace.demand_milli, capacity_gpus=trace.capacity_gpus, ratio=1.3, seed=42)
    assert sorted(arrivals.order[: arrivals.originals].tolist()) == list(range(12))
    assert trace.demand_milli[arrivals.order].sum() > 1.3 * trace.capacity_gpus * 1000
    result = run(trace=trace, policy="GpuPacking", seed=42)
    assert len(result.curve) == 130 and result.at(130) <= 100.0
    assert run(trace=trace, policy="GpuPacking", seed=42) == result  # seeded: same result twice


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
    assert report["profiles"] == {"rackscale": "rackscale", "BestFit": "share-best-fit"}
    assert set(report["policies"]["rackscale"]) >= {"80", "90", "100", "130", "unallocated_gpus_130"}
    assert report["published"]["FGD"]["130"] == 95.39
    missing = CliRunner().invoke(cli(), ["pack", "--nodes", str(tmp_path / "nope.csv"), "--pods", str(pods_csv)])
    assert missing.exit_code == 2 and "--nodes PATH" in missing.output


def _trace(tmp: Path, *, nodes: str | None = None, pods: str | None = None) -> list[str]:
    """The options of a tiny trace in ``tmp``, its nodes' or pods' CSV replaced by the text given."""
    nodes_csv, pods_csv = write_trace(tmp)
    for path, text in ((nodes_csv, nodes), (pods_csv, pods)):
        if text is not None:
            path.write_text(text)
    return ["--nodes", str(nodes_csv), "--pods", str(pods_csv)]


def _zero_gpu_nodes(tmp: Path) -> list[str]:
    return _trace(tmp, nodes=f"{NODE_HEADER}\na,32000,131072,0,A\n")


def _cpu_only_pods(tmp: Path) -> list[str]:
    return _trace(tmp, pods=f"{FIVE}\np0,2000,4096,0,0\n")


def _no_pods(tmp: Path) -> list[str]:
    return _trace(tmp, pods=f"{FIVE}\n")


@pytest.mark.parametrize(
    ("setup", "extra", "says"),
    [
        (_zero_gpu_nodes, [], "nodes.csv: no node has a GPU"),
        (_cpu_only_pods, [], "pods.csv: no pod asks for a GPU"),
        (_no_pods, [], "pods.csv"),
        (_trace, ["--seeds", "1001"], "--seeds must be at most 1000"),  # 1e12 built a list of 1e12 seeds
        (_trace, ["--workers", "65"], "--workers must be at most 64"),
        (lambda tmp: [*_trace(tmp)[:2], "--nodes", str(tmp)], [], "--nodes"),
        (lambda tmp: [*_trace(tmp)[:2], "--pods", "/dev/null"], [], "--pods /dev/null: not a regular file"),
    ],
    ids=[
        "nodes-without-gpus",
        "pods-without-gpus",
        "no-pods",
        "seeds-over",
        "workers-over",
        "nodes-folder",
        "pods-device",
    ],
)
def test_cli_hostile_input_is_one_error_line(tmp_path: Path, setup: Any, extra: list[str], says: str) -> None:
    """A trace without GPUs was a ZeroDivisionError/ValueError traceback; --seeds 1e12 built 1e12 seeds."""
    argv = ["pack", *setup(tmp_path), "--workers", "1", "--seeds", "1", "--policy", "FGD", *extra]
    done = CliRunner().invoke(rackscale_app, argv)  # the product's app: its one-line errors
    assert done.exit_code == 2, done.output
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr


def _without_runtime(text: str) -> str:
    """The report's text less its run time, the one value two runs of the same trace do not share."""
    return re.sub(r'"runtime_s": [0-9.]+', '"runtime_s": 0', text)


def _pack_argv(tmp: Path) -> list[str]:
    return ["pack", *_trace(tmp), "--seeds", "1", "--workers", "1", "--policy", "BestFit"]


@pytest.mark.parametrize(
    ("flags", "reads"),
    [
        (["-o", "json"], "json"),
        (["--output", "json"], "json"),
        (["-o", "yaml"], "yaml"),
        (["--json", "-o", "json"], "json"),  # the same format twice is no conflict
    ],
    ids=["o-json", "output-json", "o-yaml", "json-and-o-json"],
)
def test_cli_output_is_the_json_document(tmp_path: Path, flags: list[str], reads: str) -> None:
    """-o json is --json's document byte for byte (less the run time); -o yaml is the same document."""
    argv = _pack_argv(tmp_path)
    legacy = CliRunner().invoke(rackscale_app, [*argv, "--json"])
    done = CliRunner().invoke(rackscale_app, [*argv, *flags])
    assert legacy.exit_code == 0 and done.exit_code == 0, (legacy.output, done.output)
    document = json.loads(legacy.stdout)
    assert list(document["policies"]) == ["BestFit"] and document["seeds"] == [42]
    if reads == "json":
        assert _without_runtime(done.stdout) == _without_runtime(legacy.stdout)
    else:
        got = yaml.safe_load(done.stdout)
        assert {**got, "runtime_s": 0} == {**document, "runtime_s": 0}


@pytest.mark.parametrize("flags", [[], ["-o", "table"]], ids=["default", "o-table"])
def test_cli_output_table(tmp_path: Path, flags: list[str]) -> None:
    done = CliRunner().invoke(rackscale_app, [*_pack_argv(tmp_path), *flags])
    assert done.exit_code == 0, done.output
    assert "GPU allocation ratio" in done.stdout and "BestFit (share-best-fit)" in done.stdout
    assert not done.stdout.lstrip().startswith("{")


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--json", "-o", "yaml"], "--json means -o json, and -o yaml was given too"),
        (["--json", "-o", "table"], "--json means -o json, and -o table was given too"),
        (["-o", "table", "--json"], "--json means -o json, and -o table was given too"),
        (["-o", "xml"], "--output: 'xml' is not one of 'table', 'json', 'yaml'"),
    ],
    ids=["json-and-yaml", "json-and-table", "table-then-json", "unknown-format"],
)
def test_cli_output_conflicts_are_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], says: str
) -> None:
    """Refused before the trace is read: a missing trace file would be another error, and no run starts."""
    import rackscale.pack.experiment as experiment

    def no_run(**_: Any) -> list[Any]:
        raise AssertionError("the experiment ran")

    monkeypatch.setattr(experiment, "run_experiment", no_run)
    missing = str(tmp_path / "nope.csv")
    done = CliRunner().invoke(rackscale_app, ["pack", "--nodes", missing, "--pods", missing, *flags])
    assert done.exit_code == 2, done.output
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "nope.csv" not in lines[0], done.stderr


def test_max_arrivals_is_the_synthetic_mix_bound() -> None:
    """One run's arrivals are that run's jobs: pack's bound is the synthetic mix's (model/specs), not its own."""
    assert MAX_ARRIVALS == MAX_SYNTHETIC_JOBS


def test_expected_arrivals_is_what_inflate_builds(tmp_path: Path) -> None:
    trace = Trace.read(nodes=write_trace(tmp_path)[0], pods=write_trace(tmp_path)[1])
    demand, capacity = trace.demand_milli, trace.capacity_gpus
    # Ten times the trace's GPUs, so many copies are drawn and the mean over seeds is meaningful.
    expected = expected_arrivals(demand=demand, capacity_gpus=10 * capacity, ratio=1.3)
    built = [len(inflate(demand=demand, capacity_gpus=10 * capacity, ratio=1.3, seed=s).order) for s in range(42, 52)]
    assert abs(sum(built) / len(built) - expected) < 0.05 * expected, (built, expected)
    # The trace alone past the target: no copies, the pods themselves.
    assert expected_arrivals(demand=demand, capacity_gpus=1, ratio=1.3) == len(demand)
    # At the bound and under it nothing is refused: 9.1 million arrivals of whole-GPU pods on 7,000,000 GPUs.
    whole = np.full(3, 1000, dtype=np.int64)
    assert expected_arrivals(demand=whole, capacity_gpus=7_000_000, ratio=1.3) == 9_100_001
    check_arrivals(demand=whole, capacity_gpus=7_000_000, ratio=1.3)


def _huge_nodes(tmp: Path, *, nodes: int, gpus: int, milli: int) -> list[str]:
    """A legal trace: ``nodes`` nodes of ``gpus`` GPUs, pods of ``milli`` milli-GPU."""
    nodes_csv, pods_csv = write_trace(tmp)
    nodes_csv.write_text(NODE_HEADER + "\n" + "".join(f"n{i},32000,131072,{gpus},A\n" for i in range(nodes)))
    pods_csv.write_text(f"{FIVE}\n" + "".join(f"p{i},1000,1024,1,{milli}\n" for i in range(3)))
    return ["--nodes", str(nodes_csv), "--pods", str(pods_csv)]


@pytest.mark.parametrize(
    ("nodes", "gpus", "milli", "says"),
    [
        # (The node list's own bound, MAX_TRACE_GPUS = 131,072 GPUs, comes first: below.)
        (1, 1 << 17, 1, "inflate to 1.7e+08 pod arrivals per run, more than 10,000,000: 1.3 x 131,072 GPUs"),
        (32, 1 << 12, 1, "inflate to 1.7e+08 pod arrivals per run, more than 10,000,000: 1.3 x 131,072 GPUs"),
        (1, 1 << 17, 16, "inflate to 1.06e+07 pod arrivals per run, more than 10,000,000: 1.3 x 131,072 GPUs"),
    ],
    ids=["one-huge-node-milli-pods", "many-huge-nodes", "just-past-the-bound"],
)
def test_cli_trace_that_inflates_past_the_bound_is_refused_at_once(
    tmp_path: Path, nodes: int, gpus: int, milli: int, says: str
) -> None:
    """A legal trace of huge nodes and tiny pods built billions of arrivals: now one line, before any run."""
    argv = ["pack", *_huge_nodes(tmp_path, nodes=nodes, gpus=gpus, milli=milli), "--seeds", "1", "--workers", "1"]
    started = time.perf_counter()
    done = CliRunner().invoke(rackscale_app, argv)
    elapsed = time.perf_counter() - started
    assert done.exit_code == 2, done.output
    # Sized from two sums: no draw, no process, no ClusterState (~115 MiB for 131,072 GPUs). It was hours.
    assert elapsed < 5.0, elapsed
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert says in lines[0] and "nodes.csv" in lines[0] and "pods.csv" in lines[0], lines[0]
    assert "fix: fewer or smaller nodes" in lines[0] and "pods that ask for more GPU" in lines[0], lines[0]


@pytest.mark.parametrize(
    ("nodes", "gpus", "line", "total"),
    [(1, (1 << 17) + 1, 2, "131,073"), (3, 1 << 16, 4, "196,608"), (1, 1 << 20, 2, "1,048,576")],
    ids=["one-node-just-past", "three-nodes-past", "one-node-of-1m"],
)
def test_cli_node_list_past_the_gpu_bound_is_refused_in_one_line(
    tmp_path: Path, nodes: int, gpus: int, line: int, total: str
) -> None:
    """Each row's GPUs were bounded (MAX_UNITS), their total not: one row of 1,048,576 GPUs made a ClusterState
    of ~1 GiB in every worker. Now the reader stops at the row that passes MAX_TRACE_GPUS, before any
    cluster is built."""
    argv = ["pack", *_huge_nodes(tmp_path, nodes=nodes, gpus=gpus, milli=1000), "--seeds", "1", "--workers", "1"]
    started = time.perf_counter()
    done = CliRunner().invoke(rackscale_app, argv)
    assert time.perf_counter() - started < 5.0
    assert done.exit_code == 2, done.output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"nodes.csv:{line}: gpu: the nodes up to this row hold {total} GPUs, more than the 131,072" in lines[0]
    assert "fix: give a part of the node list" in lines[0], lines[0]
    assert MAX_TRACE_GPUS == 131_072


def test_a_node_list_at_the_gpu_bound_is_read_and_past_the_node_bound_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = _huge_nodes(tmp_path, nodes=2, gpus=1 << 16, milli=1000)  # exactly MAX_TRACE_GPUS
    assert Trace.read(nodes=argv[1], pods=argv[3]).capacity_gpus == MAX_TRACE_GPUS
    monkeypatch.setattr(alibaba_module, "MAX_CLUSTER_NODES", 3)  # a cluster spec's node bound, lowered
    argv = _huge_nodes(tmp_path, nodes=4, gpus=1, milli=1000)
    with pytest.raises(SpecError, match=r"nodes\.csv:5: more than 3 nodes, the most a cluster may have"):
        Trace.read(nodes=argv[1], pods=argv[3])


def test_inflate_refuses_before_drawing(tmp_path: Path) -> None:
    """No large allocation: the arrivals of one node of 131,072 GPUs and 1-milli pods would be ~1.3 GiB."""
    argv = _huge_nodes(tmp_path, nodes=1, gpus=1 << 17, milli=1)
    trace = Trace.read(nodes=argv[1], pods=argv[3])  # (the reader's own bounded read is not measured here)
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(InflationTooLarge, match=r"1\.7e\+08 pod arrivals per run, more than 10,000,000"):
            inflate(demand=trace.demand_milli, capacity_gpus=trace.capacity_gpus, ratio=1.3, seed=42)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 1.0
    assert peak < 1 << 20, peak


def test_a_long_pod_list_alone_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No copies needed, yet more pods than the bound: the fix is fewer pods (the bound lowered to the tiny trace)."""
    monkeypatch.setattr(trace_module, "MAX_ARRIVALS", 5)
    trace = Trace.read(nodes=write_trace(tmp_path)[0], pods=write_trace(tmp_path)[1])
    with pytest.raises(InflationTooLarge, match=r"the pod list has 12 pods \(fix: fewer pods\)"):
        check_arrivals(demand=trace.demand_milli, capacity_gpus=1, ratio=1.3)


def test_draws_past_the_bound_stop_the_run_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace whose mean is under the bound but whose draws run past it (demand in rare pods): inflate stops
    at the bound, and the CLI says so in one line, not a traceback."""
    monkeypatch.setattr(trace_module, "MAX_ARRIVALS", 5)
    monkeypatch.setattr(trace_module, "check_arrivals", lambda **_: None)  # as if the mean were under it
    argv = ["pack", *_trace(tmp_path), "--seeds", "1", "--workers", "1", "--policy", "BestFit"]
    done = CliRunner().invoke(rackscale_app, argv)
    assert done.exit_code == 2, done.output
    lines = done.stderr.strip().splitlines()
    assert lines and "seed 42: the trace inflated past 5 pod arrivals" in lines[-1], done.stderr
    assert "Traceback" not in done.output


def test_a_normal_trace_still_runs_under_the_bound(tmp_path: Path) -> None:
    done = CliRunner().invoke(rackscale_app, [*_pack_argv(tmp_path), "-o", "json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["capacity_gpus"] == 7
