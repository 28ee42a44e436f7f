"""The service's periodic lifecycle task and its collector, and `rackscale serve`'s storage options."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from rackscale.service.storage_task import (
    STORAGE_METRIC_NAMES,
    StorageCollector,
    StorageTask,
    StorageTaskConfig,
    task_config,
)
from rackscale.storage.config import Tier

from .helpers import NOW, POLICY, make_tiers, put
from .test_config import PLAN_CONFIGMAP

H, W, C = Tier.HOT, Tier.WARM, Tier.COLD


def _scrape(task: StorageTask) -> dict[str, float]:
    reg = CollectorRegistry()
    reg.register(StorageCollector(task))
    out: dict[str, float] = {}
    for line in generate_latest(reg).decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_the_collector_reports_tiers_moves_deletes_and_the_last_run(tmp_path: Path) -> None:
    roots = make_tiers(tmp_path)
    put(roots[H], "checkpoints/j/a.pt", b"a" * 100, age_days=10)  # -> warm
    put(roots[H], "checkpoints/j/b.pt", b"b" * 50, age_days=1)  # stays
    put(roots[W], "checkpoints/j/c.pt", b"c" * 30, age_days=200)  # deleted
    (roots[H] / "checkpoints/j/link.pt").symlink_to(tmp_path)  # refused
    clock = iter([NOW, NOW + 3600])
    task = StorageTask(StorageTaskConfig(policy=POLICY, roots=roots, every_s=3600), clock=lambda: next(clock))
    before = _scrape(task)
    assert 'rackscale_storage_tier_bytes{tier="hot"}' not in before  # no run yet: no sample, not a 0
    assert "rackscale_storage_last_run_timestamp_seconds" not in before
    task.run_once()
    m = _scrape(task)
    assert m['rackscale_storage_tier_bytes{tier="hot"}'] == 50
    assert m['rackscale_storage_tier_bytes{tier="warm"}'] == 100
    assert m['rackscale_storage_tier_files{tier="cold"}'] == 0
    assert m['rackscale_storage_moved_bytes_total{from="hot",to="warm"}'] == 100
    assert m['rackscale_storage_moved_bytes_total{from="warm",to="cold"}'] == 0
    assert m["rackscale_storage_deleted_bytes_total"] == 30
    assert m["rackscale_storage_refused_total"] == 1
    assert m["rackscale_storage_last_run_timestamp_seconds"] == NOW
    task.run_once()  # the counters add up over runs; the second run moves nothing more
    m2 = _scrape(task)
    assert m2['rackscale_storage_moved_bytes_total{from="hot",to="warm"}'] == 100
    assert m2["rackscale_storage_refused_total"] == 2  # the symlink is still there
    assert m2["rackscale_storage_last_run_timestamp_seconds"] == NOW + 3600
    assert {n.split("{")[0].removesuffix("_total") for n in m2} >= {
        n.removesuffix("_total") for n in STORAGE_METRIC_NAMES
    }


def test_a_failed_run_is_counted_and_retried_not_raised(tmp_path: Path) -> None:
    roots = make_tiers(tmp_path)
    roots[C].rmdir()  # the cold tier is not mounted
    task = StorageTask(StorageTaskConfig(policy=POLICY, roots=roots, every_s=60), clock=lambda: NOW)
    assert task.run_once() is None
    assert task.totals().errors == 1


def test_the_thread_runs_at_start_and_stops(tmp_path: Path) -> None:
    roots = make_tiers(tmp_path)
    put(roots[H], "checkpoints/j/a.pt", b"a", age_days=10)
    task = StorageTask(StorageTaskConfig(policy=POLICY, roots=roots, every_s=3600), clock=lambda: NOW)
    task.start()
    task.stop()
    assert (roots[W] / "checkpoints/j/a.pt").exists()


@pytest.mark.parametrize(
    ("tiers", "every", "message"),
    [
        (["hot=h", "warm=w", "cold=c"], "0s", "--storage-every must be longer than 0"),
        (["hot=h", "warm=w", "cold=c"], "1.5h", "--storage-every must be a whole number"),
        (["hot=h", "warm=w"], "1h", "no folder for tier(s) cold"),
        (["hot=h", "hot=w", "cold=c"], "1h", "--tier hot is given twice"),
        (["lukewarm=h"], "1h", "'lukewarm' is no tier"),
        (["hot"], "1h", "--tier takes TIER=PATH"),
        (["hot=h", "warm=h/x", "cold=c"], "1h", "inside tier hot"),
    ],
    ids=["zero-every", "float-every", "missing-tier", "repeated-tier", "unknown-tier", "no-equals", "nested"],
)
def test_serve_options_are_checked_before_start(tmp_path: Path, tiers: list[str], every: str, message: str) -> None:
    for d in ("h", "h/x", "w", "c"):
        (tmp_path / d).mkdir(exist_ok=True)
    cfg = tmp_path / "storage-lifecycle.yaml"
    cfg.write_text(PLAN_CONFIGMAP)
    tiers = [t.replace("=", f"={tmp_path}/", 1) if "=" in t else t for t in tiers]
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        task_config(config_file=cfg, tiers=tiers, every=every)


def test_the_service_exports_the_storage_metrics(tmp_path: Path) -> None:
    from rackscale.model.topology import GPUCluster
    from rackscale.service.app import ServiceConfig, build_service

    roots = make_tiers(tmp_path / "tiers")
    f = put(roots[H], "checkpoints/j/a.pt", b"a" * 7, age_days=0)
    ten_days_ago = time.time() - 10 * 86_400  # the service's task runs on the wall clock
    os.utime(f, (ten_days_ago, ten_days_ago))
    cfg = tmp_path / "storage-lifecycle.yaml"
    cfg.write_text(PLAN_CONFIGMAP)
    storage = task_config(config_file=cfg, tiers=[f"{t}={p}" for t, p in roots.items()], every="1h")
    cluster = GPUCluster.uniform(name="tiny", racks_per_region=1)
    svc = build_service(
        ServiceConfig(data_dir=tmp_path / "data", cluster=cluster, storage=storage, no_auth=True), start=False
    )
    try:
        assert svc.storage_task is not None
        svc.storage_task.run_once()
        text = svc.ctx.metrics.exposition()[0].decode()
        assert 'rackscale_storage_tier_bytes{tier="warm"} 7.0' in text
        assert 'rackscale_schedule_attempts_total{result="scheduled"}' in text  # the rest is still there
    finally:
        svc.close()
