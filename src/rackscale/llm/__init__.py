"""A performance model of LLM work on a topology: training and serving on NVLink domains.

Pure (no I/O, no clock): model descriptions, a hardware catalogue, parallel plans that fit HBM, and the
time of a training step or a decode step on a placement, tier by tier. The simulator, ``rackscale perf``,
``compare-arch`` and the scheduler all read speed from here. See ``docs/perf.md``.
"""
