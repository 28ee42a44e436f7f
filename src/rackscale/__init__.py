"""rackscale: a topology-aware resource manager for rack-scale GPU clusters.

The pure core lives in :mod:`rackscale.model`, :mod:`rackscale.scheduler` and
:mod:`rackscale.network`; everything that reads files, clocks or the network sits at the edge.
"""

__version__ = "0.1.0"
