"""The pods a failed gang attempt bound, until the API server and the watch both show them gone.

Two states, one record per pod (key and UID, so that a pod recreated under the same name is a new pod):

- **stuck**: its deletion failed. The loop retries it every cycle, and holds its gang meanwhile: the
  gang's other pods must not be placed on their own while a sibling still sits bound in some rack.
- **releasing**: deleted. Until the watch shows it gone it still holds its node (a kubelet may have started
  it), so the snapshot counts it there, for at most ``ttl_s``; it is a member of no gang.

Nothing here counts as bound: a gang's bind counts only when every pod of it is bound (``Stats.binds``, the
scheduler's ``assumed``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rackscale.kube.binding import Assignment

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Undone:
    job: str
    assignment: Assignment
    since: float


def _uid(pod: Obj | None) -> str:
    return str(((pod or {}).get("metadata") or {}).get("uid") or "")


class UndoBook:
    def __init__(self, *, ttl_s: float, clock: Callable[[], float]) -> None:
        self.ttl_s, self.clock = ttl_s, clock
        self._stuck: dict[str, Undone] = {}
        self._releasing: dict[str, Undone] = {}

    def add(self, job: str, *, released: Iterable[Assignment], stuck: Iterable[Assignment]) -> None:
        now = self.clock()
        for a in released:
            self._releasing[a.key] = Undone(job=job, assignment=a, since=now)
        for a in stuck:
            self._stuck[a.key] = Undone(job=job, assignment=a, since=now)

    def stuck(self) -> list[Assignment]:
        return [u.assignment for u in self._stuck.values()]

    def released(self, a: Assignment) -> None:
        """A stuck pod's deletion went through at last."""
        u = self._stuck.pop(a.key, None)
        if u is not None:
            self._releasing[a.key] = Undone(job=u.job, assignment=a, since=self.clock())

    def held(self) -> dict[str, str]:
        """Gangs not to place now, with the reason their pods are told."""
        left: dict[str, list[str]] = {}
        for key, u in self._stuck.items():
            left.setdefault(u.job, []).append(key)
        return {
            job: f"gang {job}: rackscale is still deleting {', '.join(sorted(keys))}, bound by a failed attempt "
            "to bind this gang; the gang is placed again once they are gone"
            for job, keys in left.items()
        }

    def _record(self, key: str, pod: Obj | None) -> Undone | None:
        u = self._stuck.get(key) or self._releasing.get(key)
        if u is None or (pod is not None and _uid(pod) != u.assignment.uid):
            return None
        return u

    def undoing(self, key: str, pod: Obj) -> bool:
        """Is ``pod`` (this UID) one we are deleting or have deleted?"""
        return self._record(key, pod) is not None

    def node_of(self, key: str, pod: Obj) -> str | None:
        """The node such a pod still holds while the watch lags behind."""
        u = self._record(key, pod)
        return None if u is None else u.assignment.node

    def expire(self) -> None:
        """Forget deleted pods the watch has not shown gone after ``ttl_s`` (a missed event, say). Stuck ones
        stay: forgetting them would let their gang's other pods be placed apart from them."""
        now = self.clock()
        for key, u in list(self._releasing.items()):
            if now - u.since >= self.ttl_s:
                del self._releasing[key]

    def confirm(self, key: str, pod: Obj | None) -> None:
        """The watch shows ``key`` gone or replaced: that record is done."""
        for book in (self._stuck, self._releasing):
            u = book.get(key)
            if u is not None and (pod is None or _uid(pod) != u.assignment.uid):
                del book[key]

    def confirm_all(self, pods: Mapping[str, Obj]) -> None:
        for key in [*self._stuck, *self._releasing]:
            self.confirm(key, pods.get(key))

    def keys(self) -> set[str]:
        return {*self._stuck, *self._releasing}
