"""Queue order plugins.

``priority-fairshare``: strict priority first; inside a priority level, the queue with the lowest
dominant share (max over GPU, CPU and memory of its share of the cluster, divided by its weight) goes
next, recomputed after every placement of the cycle; inside a queue, submit time (then name).
``priority-fifo``: priority, then submit time.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from itertools import groupby

from rackscale.model.state import ClusterState
from rackscale.model.topology import MILLI_PER_GPU
from rackscale.model.workload import JobSpec
from rackscale.scheduler.framework import QUEUE_SORTS, CycleContext


def dominant_share(state: ClusterState, queue: str, weight: float) -> float:
    u = state.queue_usage.get(queue)
    if u is None:
        return 0.0
    c = state.cluster
    cap_gpu = max(c.total_gpus * MILLI_PER_GPU, 1)
    cap_cpu = max(sum(n.cpu_milli for n in c.nodes), 1)
    cap_mem = max(sum(n.memory_mib for n in c.nodes), 1)
    return max(u.gpu_milli / cap_gpu, u.cpu_milli / cap_cpu, u.memory_mib / cap_mem) / max(weight, 1e-9)


def _job_key(j: JobSpec) -> tuple[float, str]:
    return (j.submit_time, j.name)


class PriorityFairShare:
    name = "priority-fairshare"

    def order(self, pending: Sequence[JobSpec], state: ClusterState, ctx: CycleContext) -> Iterator[JobSpec]:
        jobs = sorted(pending, key=lambda j: (-j.priority, j.queue, j.submit_time, j.name))
        for _prio, level_iter in groupby(jobs, key=lambda j: j.priority):
            by_queue = {q: list(js) for q, js in groupby(level_iter, key=lambda j: j.queue)}
            heads = {q: 0 for q in by_queue}
            heap = [(self._share(state, ctx, q), _job_key(js[0]), q) for q, js in by_queue.items()]
            heapq.heapify(heap)
            while heap:
                _, _, q = heapq.heappop(heap)
                js = by_queue[q]
                yield js[heads[q]]
                heads[q] += 1
                if heads[q] < len(js):
                    # The share moved if the job was placed: re-read it before the queue competes again.
                    heapq.heappush(heap, (self._share(state, ctx, q), _job_key(js[heads[q]]), q))

    @staticmethod
    def _share(state: ClusterState, ctx: CycleContext, queue: str) -> float:
        cfg = ctx.queues.get(queue)
        return dominant_share(state, queue, cfg.weight if cfg else 1.0)


class PriorityFifo:
    name = "priority-fifo"

    def order(self, pending: Sequence[JobSpec], state: ClusterState, ctx: CycleContext) -> Iterator[JobSpec]:
        yield from sorted(pending, key=lambda j: (-j.priority, j.submit_time, j.name))


QUEUE_SORTS[PriorityFairShare.name] = PriorityFairShare
QUEUE_SORTS[PriorityFifo.name] = PriorityFifo
