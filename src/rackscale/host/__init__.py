"""The host: a cluster's state, queue, network, KPIs and the application of decisions, clock-free.

The simulator (virtual clock) and the service's runner (wall clock) are this host driven by different
callers; see :mod:`rackscale.host.host` and docs/architecture.md.
"""
