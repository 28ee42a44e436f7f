"""Bucket indexes: integer ids (racks, nodes) grouped by a count (their free whole GPUs).

Moving an id between buckets is O(1), and a query "ids with at least ``k``" walks buckets, never ids it
does not return: what lets a placement avoid scanning every node of a large cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(slots=True)
class BucketIndex:
    """Buckets of integer ids by a count: ``buckets[c]`` is the set of ids whose count is ``c``."""

    buckets: list[set[int]] = field(default_factory=list)

    @classmethod
    def sized(cls, top: int) -> BucketIndex:
        return cls([set() for _ in range(top + 1)])

    def move(self, item: int, old: int | None, new: int | None) -> None:
        if old is not None:
            self.buckets[old].discard(item)
        if new is not None:
            self.buckets[new].add(item)

    def ascending(self, at_least: int) -> Iterator[int]:
        for c in range(max(at_least, 0), len(self.buckets)):
            yield from self.buckets[c]

    def descending(self, at_least: int) -> Iterator[int]:
        for c in range(len(self.buckets) - 1, max(at_least, 0) - 1, -1):
            yield from self.buckets[c]

    def count_at_least(self, at_least: int) -> int:
        return sum(len(self.buckets[c]) for c in range(max(at_least, 0), len(self.buckets)))
