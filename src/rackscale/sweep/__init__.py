"""``rackscale sweep``: what-if grids over the options of ``rackscale simulate``, on a process pool or on Ray.

- :mod:`.spec`: the ``Sweep`` document (base options, a cartesian ``grid``, explicit ``cells``, ``compare``).
- :mod:`.cells`: a cell's options -> its key (resumability) and its run (the KPIs ``simulate --json`` prints).
- :mod:`.runner`: the local process pool and the Ray runner; results are appended as each cell finishes.
- :mod:`.results`: the JSONL table (the source of truth), CSV/Parquet exports, seeds' means and 95 % CIs.
- :mod:`.report`: the self-contained HTML report.

docs/sweep.md describes the document, the statistics and Ray.
"""

from __future__ import annotations

from rackscale.sweep.spec import SweepError, SweepSpec, load_sweep, parse_sweep

__all__ = ["SweepError", "SweepSpec", "load_sweep", "parse_sweep"]
