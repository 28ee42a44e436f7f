"""The host's live autoscaling pass (``ClusterHost.autoscale`` / ``scaled``) without Prometheus: a service
without a query follows its own model (its ServingProfile curve at the service clock's hour), a service
without bounds is left alone, and a query without an answer holds (``fallback: hold``) or falls back to the
model (``fallback: model``), saying why.

    2 racks x 2 nodes x 4 GPUs; 1-GPU replicas, each on its own node while they can (anti-affinity); and one
    node of 4 GPUs, where replicas share the node's slice and a scale-down splits it
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from rackscale.host.autoscale import NoLoad
from rackscale.host.changes import ChangeKind
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import AutoscaleSpec, ScaleFallback, ServingProfile, inference
from rackscale.service.live import LiveCluster

CLUSTER = GPUCluster.uniform(name="svc", racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)
NIGHT = 2 * 3600.0  # 02:00, the trough of a curve that peaks at 14:00
QUIET = ServingProfile(peak_tokens_per_s=100.0, trough_fraction=0.1)  # one replica carries it all day


def running(host: LiveCluster, name: str) -> int:
    return host.state.running[name].placement.units


def started(*specs: object) -> LiveCluster:
    host = LiveCluster(CLUSTER)
    for s in specs:
        host.submit(s)  # type: ignore[arg-type]
    host.cycle(NIGHT)
    return host


def test_the_model_scales_a_bounded_service_down_after_the_window_and_leaves_a_fixed_one() -> None:
    bounded = inference("chat", 4, min_replicas=1, max_replicas=8, serving=QUIET, submit_time=NIGHT)
    fixed = inference("fixed", 2, serving=QUIET, submit_time=NIGHT)
    host = started(bounded, fixed)
    assert running(host, "chat") == 4
    assert host.autoscale(NIGHT, readings={}).changes == []  # first sight: held for the window
    assert host.autoscale(NIGHT + 299, readings={}).changes == []
    [ch] = host.autoscale(NIGHT + 300, readings={}).changes
    assert (ch.job, ch.type, ch.reason) == ("chat", ChangeKind.RESIZED, "ScaledDown")
    assert ch.message.startswith("scaled down 4 -> 1 replicas: load ") and "(the service's model)" in ch.message
    assert ch.placement is not None and ch.placement.units == running(host, "chat") == 1
    assert running(host, "fixed") == 2  # no bounds, no autoscale block: the live service leaves it alone


def test_replicas_packed_on_one_node_scale_down_one_by_one() -> None:
    #   n0 [xxxx]  (four replicas in one slice)  ->  n0 [x...]
    one_node = GPUCluster.uniform(name="one", racks_per_region=1, nodes_per_rack=1, gpus_per_node=4)
    host = LiveCluster(one_node)
    host.submit(inference("chat", 4, min_replicas=1, max_replicas=4, serving=QUIET, submit_time=NIGHT))
    host.cycle(NIGHT)
    assert len(host.state.running["chat"].placement.allocs) == 1 and running(host, "chat") == 4
    host.autoscale(NIGHT, readings={})
    [ch] = host.autoscale(NIGHT + 300, readings={}).changes
    assert ch.message.startswith("scaled down 4 -> 1 replicas")
    assert ch.placement is not None and ch.placement.whole_gpus == 1 and ch.placement.units == 1
    assert host.state.free_whole_gpus == 3
    host.state.check_invariants()


@pytest.mark.parametrize(
    ("fallback", "replicas_after", "held"),
    [(ScaleFallback.HOLD, 4, True), (ScaleFallback.MODEL, 1, False)],
    ids=["hold", "model"],
)
def test_a_query_without_an_answer_holds_or_follows_the_model(
    fallback: ScaleFallback, replicas_after: int, held: bool
) -> None:
    spec = replace(
        inference("chat", 4, min_replicas=1, max_replicas=8, serving=QUIET, submit_time=NIGHT),
        autoscale=AutoscaleSpec(query="sum(up)", target=100.0, fallback=fallback),
    )
    host = started(spec)
    gone = {"chat": NoLoad(why="Prometheus at http://prom:9090 unreachable: ConnectError")}
    for t in (NIGHT, NIGHT + 300):
        step = host.autoscale(t, readings=gone)
    assert running(host, "chat") == replicas_after
    if held:
        assert step.held == {"chat": "holding 4 replicas: no load from its query (Prometheus at http://prom:9090 "
                                     "unreachable: ConnectError)"}  # fmt: skip
    else:
        assert step.held == {} and "its query has no answer (Prometheus at" in step.changes[0].message


def test_a_scale_up_is_placed_by_the_next_cycle_and_reported_once() -> None:
    busy = ServingProfile(peak_tokens_per_s=1e9, trough_fraction=1.0)  # more than any size carries: the max
    host = started(inference("chat", 2, min_replicas=1, max_replicas=6, serving=busy, submit_time=NIGHT))
    assert host.autoscale(NIGHT + 15, readings={}).changes == []  # queued, not placed yet
    assert "chat" in host.pending and host.scaled(NIGHT + 15) == []
    host.cycle(NIGHT + 15)
    [ch] = host.scaled(NIGHT + 15)
    assert (ch.reason, ch.message.split(":")[0]) == ("ScaledUp", "scaled up 2 -> 6 replicas")
    assert ch.placement is not None and ch.placement.units == running(host, "chat") == 6
    assert host.scaled(NIGHT + 30) == []  # said once


def test_a_service_that_ends_with_its_scale_up_queued_leaves_nothing_waiting() -> None:
    # The scale-up waits (the cycle has not run) when the service completes: the queue must not keep a
    # request to scale a service that no longer runs (it would stand ahead of every lower-priority job).
    busy = ServingProfile(peak_tokens_per_s=1e9, trough_fraction=1.0)
    host = started(inference("chat", 2, min_replicas=1, max_replicas=6, serving=busy, submit_time=NIGHT))
    host.autoscale(NIGHT + 15, readings={})
    assert "chat" in host.pending
    ch = host.finish("chat", NIGHT + 20)
    assert ch is not None and ch.type is ChangeKind.COMPLETED
    assert "chat" not in host.pending and host.waiting_milli == 0
    assert host.cycle(NIGHT + 20) == [] and host.scaled(NIGHT + 20) == []
    assert host.state.free_whole_gpus == CLUSTER.total_gpus
