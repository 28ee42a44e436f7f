"""Disruption budgets: how many units of some running jobs may be stopped now, as the caller knows it.

A budget allows a number of disruptions, and a running job's units may count against budgets (the caller says
which: e.g. the Kubernetes adapter reads its cluster's disruption budgets into them, docs/kubernetes.md). The
scheduler never refuses a stop for a budget's sake; it prefers stops within them:

- ``cheapest-victims`` (and ``las-victims``, which extends it) takes, rack by rack, victims that keep within
  the budgets first, and those that would go past one only when no others free the room; it gives back the
  latter first; and it ranks the racks by the fewest disruptions past a budget first. This is the rule of
  kube-scheduler's DefaultPreemption (per node there), done for gangs;
- consolidation moves a job only within the budgets (a move is an optimisation: the gang may wait instead).

A cycle spends the budgets as it decides its stops (:class:`BudgetLedger`), so two preemptions of one cycle
do not both count on the same allowance. With no budgets given (the simulator, ``rackscale serve``), nothing
here is consulted and every decision is what it was without them. Loans' reclaims and elastic shrinks do not
read them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

NO_UNITS: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class DisruptionBudgets:
    """What the caller knows of the budgets at the cycle's start.

    ``allowed``: per budget, the disruptions it allows now (a value below 0 allows none). ``units``: per
    running job, the budgets its units count against and how many of its units each (a job in no budget may
    be left out; a budget missing from ``allowed`` does not bind). Either may be computed lazily: a cycle
    reads them only when it looks for victims or movers, and only for the jobs it looks at."""

    allowed: Mapping[str, int]
    units: Mapping[str, Mapping[str, int]]


class BudgetLedger:
    """One cycle's account of the budgets: what its stops decided so far have spent of each."""

    __slots__ = ("budgets", "spent")

    def __init__(self, budgets: DisruptionBudgets) -> None:
        self.budgets = budgets
        self.spent: dict[str, int] = {}

    def counts(self, job: str) -> Mapping[str, int]:
        """The budgets ``job``'s units count against, and how many of them each."""
        return self.budgets.units.get(job, NO_UNITS)

    def _cap(self, budget: str) -> int | None:
        allowed = self.budgets.allowed.get(budget)
        return None if allowed is None else max(allowed, 0)

    def within(self, job: str, taken: Mapping[str, int]) -> bool:
        """Would stopping ``job`` too keep every budget within what it allows, on top of the cycle's stops and
        of ``taken`` (a candidate set's units per budget, see :meth:`take`)?"""
        for b, n in self.counts(job).items():
            cap = self._cap(b)
            if cap is not None and self.spent.get(b, 0) + taken.get(b, 0) + n > cap:
                return False
        return True

    def take(self, job: str, taken: dict[str, int]) -> None:
        """Add ``job``'s units to a candidate set's ``taken``."""
        for b, n in self.counts(job).items():
            taken[b] = taken.get(b, 0) + n

    def past(self, jobs: Iterable[str]) -> int:
        """How many disruptions past their budgets stopping ``jobs`` would add to the cycle's stops (a unit in
        two exhausted budgets counts twice)."""
        taken: dict[str, int] = {}
        for j in jobs:
            self.take(j, taken)
        out = 0
        for b, n in taken.items():
            cap = self._cap(b)
            if cap is not None:
                spent = self.spent.get(b, 0)
                out += max(0, spent + n - cap) - max(0, spent - cap)
        return out

    def spend(self, jobs: Iterable[str]) -> list[int]:
        """Record the stops of ``jobs``, in order; returns the disruptions past a budget that each adds."""
        out = []
        for j in jobs:
            over = self.past((j,))
            for b, n in self.counts(j).items():
                self.spent[b] = self.spent.get(b, 0) + n
            out.append(over)
        return out


__all__ = ["BudgetLedger", "DisruptionBudgets"]
