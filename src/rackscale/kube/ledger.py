"""What the scheduler records of a gang's bind: everything when the whole gang is bound, nothing otherwise.

:mod:`rackscale.kube.binding` talks to the API server; this keeps the books. A committed gang's pods are
"assumed" bound (until the watch shows it), counted in ``Stats.binds`` and told ``Scheduled``. A failed
attempt leaves no trace in either: its pods are told why (a Warning event each), the pods it bound go to the
:class:`~rackscale.kube.undo.UndoBook`, and the gang is placed again, whole, on a later cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rackscale.kube.binding import Assignment, BindOutcome, FailureKind, GangBinder, assignments
from rackscale.kube.config import Stats
from rackscale.kube.pods import Gang, pod_key
from rackscale.kube.report import EventReason, EventType, Reporter
from rackscale.kube.snapshot import cluster_index
from rackscale.kube.undo import UndoBook
from rackscale.model.placement import Placement
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobSpec

log = logging.getLogger("rackscale.kube")


class Ledger:
    def __init__(
        self,
        *,
        binder: GangBinder,
        reporter: Reporter,
        stats: Stats,
        undo: UndoBook,
        assumed: dict[str, tuple[str, float]],  # the scheduler's: pod key -> (node, when bound)
        clock: Callable[[], float],
    ) -> None:
        self.binder, self.reporter, self.stats = binder, reporter, stats
        self.undo, self.assumed, self.clock = undo, assumed, clock

    def bind_gang(self, cluster: GPUCluster, g: Gang, spec: JobSpec, placement: Placement) -> int:
        """Bind ``g`` where ``placement`` says, all or none. Returns the number of pods bound."""
        try:
            gang = assignments(cluster, spec, placement, g.pending)
        except ValueError as e:
            log.error("%s; not binding", e)
            return 0
        out = self.binder.transact(gang)
        if out.failure is None:
            return self._commit(cluster, out.bound)
        self._rolled_back(g, out)
        return 0

    def retry_undo(self) -> None:
        """Delete again the pods whose undo failed before."""
        for a in self.undo.stuck():
            if self.binder.delete(a):
                self.stats.undone += 1
                self.undo.released(a)
            else:
                self.stats.undo_errors += 1

    def _commit(self, cluster: GPUCluster, bound: tuple[Assignment, ...]) -> int:
        now = self.clock()
        for a in bound:
            self.assumed[a.key] = (a.node, now)
            self.reporter.forget(a.pod)
        self.stats.binds += len(bound)
        for a in bound:
            rack = cluster.racks[cluster.nodes[cluster_index(cluster, a.node)].rack].name
            msg = f"Successfully assigned {a.key} to {a.node} (rack {rack})"
            self.reporter.event(a.pod, EventType.NORMAL, EventReason.SCHEDULED, msg)
        return len(bound)

    def _rolled_back(self, g: Gang, out: BindOutcome) -> None:
        e = out.failure
        assert e is not None
        if e.kind is FailureKind.STALE:  # validation: nothing was bound, the cache was behind
            self.stats.bind_aborts += 1
            log.info("gang %s not bound: %s (the watch will show why; placing it again)", g.job, e)
            return
        self.stats.bind_errors += 1
        touched = (*out.undone, *out.stuck)
        if touched:
            self.stats.gang_rollbacks += 1
        self.stats.undone += len(out.undone)
        self.stats.undo_errors += len(out.stuck)
        self.undo.add(g.job, released=out.undone, stuck=out.stuck)
        why = f"gang {g.job}: {e}"
        log.warning(
            "%s; %d bind(s) of this attempt undone, %d deletion(s) to retry", why, len(out.undone), len(out.stuck)
        )
        for a in touched:
            left = "is deleted" if a in out.undone else "is being deleted (the first try failed; rackscale retries)"
            self.reporter.failed(
                a.pod,
                f"{why}. This pod was bound to {a.node} by the same attempt and {left} so that the gang is "
                "placed whole; its controller recreates it",
                reason=EventReason.GANG_BIND_UNDONE,
                condition=False,  # it is bound (or gone): PodScheduled=False would be untrue
            )
        keys = {a.key for a in touched}
        after = (
            f"the {len(keys)} pod(s) this attempt bound are deleted, and the gang is placed again, whole"
            if keys
            else "no pod of it was bound; the gang is placed again, whole"
        )
        for pod in g.pending:
            if pod_key(pod) in keys:
                continue
            # The pod whose bind failed may now be bound by someone else, or gone: its condition is not ours.
            mine = pod_key(pod) != e.pod or e.kind is FailureKind.ERROR
            self.reporter.failed(pod, f"{why}; {after}", reason=EventReason.FAILED_SCHEDULING, condition=mine)
