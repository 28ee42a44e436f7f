"""Options shared by verbs: how to pick the cluster, and the scheduler profiles a ``--policy`` may name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rackscale.cli.output import fail
from rackscale.model.specs import MAX_NVL72_RACKS
from rackscale.model.topology import GPUCluster
from rackscale.scheduler import PROFILES

DEFAULT_RACKS = 4
RACKS_HELP = f"Racks of the default NVL72 cluster (default {DEFAULT_RACKS}; instead of --cluster)."
POLICY_HELP = f"Scheduler profile: {', '.join(PROFILES)} (see Profiles above)."

_F = TypeVar("_F", bound=Callable[..., object])


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
    if n > MAX_NVL72_RACKS:  # a cluster spec's bound: past it the cluster is never built
        fail(f"--racks must be at most {MAX_NVL72_RACKS:,} (got {n:,})")
    return GPUCluster.uniform(name=f"nvl72-x{n}", racks_per_region=n)


def check_policy(policy: str) -> None:
    """A one-line error for a ``--policy`` that names no profile."""
    if policy not in PROFILES:
        fail(f"unknown policy {policy!r}; choose one of: {', '.join(PROFILES)}")


def profile_lines() -> list[str]:
    """One line per scheduler profile, from the scheduler's registry: its name and what it stands for."""
    width = max(len(name) for name in PROFILES)
    return [f"{name:<{width}}  {p.summary}".rstrip() for name, p in PROFILES.items()]


def with_profiles(fn: _F) -> _F:
    """Replace a ``{profiles}`` line of ``fn``'s docstring (its ``--help``) with :func:`profile_lines`, each
    indented like the placeholder, so that a new profile shows up in every verb's help by itself."""
    out: list[str] = []
    for line in (fn.__doc__ or "").split("\n"):
        if line.strip() == "{profiles}":
            indent = line[: len(line) - len(line.lstrip())]
            out += [indent + entry for entry in profile_lines()]
        else:
            out.append(line)
    fn.__doc__ = "\n".join(out)
    return fn
