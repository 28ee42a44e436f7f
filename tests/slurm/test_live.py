"""Against the real Slurm of the fixture: import round trip, and the slurm backend through the service
(gangs pinned inside one rack, exit codes, cancel, restart without duplicates)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.service.conftest import serve_in_thread, wait_for
from tests.slurm.conftest import SPEC

from rackscale.backends.slurm import SlurmBackend, slurm_priority
from rackscale.loaders import parse_cluster_text
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.workload import batch
from rackscale.service.app import ServiceConfig, ServiceConfigError, build_service
from rackscale.slurm.emulated import EmulatedSlurm
from rackscale.slurm.importer import cluster_yaml, import_cluster

TIMEOUT = 30.0


def config(emu: EmulatedSlurm, data: Path) -> ServiceConfig:
    opts: dict[str, object] = {"slurm_conf": str(emu.conf), "poll_interval_s": 0.2}
    return ServiceConfig(data_dir=data, backend="slurm", backend_options=opts, interval_s=0.02)


def submit(c: httpx.Client, name: str, gpus: int, *command: str, priority_class: str | None = None) -> None:
    body: dict[str, Any] = {
        "name": name,
        "kind": "training",
        "gpus": gpus,
        "gpusPerWorker": 4,
        "command": list(command),
    }
    if priority_class is not None:
        body["priorityClassName"] = priority_class
    r = c.post("/v1/jobs", json=body)
    assert r.status_code in (200, 201, 202), r.text


def status_is(c: httpx.Client, name: str, *want: str) -> dict[str, Any] | None:
    got: dict[str, Any] = c.get(f"/v1/jobs/{name}").json()
    return got if got["status"] in want else None


def slurm_id(data: Path, job: str) -> str:
    """The Slurm job id the backend recorded (the store says running a moment before sbatch returns)."""
    path = data / "slurm" / f"{job}.id"
    got = wait_for(lambda: path.exists() and path.read_text().strip(), timeout=TIMEOUT, what=f"{path}")
    assert isinstance(got, str)
    return got


def test_import_round_trip(slurm: EmulatedSlurm) -> None:
    got = import_cluster(slurm.slurm)
    shape = [(r.name, [got.nodes[n].name for n in r.nodes], r.gpus) for r in got.racks]
    assert shape == [(r.name, [SPEC.nodes[n].name for n in r.nodes], r.gpus) for r in SPEC.racks]
    assert [g.name for g in got.regions] == ["region-0"] and got.total_gpus == 64
    back = parse_cluster_text(cluster_yaml(got))
    assert [(n.name, n.rack, n.gpus) for n in back.nodes] == [(n.name, n.rack, n.gpus) for n in SPEC.nodes]


def test_gangs_run_where_rackscale_placed_them_inside_one_rack(slurm: EmulatedSlurm, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve_in_thread(config(slurm, data)) as live, live.client() as c:
        assert c.get("/v1/jobs").status_code == 200
        submit(c, "g8", 8, "sleep", "2")
        submit(c, "g16", 16, "sleep", "2", priority_class="high-priority")
        for name, n_nodes in (("g8", 2), ("g16", 4)):
            job = wait_for(lambda n=name: status_is(c, n, "running", "completed"), timeout=TIMEOUT, what=name)
            assert isinstance(job, dict)
            api_nodes = sorted(s["node"] for s in job["placement"]["nodes"])
            sj = slurm.slurm.job(slurm_id(data, name))
            assert sj is not None and sj.name == f"rs-{name}"
            wait_for(lambda i=sj.id: (j := slurm.slurm.job(i)) is not None and j.nodes, timeout=TIMEOUT)
            sj = slurm.slurm.job(sj.id)
            assert sj is not None
            assert sorted(sj.nodes) == api_nodes and len(api_nodes) == n_nodes
            assert sj.priority == slurm_priority(1_000_000 if name == "g16" else 0)  # the job's priority passed on
            assert len({n.rack for n in SPEC.nodes if n.name in api_nodes}) == 1
            assert len(job["placement"]["racks"]) == 1
        for name in ("g8", "g16"):
            done = wait_for(lambda n=name: status_is(c, n, "completed", "failed"), timeout=TIMEOUT, what=name)
            assert isinstance(done, dict) and (done["status"], done["exitCode"]) == ("completed", 0), done


def test_a_failing_command_fails_the_job_with_its_exit_code(slurm: EmulatedSlurm, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve_in_thread(config(slurm, data)) as live, live.client() as c:
        submit(c, "bad", 4, "sh", "-c", "echo oops; exit 3")
        done = wait_for(lambda: status_is(c, "bad", "completed", "failed"), timeout=TIMEOUT, what="bad")
        assert isinstance(done, dict) and (done["status"], done["exitCode"]) == ("failed", 3), done
        assert (data / "slurm" / "bad.out").read_text().strip() == "oops"


def test_cancel_scancels_the_slurm_job(slurm: EmulatedSlurm, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve_in_thread(config(slurm, data)) as live, live.client() as c:
        submit(c, "doomed", 8, "sleep", "120")
        wait_for(lambda: status_is(c, "doomed", "running"), timeout=TIMEOUT, what="running")
        job_id = slurm_id(data, "doomed")
        assert c.delete("/v1/jobs/doomed").status_code in (200, 202, 204)
        wait_for(lambda: status_is(c, "doomed", "cancelled"), timeout=TIMEOUT, what="cancelled")
        sj = wait_for(lambda: (j := slurm.slurm.job(job_id)) is not None and j.terminal and j, timeout=TIMEOUT)
        assert getattr(sj, "state", None) == "CANCELLED"


def test_a_restart_adopts_the_running_job_without_submitting_it_again(slurm: EmulatedSlurm, tmp_path: Path) -> None:
    data = tmp_path / "data"
    cfg = config(slurm, data)
    with serve_in_thread(cfg) as live, live.client() as c:
        submit(c, "survivor", 8, "sleep", "4")
        wait_for(lambda: status_is(c, "survivor", "running"), timeout=TIMEOUT, what="running")
        first = slurm_id(data, "survivor")
    with serve_in_thread(cfg) as live, live.client() as c:
        assert status_is(c, "survivor", "running")
        # one Slurm job, the first one (it may still be PENDING for a moment after sbatch)
        assert [i for i, _ in slurm.slurm.queue_by_name("rs-survivor")] == [first]
        done = wait_for(lambda: status_is(c, "survivor", "completed", "failed"), timeout=TIMEOUT, what="end")
        assert isinstance(done, dict) and done["status"] == "completed", done
    assert [j.id for j in slurm.slurm.jobs().values() if j.name == "rs-survivor"] == [first]


def test_start_after_a_crash_before_the_id_file_adopts_instead_of_submitting(
    slurm: EmulatedSlurm, tmp_path: Path
) -> None:
    backend = SlurmBackend(slurm.slurm, SPEC, tmp_path, poll_interval_s=0)
    spec = batch("twice", gpus=4, command=("sleep", "30"))
    placement = Placement("twice", (NodeAlloc(5, (0, 1, 2, 3)),), 1)
    backend.start(spec, placement, now=0.0)
    first = (tmp_path / "slurm" / "twice.id").read_text().strip()
    (tmp_path / "slurm" / "twice.id").unlink()  # as if the service died right after sbatch
    fresh = SlurmBackend(slurm.slurm, SPEC, tmp_path, poll_interval_s=0)
    fresh.start(spec, placement, now=1.0)
    assert (tmp_path / "slurm" / "twice.id").read_text().strip() == first
    assert [i for i, _ in slurm.slurm.queue_by_name("rs-twice")] == [first]
    sj = wait_for(lambda: (j := slurm.slurm.job(first)) is not None and j.nodes and j, timeout=TIMEOUT)
    assert getattr(sj, "nodes", None) == ("r001-n01",)
    # A job Slurm never heard of, with an id file: lost. A stray job of ours: cancelled on adopt.
    (tmp_path / "slurm" / "ghost.id").write_text("999999\n")
    from rackscale.backends.base import RunningJobRecord

    exits = SlurmBackend(slurm.slurm, SPEC, tmp_path).adopt(
        {"ghost": RunningJobRecord(batch("ghost", gpus=4), placement, 0.0)}, 2.0
    )
    assert [(e.job, e.ok, "lost" in e.reason) for e in exits] == [("ghost", False, True)]
    wait_for(lambda: (j := slurm.slurm.job(first)) is not None and j.terminal, timeout=TIMEOUT, what="stray cancelled")


def test_a_cluster_naming_unknown_nodes_is_refused(slurm: EmulatedSlurm, tmp_path: Path) -> None:
    from rackscale.model.topology import GPUCluster

    cfg = config(slurm, tmp_path / "data")
    cfg.cluster = GPUCluster.uniform(racks_per_region=1, nodes_per_rack=2, regions=2)
    with pytest.raises(ServiceConfigError, match="Slurm does not know"):
        build_service(cfg, start=False)
