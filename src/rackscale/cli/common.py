"""Options shared by verbs: how to pick the cluster."""

from __future__ import annotations

from pathlib import Path

from rackscale.cli.output import fail
from rackscale.model.topology import GPUCluster

DEFAULT_RACKS = 4


def resolve_cluster(cluster_file: Path | None, racks: int | None) -> GPUCluster:
    """``--cluster FILE`` wins; else the default NVL72 cluster with ``--racks`` racks (4 by default)."""
    if cluster_file is not None and racks is not None:
        fail("give either --cluster or --racks, not both")
    if cluster_file is not None:
        from rackscale.loaders import load_cluster
        from rackscale.model.specs import SpecError

        try:
            return load_cluster(cluster_file)
        except SpecError as err:
            fail(str(err))
    n = DEFAULT_RACKS if racks is None else racks
    if n < 1:
        fail(f"--racks must be at least 1 (got {n})")
    return GPUCluster.uniform(name=f"nvl72-x{n}", racks_per_region=n)
