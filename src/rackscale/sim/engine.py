"""The event heap, after SimPy: one heap ordered by ``(time, priority, seq)``.

``seq`` is a counter, so events at the same time and priority pop in the order they were pushed and a
replay with the same inputs is byte-identical. Real time (the service) will subclass and override only
:meth:`EventQueue.step`'s wait.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import IntEnum


class EventKind(IntEnum):
    """Lower value pops first at equal time: finishes free GPUs before arrivals look for them."""

    FINISH = 0
    ARRIVAL = 1


@dataclass(order=True, slots=True)
class Event:
    time: float
    priority: int
    seq: int
    kind: EventKind = field(compare=False)
    job: str = field(compare=False)
    generation: int = field(compare=False, default=0)  # a restarted job's old FINISH is stale


class EventQueue:
    def __init__(self) -> None:
        self._heap: list[Event] = []
        self._seq = 0
        self.now = 0.0

    def push(self, time: float, kind: EventKind, job: str, generation: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, Event(time, int(kind), self._seq, kind, job, generation))

    def pop_batch(self) -> list[Event]:
        """All events at the next instant (the scheduler runs once per instant, not per event)."""
        first = heapq.heappop(self._heap)
        self.now = first.time
        batch = [first]
        while self._heap and self._heap[0].time == first.time:
            batch.append(heapq.heappop(self._heap))
        return batch

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __len__(self) -> int:
        return len(self._heap)
