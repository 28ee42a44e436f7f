"""Which of the scheduler's mechanisms run under Kubernetes, and why the others are off: pure, no I/O.

The core decides placements, and also stops, resizes and moves running jobs (issue 13's mechanisms). A
running job here is a set of pods that a controller (a Job, JobSet, StatefulSet, ...) owns: rackscale binds
pods, and deletes only the pods of a gang bind it could not complete (:mod:`rackscale.kube.binding`). It
does not delete running pods, nor create pods, so the mechanisms that need either are switched off in the
profile the Kubernetes scheduler runs (:func:`kube_profile`), and said so at start (docs/kubernetes.md,
"Scheduler mechanisms"). Should the core still decide one, :func:`refusal` says why the cycle's decisions
are not carried out: never a placement bound on GPUs that a stop the adapter did not make was to free.
"""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum

from rackscale.scheduler.decisions import Decisions
from rackscale.scheduler.framework import PROFILES, Profile, unknown


class Mechanism(StrEnum):
    """A mechanism of the core that the Kubernetes scheduler does not run (the profile field that enables it)."""

    PREEMPTION = "preemption"  # ``victims``: priority preemption, and least attained service between equals
    LOANS = "loans"  # ``opportunistic_backfill``: lend reserved GPUs, reclaim them (a reclaim stops the borrower)
    ELASTIC = "elastic"  # ``elastic``: minGpus/maxGpus gangs that start smaller, shrink and grow
    CONSOLIDATION = "consolidation"  # ``consolidate``: move running jobs to free a rack for a waiting gang


# Why each is off, for the log line at start and for docs/kubernetes.md (the same words).
WHY_OFF: dict[Mechanism, str] = {
    Mechanism.PREEMPTION: "it stops running pods, and rackscale deletes no running pod (kube-scheduler's own "
    "preemption, PodDisruptionBudgets and grace periods are not reproduced); pending gangs wait instead",
    Mechanism.LOANS: "a loan ends by stopping the borrower's pods, which is a preemption",
    Mechanism.ELASTIC: "a gang's size is its controller's (a Job's parallelism): a scheduler creates no pods to "
    "grow one, and a pod it deleted to shrink one would be recreated; gangs run at the size of their pods",
    Mechanism.CONSOLIDATION: "a move deletes running pods and needs their controller to recreate them where the "
    "move planned, which a scheduler cannot make happen",
}


def kube_profile(policy: str | Profile) -> tuple[Profile, tuple[Mechanism, ...]]:
    """The profile the Kubernetes scheduler runs for ``policy``, and the mechanisms it switched off there.

    Raises ``ValueError`` (naming the profiles) for an unknown profile name."""
    if isinstance(policy, str):
        if policy not in PROFILES:
            raise unknown("profile", policy, PROFILES)
        policy = PROFILES[policy]
    off = tuple(
        m
        for m, on in (
            (Mechanism.PREEMPTION, bool(policy.victims)),
            (Mechanism.LOANS, policy.opportunistic_backfill),
            (Mechanism.ELASTIC, policy.elastic),
            (Mechanism.CONSOLIDATION, policy.consolidate),
        )
        if on
    )
    profile = replace(policy, victims="", opportunistic_backfill=False, elastic=False, consolidate=False)
    return profile, off


def refusal(d: Decisions) -> str | None:
    """Why the adapter cannot carry out the cycle's decisions ``d`` (it would stop, resize or move a running
    job, or add pods to one), or None when they are placements of pending gangs only."""
    if d.preemptions:
        return f"it stops {len(d.preemptions)} running job(s) ({d.preemptions[0].cause.value})"
    if d.resized:
        return f"it resizes {len(d.resized)} running gang(s) ({d.resized[0].kind.value})"
    for p in d.placed:
        if p.moved or p.scale_up:
            return f"it {'moves' if p.moved else 'grows'} the running job {p.spec.name}"
        if p.placement.opportunistic:
            return f"it lends reserved GPUs to {p.spec.name}"
    return None
