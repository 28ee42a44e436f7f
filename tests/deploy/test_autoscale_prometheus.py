"""Live inference autoscaling against a real Prometheus serving a recorded series.

The series is vLLM's token counter, written as OpenMetrics and loaded into Prometheus's TSDB with
``promtool tsdb create-blocks-from openmetrics`` (the recorded load of one service, three hours ago):

    tokens/s  7,800 |          ┌─────────┐
              3,900 |──────────┘         │
              1,950 |                    └───────────────────
                    0        600       1200               2400 s

The runner (service clock moved by hand over those times; Prometheus evaluates at them, ``pin_time``) scales
the service `chat` (target 2,000 tokens/s per replica, 1..8 replicas): 2 replicas at 3,900 tokens/s, 4 as
soon as the load doubles, and back down to 1 only once the 300 s scale-down window has passed since the
last high reading. Then Prometheus is stopped: the service holds its replicas and the log says why.
"""

from __future__ import annotations

import logging
import re
import subprocess
import time
from pathlib import Path

import pytest
from tests.deploy.engines import require, start_prometheus
from tests.service.conftest import HandClock

from rackscale.backends.sim import SimBackend
from rackscale.model.topology import GPUCluster
from rackscale.service.live import LiveCluster
from rackscale.service.load_signal import LiveAutoscaler, PrometheusSource
from rackscale.service.runner import Runner, spec_of
from rackscale.service.store import Store

CLUSTER = GPUCluster.uniform(name="serve", racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)
T0 = 1_700_000_000.0  # the recording's start (rebased to three hours ago at run time)
STEP_S = 5.0  # the recording's scrape interval
PHASES = [(0.0, 3900.0), (600.0, 7800.0), (1200.0, 1950.0)]  # (from, tokens/s)
END_S = 2400.0
QUERY = "sum(rate(vllm:generation_tokens_total[1m]))"


def rate_at(t: float) -> float:
    return [r for start, r in PHASES if t >= start][-1]


def openmetrics(t0: float) -> str:
    lines = ["# TYPE vllm:generation_tokens counter", "# HELP vllm:generation_tokens Generated tokens."]
    total, t = 0.0, 0.0
    while t <= END_S:
        lines.append(f'vllm:generation_tokens_total{{model_name="chat"}} {total:.1f} {t0 + t:.3f}')
        total += rate_at(t) * STEP_S
        t += STEP_S
    return "\n".join([*lines, "# EOF", ""])


def replicas(runner: Runner) -> int:
    return runner.live.state.running["chat"].placement.units


def test_replicas_follow_a_recorded_load_and_hold_when_prometheus_goes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    t0 = float(int(time.time()) // 3600 * 3600 - 3 * 3600)  # within retention, clear of the head block
    series = tmp_path / "series.om"
    series.write_text(openmetrics(t0))
    data = tmp_path / "prometheus-data"
    done = subprocess.run(
        [require("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(series), str(data)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    config = tmp_path / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\n")
    prom = start_prometheus(config, tmp_path)
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    clock = HandClock()
    source = PrometheusSource(prom.url, pin_time=True)
    runner = Runner(
        LiveCluster(CLUSTER),
        store,
        SimBackend(CLUSTER),
        clock,  # type: ignore[arg-type]
        autoscaler=LiveAutoscaler(source=source),
    )
    try:
        clock.t = t0 + 60.0  # a minute in: rate[1m] has its first full window
        runner.recover()
        doc = {
            "name": "chat",
            "kind": "inference",
            "replicas": 2,
            "minReplicas": 1,
            "maxReplicas": 8,
            "autoscale": {"query": QUERY, "target": 2000, "metric": "tokens_per_second"},
        }
        row = store.insert_job(name="chat", queue="q", kind="inference", gpus=2, priority=0, doc=doc, submitted=0.0)
        runner.submitted(spec_of(row), row.seq)
        seen: list[tuple[float, int]] = []
        while clock.t <= t0 + END_S:
            runner.step()
            seen.append((clock.t - t0, replicas(runner)))
            clock.t += 15.0
        assert {n for t, n in seen if t < 600} == {2}  # 3,900 tokens/s: 2 replicas of 2,000
        up = min(t for t, n in seen if n == 4)
        assert 600 < up <= 660  # as soon as the rate over the last minute reads 7,800
        assert {n for t, n in seen if up <= t < 1200} == {4}
        # The load falls at 1200; rate[1m] reads it falling until 1260. Each reading stays in the 300 s
        # window, so the replicas step down only as the high ones leave it: none before 1200 + 300, and
        # all the way to 1 once the last high reading (1260) is 300 s old.
        after = [(t, n) for t, n in seen if t >= 1200]
        assert all(n == 4 for t, n in after if t <= 1500)
        assert [n for _, n in after] == sorted((n for _, n in after), reverse=True)  # never back up
        assert all(n == 1 for t, n in after if t >= 1260 + 300 + 15)
        events = [(e.reason, e.message) for e in store.events("chat") if e.reason.startswith("Scaled")]
        # rate[1m] ramps over a minute, so a scale-up may take a step through 3 on its way to 4.
        ups = [m for r, m in events if r == "ScaledUp"]
        assert [r for r, _ in events] == ["ScaledUp"] * len(ups) + ["ScaledDown"] * (len(events) - len(ups))
        assert ups[0].startswith("scaled up 2 -> ") and 1 <= len(ups) <= 2
        m = re.search(
            r" -> 4 replicas: load ([\d,]+) tokens/s \(prometheus\), target 2,000 tokens/s per replica$", ups[-1]
        )
        assert m is not None and 6000 < int(m[1].replace(",", "")) <= 7800, ups  # over 3 x 2,000
        assert events[len(ups)][1].startswith("scaled down 4 -> ")
        assert " -> 1 replicas: load 1,950 tokens/s (prometheus)" in events[-1][1]
        stored = store.get("chat")
        assert stored is not None and stored.placement is not None and stored.placement.units == 1

        prom.stop()  # Prometheus goes away: the service holds, the log says why, the step goes on
        errors = runner.errors
        clock.t += 15.0
        with caplog.at_level(logging.WARNING, logger="rackscale.service"):
            runner.step()
        assert replicas(runner) == 1 and runner.errors == errors
        why = runner.autoscaler.held["chat"]
        assert why.startswith("holding 1 replicas: no load from its query (Prometheus at http://127.0.0.1:")
        assert "unreachable" in why
        assert any("chat" in r.getMessage() and "unreachable" in r.getMessage() for r in caplog.records)
    finally:
        prom.stop()
        source.close()
        store.close()
