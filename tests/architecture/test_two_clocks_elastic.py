"""One engine, two clocks, for elastic training: an elastic gang that starts smaller, grows into its rack's
free GPUs, is shrunk for a higher-priority job and grows back gets the same decisions, ends and KPIs in the
simulator and in the service (runner, store, simulated backend), as the other mechanisms do
(``test_two_clocks.py``).

The cluster (3 NVLink racks of 4 nodes x 4 GPUs)::

    r000: el (12 asked, 4..16) [+4 grown at 700 s]   -> shrunk to 8 for hp at 1,000 s -> grows back
    r001: a (16)
    r002: b (12) + small (2, from 700 s)
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.architecture.test_two_clocks import RecordingSimulator, cluster, decisions, run_service

from rackscale.host.changes import ChangeKind
from rackscale.model.specs import job_from_dict
from rackscale.service.store import Store
from rackscale.sim.records import SimConfig

WORKLOAD: list[tuple[float, dict[str, Any]]] = [
    (0.0, {"name": "el", "kind": "training", "gpus": 12, "minGpus": 4, "maxGpus": 16, "durationEstimateSeconds": 3000}),
    (0.0, {"name": "a", "kind": "training", "gpus": 16, "durationEstimateSeconds": 2000}),
    (0.0, {"name": "b", "kind": "training", "gpus": 12, "durationEstimateSeconds": 4000}),
    (700.0, {"name": "small", "kind": "batch", "tasks": 1, "gpus": 2, "durationEstimateSeconds": 300}),
    (1000.0, {"name": "hp", "kind": "training", "gpus": 8, "priority": 1000, "durationEstimateSeconds": 500}),
]  # fmt: skip


# The same gang as an LLM job: Llama-3.1-8B at tp 2 (a data-parallel rank of 2 GPUs, so every size above is
# whole ranks), timed by the LLM model on both clocks, its shard fixed by the host on both.
LLM_WORKLOAD = [
    (t, {**doc, "llm": {"model": "llama-3.1-8b", "tp": 2, "pp": 1}} if doc["name"] == "el" else doc)
    for t, doc in WORKLOAD
]


@pytest.mark.parametrize("workload", [WORKLOAD, LLM_WORKLOAD], ids=["generic-gang", "llm-gang"])
def test_an_elastic_gang_resizes_alike_under_both_clocks(
    tmp_path: Path, workload: list[tuple[float, dict[str, Any]]]
) -> None:
    specs = [replace(job_from_dict({**doc, "queue": "q"}), submit_time=t) for t, doc in workload]
    sim = RecordingSimulator(cluster(), specs, SimConfig(record_series=False))
    result = sim.run()
    committed, ended, live, last = run_service(tmp_path, workload)

    assert decisions(committed) == decisions(sim.log)
    sim_ends = {n: (str(r.status), round(r.end or -1.0, 6)) for n, r in result.jobs.items()}
    svc_ends = {n: (st, round(e if e is not None else -1.0, 6)) for n, (st, e) in ended.items()}
    assert svc_ends == sim_ends
    kpis = live.kpi.kpis(
        makespan_s=last, cluster_gpus=live.cluster.total_gpus, price_per_gpu_hour=live.cluster.pricing.per_gpu_hour
    )
    for key, value in result.kpis.items():
        if key != "events" and value is not None:
            assert kpis[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key

    # What the workload claims happened did: grown, shrunk for hp (no preemption), grown again.
    resizes = [(c.time, c.message.split(" GPUs")[0]) for c in sim.log if c.type is ChangeKind.RESIZED]
    assert [m for _, m in resizes[:2]] == ["grown from 12 to 16", "shrunk from 16 to 8"], resizes
    assert resizes[0][0] == 700.0 and resizes[1][0] == 1000.0
    assert len(resizes) >= 3 and resizes[2][1].startswith("grown from 8 to 16")
    assert result.kpis["preemptions"] == 0 and result.kpis["resizes"] == len(resizes)
    assert live.counters.resizes == len(resizes)  # what /metrics exports as rackscale_elastic_resizes_total
    # Its work is the same at every size: it ends later than on 12 GPUs throughout would have, by less than
    # the time on 8 GPUs cost it, and every restart cost a minute of its GPUs.
    assert result.jobs["el"].status == "completed"
    assert result.kpis["lost_gpu_hours"] == pytest.approx(
        sum(16 if "to 16" in m else 8 for _, m in resizes) * 60 / 3600
    )


def test_the_store_keeps_each_size_of_an_elastic_gang(tmp_path: Path) -> None:
    """The service's store: each resize is an event of the job's run, and its placement (what `describe job`
    and a restart read) is the latest size; the job completes once, with no restart counted."""
    committed, _, _, _ = run_service(tmp_path, WORKLOAD)
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        events = store.events("el")
        kinds = [e.type for e in events]
        assert kinds.count("resized") == sum(1 for c in committed if c.job == "el" and c.type is ChangeKind.RESIZED)
        assert kinds.count("resized") >= 3 and kinds[-1] == "completed"
        assert any("shrunk from 16 to 8 GPUs: a waiting job of higher priority needs them" in e.message for e in events)
        row = store.get("el")
        assert row is not None and row.status == "completed" and row.restarts == 0
        last = [c for c in committed if c.job == "el" and c.type is ChangeKind.RESIZED][-1]
        assert last.placement is not None and last.placement.whole_gpus == 16
    finally:
        store.close()
