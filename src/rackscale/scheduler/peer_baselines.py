"""Registers the peer schedulers' placers and profiles: ``kueue-tas``, ``slurm-block``, ``kai`` and ``volcano``.

They live here, not at the bottom of their modules, because a placement module that imported the
framework (for ``PLACERS`` and ``Profile``) would close an import cycle ``placement -> framework ->
placement.request``, which the ``acyclic_siblings`` import contract forbids.

All ignore the split advisor (as ``slurm-tree`` does: their originals have no such wait), so the
profiles split eagerly and spare the advisor's pricing of every gang.
"""

from __future__ import annotations

from rackscale.scheduler.framework import PLACERS, PROFILES, Profile
from rackscale.scheduler.placement.kai import Kai
from rackscale.scheduler.placement.kueue_tas import KueueTAS
from rackscale.scheduler.placement.slurm_block import SlurmBlock
from rackscale.scheduler.placement.volcano import Volcano

PLACERS[KueueTAS.name] = lambda seed: KueueTAS()
PLACERS[SlurmBlock.name] = lambda seed: SlurmBlock()
PLACERS[Kai.name] = lambda seed: Kai()
PLACERS[Volcano.name] = Volcano  # seeded: Volcano breaks ties between nodes and HyperNodes at random

PROFILES["kueue-tas"] = Profile(
    name="kueue-tas",
    placer=KueueTAS.name,
    split_policy="eager",
    summary="Kueue's topology-aware scheduling: the lowest level (node, rack, region) that holds the gang, best fit",
)
PROFILES["slurm-block"] = Profile(
    name="slurm-block",
    placer=SlurmBlock.name,
    split_policy="eager",
    summary="Slurm's topology/block: best-fit rack per segment, else the smallest aggregated block of racks",
)
PROFILES["kai"] = Profile(
    name="kai",
    placer=Kai.name,
    split_policy="eager",  # a preferred level falls back to the next one up at once (no wait)
    summary="NVIDIA KAI-Scheduler: the fullest domain that holds the gang, lowest level first; binpack nodes",
)
PROFILES["volcano"] = Profile(
    name="volcano",
    placer=Volcano.name,
    split_policy="eager",
    summary="Volcano's network-topology-aware scheduling: the lowest HyperNode tier that holds the gang, its fullest",
)
