"""Which of the scheduler's mechanisms run under Kubernetes, and why the others are off: pure, no I/O.

The core decides placements, and also stops, resizes and moves running jobs (issue 13's mechanisms). A
running job here is a set of pods that a controller (a Job, JobSet, StatefulSet, ...) owns. rackscale binds
pods; it deletes the pods of a gang bind it could not complete (:mod:`rackscale.kube.binding`) and, as
kube-scheduler's own preemption and KAI-Scheduler's consolidation do, the pods of running gangs that a
waiting gang needs the room of (:mod:`rackscale.kube.preemption`: deleted with their grace period, the
waiting gang nominated and placed once they are gone; a moved gang's controller recreates its pods, which
rackscale places again). It creates no pod, so the mechanisms that need one (grow an elastic gang) are
switched off in the profile the Kubernetes scheduler runs (:func:`kube_profile`), and said so at start
(docs/kubernetes.md, "Scheduler mechanisms"). Least-attained-service preemption between equal priorities is off
too unless asked for (``--las-preemption``: it deletes a running gang for a waiting one of the *same* priority,
which a cluster that never asked for it would not expect); with it, its stops are carried out as priority
preemptions are, the gangs' earlier service read from :mod:`rackscale.kube.attained`. Should the core still
decide a mechanism that is off, :func:`refusal` says why the cycle's decisions are not carried out: never a
placement bound on GPUs that a stop the adapter did not make was to free.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import replace
from enum import StrEnum

from rackscale.scheduler.decisions import Decisions, PreemptionCause
from rackscale.scheduler.framework import PROFILES, Profile, unknown
from rackscale.scheduler.las import LasVictims
from rackscale.scheduler.preemption import CheapestVictims


class Mechanism(StrEnum):
    """A mechanism of the core that the Kubernetes scheduler does not run (the profile field that enables it)."""

    PREEMPTION = "preemption"  # ``victims``: priority preemption (off only with --no-preemption)
    LAS_PREEMPTION = "least-attained-service preemption"  # ``las-victims``' stops between equal priorities
    LOANS = "loans"  # ``opportunistic_backfill``: lend reserved GPUs, reclaim them (a reclaim stops the borrower)
    ELASTIC = "elastic"  # ``elastic``: minGpus/maxGpus gangs that start smaller, shrink and grow
    CONSOLIDATION = "consolidation"  # ``consolidate``: move running jobs to free a rack (off: --no-preemption)


# Why each is off, for the log line at start and for docs/kubernetes.md (the same words).
WHY_OFF: dict[Mechanism, str] = {
    Mechanism.PREEMPTION: "--no-preemption: a gang that does not fit waits, and no running pod is deleted for it",
    Mechanism.LAS_PREEMPTION: "it stops a running gang for a waiting one of the same priority that has had "
    "less GPU time, which a cluster must ask for (--las-preemption); priority preemption stays on",
    Mechanism.LOANS: "a loan ends by stopping the borrower's pods, which its reserved holder may not wait for: "
    "a reclaim is a preemption between any priorities",
    Mechanism.ELASTIC: "a gang's size is its controller's (a Job's parallelism): a scheduler creates no pods to "
    "grow one, and a pod it deleted to shrink one would be recreated; gangs run at the size of their pods",
    Mechanism.CONSOLIDATION: "--no-preemption: a move deletes running pods (their controller recreates them, and "
    "rackscale places them again)",
}


def kube_profile(
    policy: str | Profile, *, preemption: bool = True, las: bool = False
) -> tuple[Profile, tuple[Mechanism, ...]]:
    """The profile the Kubernetes scheduler runs for ``policy``, and the mechanisms it switched off there.

    A profile that preempts keeps priority preemption (``cheapest-victims``: lower priorities only), and one
    that consolidates keeps consolidation, unless ``preemption`` is False; with ``las`` (``--las-preemption``),
    one whose victims are ``las-victims`` keeps them (equal priorities too). Raises ``ValueError`` (naming the
    profiles) for an unknown profile name."""
    if isinstance(policy, str):
        if policy not in PROFILES:
            raise unknown("profile", policy, PROFILES)
        policy = PROFILES[policy]
    keep_las = las and preemption and policy.victims == LasVictims.name
    victims = policy.victims if keep_las else CheapestVictims.name if policy.victims and preemption else ""
    off = tuple(
        m
        for m, on in (
            (Mechanism.PREEMPTION, bool(policy.victims) and not preemption),
            (
                Mechanism.LAS_PREEMPTION,
                preemption and not keep_las and policy.victims not in ("", CheapestVictims.name),
            ),
            (Mechanism.LOANS, policy.opportunistic_backfill),
            (Mechanism.ELASTIC, policy.elastic),
            (Mechanism.CONSOLIDATION, policy.consolidate and not preemption),
        )
        if on
    )
    profile = replace(
        policy,
        victims=victims,
        opportunistic_backfill=False,
        elastic=False,
        consolidate=policy.consolidate and preemption,
    )
    return profile, off


def refusal(
    d: Decisions,
    *,
    preemption: bool = False,
    holders: Container[str] = (),
    causes: Container[PreemptionCause] | None = None,
) -> str | None:
    """Why the adapter cannot carry out the cycle's decisions ``d``, or None when it can: placements of
    pending gangs, and (with ``preemption``) stops by priority or consolidation (``causes``: those, default
    :data:`CARRIED_OUT`; :func:`carried_out`) of gangs whose pods it knows (``holders``: the running jobs the
    snapshot built from rackscale's own pods), with the moved gangs' new places (their controller recreates
    their pods; rackscale places them again on a later cycle). Any other stop, a resize, a growth or a loan is
    refused."""
    causes = CARRIED_OUT if causes is None else causes
    for s in d.preemptions:
        if not preemption or s.cause not in causes:
            return f"it stops {len(d.preemptions)} running job(s) ({s.cause.value})"
        if s.victim not in holders:
            return f"it stops {s.victim!r}, which is no gang of rackscale's running pods"
    if d.resized:
        return f"it resizes {len(d.resized)} running gang(s) ({d.resized[0].kind.value})"
    moved = {s.victim for s in d.preemptions if s.cause is PreemptionCause.CONSOLIDATION}
    for p in d.placed:
        if (p.moved and p.spec.name not in moved) or p.scale_up:
            return f"it {'moves' if p.moved else 'grows'} the running job {p.spec.name}"
        if p.placement.opportunistic:
            return f"it lends reserved GPUs to {p.spec.name}"
    return None


# The stops the adapter makes: a waiting gang's of lower priority, and consolidation's moves ...
CARRIED_OUT = frozenset({PreemptionCause.PRIORITY, PreemptionCause.CONSOLIDATION})


def carried_out(*, las: bool) -> frozenset[PreemptionCause]:
    """... and, with ``--las-preemption`` (``las``), a waiting gang's of equal priority that has had more GPU time."""
    return CARRIED_OUT | {PreemptionCause.ATTAINED_SERVICE} if las else CARRIED_OUT
