"""Inference serving: the daily demand curve, replica capacity, queueing latency and autoscaling."""

from __future__ import annotations

import math

from rackscale.model.workload import ServingProfile

DAY_S = 86_400.0


def daily_wave(peak_hour: float, t: float) -> float:
    """The demand curve's shape at time ``t``: 1 at ``peak_hour``, 0 twelve hours off."""
    hour = (t % DAY_S) / 3600.0
    return (1.0 + math.cos(2.0 * math.pi * (hour - peak_hour) / 24.0)) / 2.0


def demand_tokens_per_s(profile: ServingProfile, t: float) -> float:
    """Requested tokens per second at time ``t`` (seconds from the start of day 0). (``serve_table``
    computes the same with the wave per distinct peak hour: keep the two expressions alike.)"""
    wave = daily_wave(profile.peak_hour, t)
    return profile.peak_tokens_per_s * (profile.trough_fraction + (1.0 - profile.trough_fraction) * wave)


def p99_latency_s(*, demand_tps: float, capacity_tps: float, replicas: int, tokens_per_request: float) -> float:
    """p99 response time of a request, each replica an M/M/1 queue with an equal share of the load.

    M/M/1 sojourn time is exponential with rate ``mu - lambda``, so its p99 is ``ln(100) / (mu - lambda)``.
    An overloaded service (``lambda >= mu``) has no steady state: infinite.
    """
    if replicas <= 0 or capacity_tps <= 0:
        return math.inf
    mu = capacity_tps / replicas / tokens_per_request  # requests per second per replica
    lam = demand_tps / replicas / tokens_per_request
    if lam >= mu:
        return math.inf
    return math.log(100.0) / (mu - lam)


def desired_replicas(*, demand_tps: float, replica_tps: float, target: float, lo: int, hi: int) -> int:
    """Replicas that keep utilisation at ``target``, within ``[lo, hi]``."""
    if replica_tps <= 0:
        return hi
    want = math.ceil(demand_tps / (replica_tps * max(target, 1e-6)))
    return max(lo, min(hi, want))
