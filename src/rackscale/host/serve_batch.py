"""Instants whose serving accounting is still owed: a run of them over one table is added in one pass.

The simulator accounts every instant, and the running services change only about every tenth one at the
million's scale; numpy's fixed cost per call, not the arithmetic, was most of the per-instant accounting.
So a batching host (``HostOptions.batch_serving``) notes each instant's interval here, with the table of
the services then running, and adds them all when the batch is full or when the KPIs are about to be read
(``flush``): the sums are then exactly what the instants added one by one give (``serve_pass.serve_runs``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rackscale.host.kpis import KpiAccumulator
from rackscale.host.serve_pass import serve_runs
from rackscale.host.serve_table import ServeTable

# (instant, service) pairs per pass, about: some 40 arrays of this length are made per pass, and past a
# few thousand they leave the CPU's caches (at 16,384 a pass cost 4x more per pair than at 4,096).
BATCH_LIMIT = 4_096


@dataclass(slots=True)
class ServeBatch:
    """The instants owed: runs of them over one table each, in time order."""

    limit: int = BATCH_LIMIT
    runs: list[tuple[ServeTable, list[float], list[float]]] = field(default_factory=list)
    owed: int = 0  # instants

    def add(self, table: ServeTable, kpi: KpiAccumulator, dt: float, t_mid: float) -> None:
        """One more interval, over ``table`` (a new run when the services changed)."""
        runs = self.runs
        if runs and runs[-1][0] is table:
            _, dts, mids = runs[-1]
            dts.append(dt)
            mids.append(t_mid)
        else:
            runs.append((table, [dt], [t_mid]))
        self.owed += len(table.names)
        if self.owed >= self.limit:
            self.flush(kpi)

    def flush(self, kpi: KpiAccumulator) -> None:
        """Add every owed interval to ``kpi`` now."""
        if self.runs:
            serve_runs(self.runs, kpi)
            self.runs.clear()
        self.owed = 0


__all__ = ["BATCH_LIMIT", "ServeBatch"]
