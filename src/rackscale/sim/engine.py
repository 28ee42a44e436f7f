"""The event heap, after SimPy: one heap ordered by ``(time, priority, seq)``.

``seq`` is a counter, so events at the same time and priority pop in the order they were pushed and a
replay with the same inputs is byte-identical. The live service will drive the same scheduler from the
wall clock by overriding only how the next instant is reached.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from enum import IntEnum


class EventKind(IntEnum):
    """The value is the priority at equal time: finishes and repairs free capacity before failures take
    it and arrivals look for it; the periodic ticks see the instant's outcome."""

    FINISH = 0
    REPAIR = 1
    FAILURE = 2
    ARRIVAL = 3
    AUTOSCALE = 4
    SAMPLE = 5
    MAINTENANCE = 6  # a planned drain starts, its grace ends, or it ends (rackscale.sim.maintenance)
    SCHEDULE = 7  # a ScalingSchedule's steps are due (rackscale.sim.schedules)


@dataclass(slots=True)
class Event:
    time: float
    priority: int
    seq: int
    kind: EventKind
    job: str = ""
    generation: int = 0  # a restarted job's old FINISH is stale
    target: tuple[str, int, int] | None = None  # (part, index, gpu) for faults


class EventQueue:
    def __init__(self) -> None:
        # Entries are plain tuples, (time, priority, seq, event): tuple comparison runs in C.
        self._heap: list[tuple[float, int, int, Event]] = []
        self._seq = 0
        self.now = 0.0

    def push(
        self,
        time: float,
        kind: EventKind,
        job: str = "",
        generation: int = 0,
        target: tuple[str, int, int] | None = None,
    ) -> None:
        self._seq += 1
        prio = int(kind)
        heapq.heappush(self._heap, (time, prio, self._seq, Event(time, prio, self._seq, kind, job, generation, target)))

    def pop_batch(self) -> list[Event]:
        """All events at the next instant (the scheduler runs once per instant, not once per event)."""
        first = heapq.heappop(self._heap)[3]
        self.now = first.time
        batch = [first]
        while self._heap and self._heap[0][0] == first.time:
            batch.append(heapq.heappop(self._heap)[3])
        return batch

    def peek_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __len__(self) -> int:
        return len(self._heap)
