"""What a service that is not running asks for (``ServicesMixin._start_request``): on the simulator's host
(``HostOptions.services_start_at_model``) a service whose replicas follow its model starts at the replicas
the model asks for at that instant, within its bounds; a service with a load query, a service without
bounds, and every service on the live host start at their ``replicas``.

    2 racks x 2 nodes x 4 GPUs (16 GPUs, all free); 1-GPU replicas
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from rackscale.host.host import ClusterHost, HostOptions
from rackscale.host.perf import Layout, replica_tokens_per_s
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import AutoscaleSpec, JobSpec, ServingProfile, inference

CLUSTER = GPUCluster.uniform(name="svc", racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)
NIGHT = 2 * 3600.0  # 02:00, the trough of a curve that peaks at 14:00
PEAK = 14 * 3600.0


def _swinging() -> ServingProfile:
    """One replica carries the trough; the peak asks for a hundred."""
    one = replica_tokens_per_s(CLUSTER, inference("probe", 1), Layout.packed(CLUSTER, 1))
    return ServingProfile(peak_tokens_per_s=100 * one, trough_fraction=0.001)


SWINGING = _swinging()
BOUNDED = inference("chat", 2, min_replicas=1, max_replicas=4, serving=SWINGING)
QUERIED = replace(BOUNDED, autoscale=AutoscaleSpec(query="sum(up)", target=100.0))
FIXED = inference("chat", 2, serving=SWINGING)


@dataclass(frozen=True)
class Case:
    spec: JobSpec
    at: float
    at_model: bool
    want: int


CASES = {
    "at-the-trough-one-replica": Case(BOUNDED, NIGHT, True, 1),
    "at-the-peak-its-maximum": Case(BOUNDED, PEAK, True, 4),
    "the-live-host-starts-it-at-its-replicas": Case(BOUNDED, NIGHT, False, 2),
    "a-service-with-a-query-starts-at-its-replicas": Case(QUERIED, NIGHT, True, 2),
    "a-service-without-bounds-keeps-its-replicas": Case(FIXED, PEAK, True, 2),
}


def host(*, at_model: bool) -> ClusterHost:
    return ClusterHost(CLUSTER, options=HostOptions(services_start_at_model=at_model))


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_a_service_starts_at_what_it_asks_for(case: Case) -> None:
    h = host(at_model=case.at_model)
    h.submit(replace(case.spec, submit_time=case.at))
    h.cycle(case.at)
    assert h.state.running["chat"].placement.units == case.want
    assert h.runs["chat"].spec.units == case.spec.units  # the job's own spec is unchanged


def test_a_restarted_service_asks_for_what_its_model_says_then() -> None:
    h = host(at_model=True)
    h.submit(replace(BOUNDED, submit_time=NIGHT))
    h.cycle(NIGHT)
    assert h.state.running["chat"].placement.units == 1
    h.state.release("chat")  # its GPU failed at the peak
    h.stop_hit({"chat"}, PEAK, why="a GPU failed")
    h.cycle(PEAK)
    assert h.state.running["chat"].placement.units == 4
    h.state.check_invariants()
