"""The garbage collector's settings for a batch simulation (``simulate``, ``bench simulate``, a sweep cell).

A simulation builds its workload first (a million ``JobSpec`` for ``--scenario million``) and then allocates
small objects by the million as it runs. CPython's defaults collect the young generation every 700 net
allocations and the whole heap each time it has grown by a quarter, so a run pays for traversing the
workload's specs again and again, though they live to the end. For the run, :func:`batch_gc` freezes what
exists before it (the cluster, the workload) out of collections and collects the young generation every
50,000 allocations, as ``rackscale serve`` does (``service.app.tune_process``); on exit the settings are
restored and the frozen objects return to the oldest generation.

Measured on the million and on its shape at 100,000 jobs (docs/benchmarks.md, "The simulator at cluster
scale"). The collector frees only unreachable objects, so the results should not depend on when it runs;
they were identical, KPI for KPI, in every run measured, and ``tests/sim/test_gc_policy.py`` keeps one such
comparison.

It changes process-wide state, so it is for the verbs that run simulations, not for ``Simulator.run``
itself (a library call inside someone else's process).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_EVERY = 50_000  # allocations between young collections (CPython's default: 700)


@contextmanager
def batch_gc() -> Iterator[None]:
    """Freeze what exists now and collect young objects every :data:`YOUNG_EVERY` allocations, until exit."""
    threshold = gc.get_threshold()
    # (No collection first: it would cost a pass over the whole heap per call, e.g. per test. Garbage frozen
    # with the rest waits for the first full collection after the run.)
    gc.freeze()
    gc.set_threshold(YOUNG_EVERY, threshold[1], threshold[2])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
