"""Whole-state comparisons and invariant checks of a :class:`ClusterState`, for tests (O(cluster) each).

Kept apart from the state itself: nothing on the scheduling path calls them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rackscale.model.topology import MILLI_PER_GPU

if TYPE_CHECKING:
    from rackscale.model.state import ClusterState


def snapshot(state: ClusterState) -> dict[str, object]:
    """Every field and index as plain values, for comparing a state with itself later (tests: a cycle or
    a rolled-back transaction must leave it exactly as it was). A drained queue's all-zero usage counts as
    absent, as ``release`` leaves it. ``node_version`` is left out: it counts changes, and a rollback is
    one more change."""
    return {
        "gpu_free": [list(f) for f in state.gpu_free],
        "gpu_failed": [sorted(f) for f in state.gpu_failed],
        "node_down": list(state.node_down),
        "node_failed": list(state.node_failed),
        "node_cordoned": list(state.node_cordoned),
        "cordoned_idle": list(state.cordoned_idle),
        "cordoned_idle_count": state.cordoned_idle_count,
        "cpu_free": list(state.cpu_free),
        "mem_free": list(state.mem_free),
        "node_whole": list(state.node_whole),
        "node_shared": list(state.node_shared),
        "rack_whole": list(state.rack_whole),
        "model_free_whole": dict(state.model_free_whole),
        "free_whole_total": state.free_whole_total,
        "used_milli": state.used_milli,
        "failed_gpus_count": state.failed_gpus_count,
        "rack_index": {k: [sorted(b) for b in ix.buckets] for k, ix in state.rack_index.items()},
        "rack_index_all": {k: [sorted(b) for b in ix.buckets] for k, ix in state.rack_index_all.items()},
        "node_index": {k: [sorted(b) for b in ix.buckets] for k, ix in state.node_index.items()},
        "rack_node_index": [[sorted(b) for b in ix.buckets] for ix in state.rack_node_index],
        "shared_nodes": {k: sorted(v) for k, v in state.shared_nodes.items()},
        "running": {
            k: (rj.spec, rj.placement, rj.started_at, rj.expected_end, rj.checkpointed_at, rj.racks)
            for k, rj in state.running.items()
        },
        "ends": list(state.ends_in_order()),
        "preemptible_priorities": {p: c for p, c in state.preemptible_priorities.items() if c},
        "rack_jobs": [sorted(s) for s in state.rack_jobs],
        "opportunistic": sorted(state.opportunistic),
        "elastic": sorted(state.elastic),
        "node_jobs": [sorted(s) for s in state.node_jobs],
        "queue_usage": {
            q: (u.gpu_milli, u.cpu_milli, u.memory_mib, u.jobs)
            for q, u in state.queue_usage.items()
            if (u.gpu_milli, u.cpu_milli, u.memory_mib, u.jobs) != (0, 0, 0, 0)
        },
    }


def check_invariants(state: ClusterState) -> None:
    """Recompute every index from scratch and compare."""
    c = state.cluster
    for n, node in enumerate(c.nodes):
        held = [0] * node.gpus
        cpu = mem = 0
        for j in state.node_jobs[n]:
            for a in state.running[j].placement.allocs:
                if a.node == n:
                    for g in a.gpus:
                        held[g] += a.milli
                    cpu += a.cpu_milli
                    mem += a.memory_mib
        for g in range(node.gpus):
            assert 0 <= held[g] <= MILLI_PER_GPU, f"GPU {g} of node {node.name} oversubscribed"
            assert state.gpu_free[n][g] == MILLI_PER_GPU - held[g], "gpu_free out of sync"
        assert state.cpu_free[n] == node.cpu_milli - cpu >= 0, "cpu_free out of sync"
        assert state.mem_free[n] == node.memory_mib - mem >= 0, "mem_free out of sync"
        assert state.node_down[n] == (state.node_failed[n] or state.node_cordoned[n]), f"node_down of {node.name}"
        healthy_free = sum(1 for g in range(node.gpus) if held[g] == 0 and g not in state.gpu_failed[n])
        whole = 0 if state.node_down[n] else healthy_free
        idle = healthy_free if state.node_cordoned[n] and not state.node_failed[n] else 0
        assert state.cordoned_idle[n] == idle, f"cordoned_idle out of sync on {node.name}"
        assert state.node_whole[n] == whole, f"node_whole out of sync on {node.name}"
        assert n in state.node_index[node.gpu_model].buckets[whole]
        assert n in state.rack_node_index[node.rack].buckets[whole]
    for r, rack in enumerate(c.racks):
        whole = sum(state.node_whole[n] for n in rack.nodes)
        assert state.rack_whole[r] == whole, f"rack_whole out of sync on {rack.name}"
        assert r in state.rack_index[(rack.gpu_model, rack.region)].buckets[whole]
        assert r in state.rack_index_all[rack.gpu_model].buckets[whole]
    by_model: dict[str, int] = dict.fromkeys(state.model_free_whole, 0)
    for n, node in enumerate(c.nodes):
        by_model[node.gpu_model] += state.node_whole[n]
    assert state.model_free_whole == by_model, "model_free_whole out of sync"
    assert state.free_whole_total == sum(by_model.values()), "free_whole_total out of sync"
    assert state.failed_gpus_count == state.failed_gpus, "failed_gpus_count out of sync"
    assert state.cordoned_idle_count == sum(state.cordoned_idle), "cordoned_idle_count out of sync"
    loaned = {name for name, rj in state.running.items() if rj.placement.opportunistic}
    assert state.opportunistic == loaned, "opportunistic out of sync"
    elastic = {name for name, rj in state.running.items() if rj.spec.is_elastic and rj.spec.preemptible}
    assert state.elastic == elastic, "elastic out of sync"
