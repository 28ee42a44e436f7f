"""The NetworkMonitor: traffic per tier for each placement, fabric link load, and low-latency path choice.

Pure: no I/O, no clock. It builds on :mod:`rackscale.model` only. The model and its formulas are in
``docs/network.md``.
"""

from rackscale.network.links import (
    Link,
    LinkKind,
    LinkLoad,
    link_capacity_gbps,
    rack_uplink_capacity_gbps,
)
from rackscale.network.monitor import NetworkMonitor, Route, TrafficTotals, UplinkLoad
from rackscale.network.paths import (
    QUEUE_CAP,
    Path,
    PathChoice,
    get_low_latency_paths,
    hop_latency_us,
    p99_latency_s,
    select_best_path,
    tier_p99_latency_s,
)
from rackscale.network.traffic import COLLECTIVES, Flow, Tier, Traffic, traffic_for

__all__ = [
    "COLLECTIVES",
    "QUEUE_CAP",
    "Flow",
    "Link",
    "LinkKind",
    "LinkLoad",
    "NetworkMonitor",
    "Path",
    "PathChoice",
    "Route",
    "Tier",
    "Traffic",
    "TrafficTotals",
    "UplinkLoad",
    "get_low_latency_paths",
    "hop_latency_us",
    "link_capacity_gbps",
    "p99_latency_s",
    "rack_uplink_capacity_gbps",
    "select_best_path",
    "tier_p99_latency_s",
    "traffic_for",
]
