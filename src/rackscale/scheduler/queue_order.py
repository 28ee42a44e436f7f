"""Queue order plugins.

``priority-fairshare``: strict priority first; inside a priority level, the queue with the lowest
dominant share (max over GPU, CPU and memory of its share of the cluster, divided by its weight) goes
next, recomputed after every placement of the cycle; inside a queue, submit time (then name).
``priority-fifo``: priority, then submit time.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

from rackscale.model.topology import MILLI_PER_GPU
from rackscale.model.view import StateView
from rackscale.model.workload import JobSpec
from rackscale.scheduler.framework import QUEUE_SORTS, CycleContext
from rackscale.scheduler.pending import PendingQueue


@dataclass(frozen=True, slots=True)
class Capacity:
    """Cluster totals a dominant share divides by (computed once per cycle, not per comparison)."""

    gpu_milli: int
    cpu_milli: int
    memory_mib: int

    @classmethod
    def of(cls, state: StateView) -> Capacity:
        c = state.cluster
        return cls(
            gpu_milli=max(c.total_gpus * MILLI_PER_GPU, 1),
            cpu_milli=max(sum(n.cpu_milli for n in c.nodes), 1),
            memory_mib=max(sum(n.memory_mib for n in c.nodes), 1),
        )


def dominant_share(state: StateView, queue: str, weight: float, cap: Capacity) -> float:
    """max(GPU, CPU, memory share of the cluster held by ``queue``) / ``weight`` (DRF)."""
    u = state.queue_usage.get(queue)
    if u is None:
        return 0.0
    share = max(u.gpu_milli / cap.gpu_milli, u.cpu_milli / cap.cpu_milli, u.memory_mib / cap.memory_mib)
    return share / max(weight, 1e-9)


def _job_key(j: JobSpec) -> tuple[float, str]:
    return (j.submit_time, j.name)


class PriorityFairShare:
    name = "priority-fairshare"

    def __init__(self) -> None:
        self._cap: tuple[object, Capacity] | None = None

    def order(self, pending: PendingQueue, state: StateView, ctx: CycleContext) -> Iterator[JobSpec]:
        cap = self._capacity(state)
        for prio in pending.priorities():
            by_queue = pending.queues_at(prio)  # each already in submit order: no sort per cycle
            if len(by_queue) == 1:  # no other queue to compete with: its submit order is the order
                yield from next(iter(by_queue.values()))
                continue
            heads = dict.fromkeys(by_queue, 0)
            heap = [(self._share(state, ctx, q, cap), _job_key(js[0]), q) for q, js in by_queue.items()]
            heapq.heapify(heap)
            while heap:
                _, _, q = heapq.heappop(heap)
                js = by_queue[q]
                yield js[heads[q]]
                heads[q] += 1
                if heads[q] < len(js):
                    # The share moved if the job was placed: re-read it before the queue competes again.
                    heapq.heappush(heap, (self._share(state, ctx, q, cap), _job_key(js[heads[q]]), q))

    def _capacity(self, state: StateView) -> Capacity:
        if self._cap is None or self._cap[0] is not state.cluster:
            self._cap = (state.cluster, Capacity.of(state))
        return self._cap[1]

    @staticmethod
    def _share(state: StateView, ctx: CycleContext, queue: str, cap: Capacity) -> float:
        cfg = ctx.queues.get(queue)
        return dominant_share(state, queue, cfg.weight if cfg else 1.0, cap)


class PriorityFifo:
    name = "priority-fifo"

    def order(self, pending: PendingQueue, state: StateView, ctx: CycleContext) -> Iterator[JobSpec]:
        for prio in pending.priorities():
            merged = [j for js in pending.queues_at(prio).values() for j in js]
            yield from sorted(merged, key=lambda j: (j.submit_time, j.name))


QUEUE_SORTS[PriorityFairShare.name] = PriorityFairShare
QUEUE_SORTS[PriorityFifo.name] = PriorityFifo
