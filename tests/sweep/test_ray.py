"""The sweep on a real local Ray cluster of two nodes (``ray.cluster_utils.Cluster``, both on 127.0.0.1):
six cells that read one trace, put in the object store once and handed to each task by reference, and the
worker of one cell killed mid-cell (SIGKILL of the pid it wrote): Ray retries it and every cell is done.

    driver ── ray.put(trace) ──> object store (once)
       │  6 tasks (trace: ObjectRef)
       ├── head node   (1 CPU) ── worker ── cells
       └── second node (1 CPU) ── worker ── cells   <- one worker killed, its task retried
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.sweep import cellfns
from tests.sweep.helpers import doc, kill_when_written

from rackscale.sweep import parse_sweep
from rackscale.sweep.results import ResultsWriter, read_results
from rackscale.sweep.runner import make_cells, run_ray

try:
    import ray
except ImportError:  # the tests' install has it (the dev extra): missing, it is a failure, not a skip
    pytest.fail("ray is not installed: pip install 'rackscale[sweep]'", pytrace=False)

MB = 1024 * 1024


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    box = tmp_path_factory.mktemp("ray")
    os.environ["SWEEP_TEST_DIR"] = str(box)  # the nodes' workers inherit it
    # ray.init resolves 127.0.0.1 to the host's routable address, unreachable here: keep it on loopback
    was, ray_constants.ENABLE_RAY_CLUSTER = ray_constants.ENABLE_RAY_CLUSTER, False
    node = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * MB}
    c = Cluster(initialize_head=True, connect=False, head_node_args={**node, "include_dashboard": False})
    try:
        c.add_node(**node)
        ray.init(address=c.address, log_to_driver=False)
        c.wait_for_nodes()
        from ray import cloudpickle

        cloudpickle.register_pickle_by_value(cellfns)  # the test module is not importable on the workers
        yield box
    finally:
        ray.shutdown()
        c.shutdown()
        os.environ.pop("SWEEP_TEST_DIR", None)
        ray_constants.ENABLE_RAY_CLUSTER = was


def philly(path: Path, rows: int = 40) -> Path:
    lines = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for i in range(rows):
        g = (1, 2, 4, 8)[i % 4]
        lines.append(f"2017-10-01 00:{i:02d}:00,{600 + 30 * i},{g},{(600 + 30 * i) * g},vc{i % 3}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cells_on_two_nodes_trace_put_once_killed_worker_retried(
    cluster: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    trace = philly(cluster / "philly.csv")
    grid = {"policy": ["rackscale", "first-fit"], "seed": [0, 1, 2]}
    cells, _ = make_cells(parse_sweep(doc(base={"racks": 1, "trace": f"philly:{trace}"}, grid=grid)).expand())
    puts: list[Any] = []
    real_put = ray.put
    monkeypatch.setattr(ray, "put", lambda value, **kw: puts.append(value) or real_put(value, **kw))
    tasks: list[tuple[Any, ...]] = []
    real_remote = ray.remote

    def spy_remote(*a: Any, **kw: Any) -> Any:  # ray.remote(**options)(fn), recording each task's arguments
        def apply(fn: Any) -> Any:
            remote_fn = real_remote(*a, **kw)(fn)
            real = remote_fn.remote
            remote_fn.remote = lambda *args: tasks.append(args) or real(*args)
            return remote_fn

        return apply

    monkeypatch.setattr(ray, "remote", spy_remote)
    watcher = kill_when_written(cluster / "pid")
    with ResultsWriter(cluster / "r.jsonl") as w:
        stats = run_ray(cells, w, address=None, retries=2, cell_fn=cellfns.killable)
    watcher.join(timeout=1)
    assert puts == [trace.read_bytes()] and stats.trace_puts == 1  # once, for six cells
    assert len(tasks) == 6 and all(isinstance(t[2], ray.ObjectRef) for t in tasks)  # by reference
    assert len({t[2] for t in tasks}) == 1
    recs = read_results(cluster / "r.jsonl")
    assert len(recs) == 6 and {r["status"] for r in recs.values()} == {"ok"}, [r.get("error") for r in recs.values()]
    assert {r["trace_bytes"] for r in recs.values()} == {trace.stat().st_size}  # the bytes reached every cell
    assert all(r["jobs"] == 40 for r in recs.values())
    killed = int((cluster / "pid").read_text())
    runs = [ln.split() for ln in (cluster / "pids").read_text().splitlines()]
    of_seed_1 = [int(p) for s, p in runs if s == "1"]
    assert killed in of_seed_1 and any(p != killed for p in of_seed_1)  # retried in another worker
    with pytest.raises(ProcessLookupError):
        os.kill(killed, 0)


def test_perf_cells_on_the_cluster(cluster: Path) -> None:
    """perf serve cells through the real cell function on Ray: no trace to put, each point computed on a node."""
    perf = {"base": {"model": "llama-3.1-8b", "interactivity": [50, 100]}, "grid": {"gpu": ["h100", "b200"]}}
    document = {"apiVersion": "rackscale.io/v1", "kind": "Sweep", "metadata": {"name": "p"}, "spec": {"perf": perf}}
    cells, _ = make_cells(parse_sweep(document).expand())
    with ResultsWriter(cluster / "perf.jsonl") as w:
        stats = run_ray(cells, w, address=None, retries=1)
    recs = list(read_results(cluster / "perf.jsonl").values())
    assert stats.trace_puts == 0 and stats.done == 2, stats.errors
    assert {r["options"]["gpu"] for r in recs} == {"h100", "b200"}
    assert all(r["runner"] == "ray" and r["kpis"]["tok_s_gpu_at_50"] > 0 for r in recs)
