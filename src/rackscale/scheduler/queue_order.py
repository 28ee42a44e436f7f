"""Queue order plugins.

``priority-fairshare``: strict priority first; inside a priority level, the queue with the lowest
dominant share (max over GPU, CPU and memory of its share of the cluster, divided by its weight) goes
next, recomputed after every placement of the cycle; inside a queue, submit time (then name).
``priority-fifo``: priority, then submit time.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
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


def fair_share_merge(streams: Mapping[str, Iterable[JobSpec]], share: Callable[[str], float]) -> Iterator[JobSpec]:
    """Merge per-queue streams of jobs, each already in its own order: the queue with the lowest ``share``
    goes next (ties: the earlier head), and a queue's share is re-read after each of its jobs was handled
    (progressive: a job placed meanwhile moved it). Used by every order that is fair between queues."""
    if len(streams) == 1:  # no other queue to compete with: its own order is the order
        yield from next(iter(streams.values()))
        return
    iters: dict[str, Iterator[JobSpec]] = {}
    # (share, head's key, queue, head): queues are unique in the heap, so a JobSpec is never compared.
    heap: list[tuple[float, tuple[float, str], str, JobSpec]] = []
    for q, js in streams.items():
        it = iter(js)
        head = next(it, None)
        if head is not None:
            iters[q] = it
            heap.append((share(q), _job_key(head), q, head))
    heapq.heapify(heap)
    while heap:
        _, _, q, head = heapq.heappop(heap)
        yield head
        nxt = next(iters[q], None)
        if nxt is not None:
            heapq.heappush(heap, (share(q), _job_key(nxt), q, nxt))


class PriorityFairShare:
    name = "priority-fairshare"

    def __init__(self) -> None:
        self._cap: tuple[object, Capacity] | None = None

    def order(self, pending: PendingQueue, state: StateView, ctx: CycleContext) -> Iterator[JobSpec]:
        share = self.shares(state, ctx)
        for prio in pending.priorities():
            yield from fair_share_merge(pending.queues_at(prio), share)  # each in submit order: no sort

    def shares(self, state: StateView, ctx: CycleContext) -> Callable[[str], float]:
        """Each queue's weighted dominant share, read when asked (placements of the cycle move it)."""
        cap = self._capacity(state)
        return lambda q: self._share(state, ctx, q, cap)

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
