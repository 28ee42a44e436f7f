"""kill -9 of a real ``rackscale serve`` process in the middle of a submission load, then a restart on the
same data directory: no acknowledged job is lost or duplicated, the store is consistent, jobs running at
the crash are running or completed afterwards, and no GPU is held twice.

Uses :mod:`rackscale.bench.service` (the same code as ``rackscale bench service --crash-after``), with a
small bounded load: 400 submissions over 8 keep-alive connections, SIGKILL after ~200 acknowledgements.
"""

from __future__ import annotations

import time
from pathlib import Path

from rackscale.bench.service import (
    ServerProcess,
    all_jobs,
    consistent_allocations,
    free_port,
    http_json,
    job_doc,
    run_service_benchmark,
    scrape,
    store_problems,
)


def test_kill9_mid_load_loses_no_acknowledged_job(tmp_path: Path) -> None:
    t0 = time.monotonic()
    report = run_service_benchmark(
        jobs=400,
        concurrency=8,
        workers=1,
        duration_limit=20.0,
        crash_after=200,
        racks=2,
        speed=1000.0,
        data_dir=tmp_path,
    )
    v = report["verdict"]
    crash = report["crash"]
    assert crash is not None, "the server was never killed"
    assert crash["acked_at_kill"] >= 200
    assert crash["running_at_kill"] > 0, "nothing was running at the crash: the check below would be empty"
    # The load went on against the restarted server.
    assert report["accepted"] > crash["acked_at_kill"]
    assert report["non_2xx"] == {}
    assert v["lost"] == 0, f"acknowledged jobs missing after the restart: {v['lost_sample']}"
    assert v["duplicates"] == 0
    assert v["running_before_not_running_or_completed"] == []
    assert v["store_problems"] == []
    assert v["allocation_problems"] == []
    assert v["jobs_in_store"] >= v["acked"]
    assert report["ok"] is True
    assert time.monotonic() - t0 < 60


def test_restart_keeps_running_jobs_and_places_again(tmp_path: Path) -> None:
    """Without load: jobs running at the kill come back running (or completed), never on the same GPUs as
    another job, and the restarted scheduler places what was pending."""
    server = ServerProcess(tmp_path / "data", free_port(), speed=1.0, racks=1)
    try:
        server.start()
        # 100 one-GPU jobs of an hour on one 72-GPU rack: 72 run, 28 wait.
        for i in range(100):
            doc = {"name": f"crash-{i:03d}", "kind": "training", "gpus": 1, "durationEstimateSeconds": 3600}
            code, body = http_json(f"{server.url}/v1/jobs", "POST", doc)
            assert code == 201, body
        deadline = time.monotonic() + 15
        while len(all_jobs(server.url, "running")) < 72:
            assert time.monotonic() < deadline, "the scheduler did not fill the rack"
            time.sleep(0.05)
        before = {j["name"]: j["placement"] for j in all_jobs(server.url, "running")}
        server.kill9()
        server.start()
        after = {j["name"]: j for j in all_jobs(server.url)}
        assert len(after) == 100
        for name, placement in before.items():
            assert after[name]["status"] in ("running", "completed"), after[name]
            if after[name]["status"] == "running":
                assert after[name]["placement"] == placement, f"{name} moved across the restart"
        assert store_problems(server.db_url) == []
        problems, info = consistent_allocations(server.url)
        assert problems == [], problems
        assert info["gpus_allocated"] == 72.0
        # Cancel ten running jobs: the restarted scheduler places ten of the waiting ones.
        for name in sorted(before)[:10]:
            code, _ = http_json(f"{server.url}/v1/jobs/{name}", "DELETE")
            assert code == 200
        deadline = time.monotonic() + 15
        while scrape(server.url).get("scheduled", 0) < 10:
            assert time.monotonic() < deadline, "the restarted scheduler placed nothing"
            time.sleep(0.05)
        problems, _ = consistent_allocations(server.url)
        assert problems == [], problems
        assert store_problems(server.db_url) == []
    finally:
        server.stop()


def test_job_mix_is_valid_and_varied() -> None:
    from rackscale.model.specs import job_from_dict

    docs = [job_doc(i) for i in range(500)]
    specs = [job_from_dict(d) for d in docs]
    gangs = [s.unit.gpus * s.units for s in specs]
    assert len({d["name"] for d in docs}) == 500
    assert sum(g <= 8 for g in gangs) > 350 and sum(g >= 16 for g in gangs) > 20
    assert {s.kind.value for s in specs} == {"training", "inference", "batch"}
