"""Scheduled scaling of Kubernetes Deployments: ``rackscale kube-scheduler --schedule FILE``.

The scheduler owns the cluster connection, so it is the one that acts on a ScalingSchedule whose target is
a Deployment (docs/scheduled-scaling.md): when a step's time comes on the wall clock, it PATCHes the
Deployment's ``scale`` subresource (``{"spec": {"replicas": N}}``, a JSON merge patch, as ``kubectl scale``
does through the same subresource) and records a ``ScheduledScale`` Event on the Deployment.

Semantics (the same as the service's, :mod:`rackscale.service.schedules_store`):
- A schedule's *step in force* is its latest step at or before now (``last_fire``). The first tick after a
  start (or after this replica became the leader) applies it: a scheduler restarted at 03:00 with "0 at
  02:00" sets 0 replicas then. A PATCH of the replicas a Deployment already has changes nothing, so applying
  it again is harmless.
- Later ticks apply a step once its time has come; of several steps that came while the loop could not run
  (a long pause), only the latest is applied: the earlier ones are superseded, as the replicas they set
  would be overwritten at once (Kubernetes CronJob likewise starts one job for missed schedules, not each).
- A PATCH that fails (the Deployment is missing, the API server is down) is logged and retried every
  ``retry_s`` until it goes through or the next step supersedes it.
Only the leader ticks (the loop calls :meth:`DeploymentScaler.tick` when it is the leader).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from rackscale.host.scaling import ScalingSchedule, ScheduleFired, TargetKind, last_fire
from rackscale.kube.api import KubeApiError, call_json
from rackscale.kube.leader import micro_time
from rackscale.model.errors import RackscaleError

log = logging.getLogger("rackscale.kube")

MERGE_PATCH = "application/merge-patch+json"
SCALE_REASON = "ScheduledScale"
TICK_S = 1.0  # how often schedules are looked at (cron has minutes: a second is plenty)
RETRY_S = 30.0  # after a failed PATCH


class ScheduleTargetError(RackscaleError, ValueError):
    """A schedule the Kubernetes scheduler cannot act on (its target is not a Deployment)."""


def deployment_of(s: ScalingSchedule) -> tuple[str, str]:
    """(namespace, name) of a schedule's Deployment. Raises ScheduleTargetError for another target."""
    if s.target_kind is not TargetKind.DEPLOYMENT:
        raise ScheduleTargetError(
            f"schedule {s.name!r} targets a {s.target_kind.value} ({s.target}); the Kubernetes scheduler scales "
            "Deployments only (fix: put queue and service schedules to the service with `rackscale apply -f`)"
        )
    ns, _, name = s.target.partition("/")
    return ns or "default", name


class DeploymentScaler:
    """Fires deployment schedules on the wall clock ``wall`` (epoch seconds)."""

    def __init__(
        self,
        api: client.ApiClient,
        schedules: Sequence[ScalingSchedule],
        *,
        component: str = "rackscale",
        wall: Callable[[], float] = time.time,
        tick_s: float = TICK_S,
        retry_s: float = RETRY_S,
    ) -> None:
        for s in schedules:
            deployment_of(s)  # refused here, at start-up, not when its first step comes
        self.apps = client.AppsV1Api(api)
        self.core = client.CoreV1Api(api)
        self.schedules = tuple(schedules)
        self.component = component
        self.wall, self.tick_s, self.retry_s = wall, tick_s, retry_s
        self.applied: dict[str, float] = {}  # schedule -> the fire time of the step last applied
        self.fired: list[ScheduleFired] = []  # every step applied, in order (tests, logs)
        self.errors = 0
        self._retry_at: dict[str, float] = {}
        self._next = float("-inf")

    def reset(self) -> None:
        """Forget what was applied: the next tick applies every step in force again (a new leader)."""
        self.applied.clear()
        self._retry_at.clear()
        self._next = float("-inf")

    def tick(self) -> list[ScheduleFired]:
        """Apply the steps whose time has come (at most once per ``tick_s``); the ones applied now."""
        now = self.wall()
        if now < self._next:
            return []
        self._next = now + self.tick_s
        out: list[ScheduleFired] = []
        for s in self.schedules:
            got = last_fire(s, at_or_before=now)
            if got is None:
                continue
            at, step = got
            if at <= self.applied.get(s.name, float("-inf")) or now < self._retry_at.get(s.name, float("-inf")):
                continue
            fired = self._scale(s, at, step)
            if fired is None:
                self._retry_at[s.name] = now + self.retry_s
                continue
            self._retry_at.pop(s.name, None)
            self.applied[s.name] = at
            self.fired.append(fired)
            out.append(fired)
        return out

    def _scale(self, s: ScalingSchedule, at: float, step: int) -> ScheduleFired | None:
        ns, name = deployment_of(s)
        replicas = s.steps[step].replicas
        if replicas is None:  # the document's rules give a deployment step its replicas: never here
            return None
        try:
            scale = call_json(
                self.apps.patch_namespaced_deployment_scale,
                name,
                ns,
                {"spec": {"replicas": replicas}},
                _content_type=MERGE_PATCH,
            )
        except (KubeApiError, OSError) as e:
            self.errors += 1
            log.warning("schedule %s: scaling deployment %s/%s to %d failed: %s", s.name, ns, name, replicas, e)
            return None
        cron = s.steps[step].cron
        summary = f"deployment {ns}/{name}: replicas -> {replicas} (schedule {s.name}, step {step}: {cron!r})"
        log.info("%s", summary)
        self._event(ns, name, scale, summary)
        return ScheduleFired(
            schedule=s.name,
            step=step,
            at=at,
            target_kind=TargetKind.DEPLOYMENT,
            target=s.target,
            summary=summary,
            replicas=replicas,
        )

    def _event(self, ns: str, name: str, scale: dict[str, Any], message: str) -> None:
        """A Normal Event on the Deployment (best effort: the scale has happened either way)."""
        ts = micro_time(datetime.now(UTC)).split(".")[0] + "Z"
        md = scale.get("metadata") or {}
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": ns},
            "involvedObject": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": name,
                "namespace": ns,
                "uid": md.get("uid"),
            },
            "reason": SCALE_REASON,
            "message": message,
            "type": "Normal",
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
        }
        try:
            call_json(self.core.create_namespaced_event, ns, body)
        except (KubeApiError, OSError) as e:
            log.warning("event for deployment %s/%s: %s", ns, name, e)


__all__ = ["MERGE_PATCH", "SCALE_REASON", "DeploymentScaler", "ScheduleTargetError", "deployment_of"]
