"""What a user sees: ``v1.Event`` objects on their pods and the pods' ``PodScheduled`` condition.

Every write here is best effort: a failed event or status patch is logged, never raised, because the
scheduling it reports has already happened (or already not happened) at the API server.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from kubernetes import client

from rackscale.kube.api import KubeApiError, call_json
from rackscale.kube.leader import micro_time
from rackscale.kube.pods import pod_key

log = logging.getLogger("rackscale.kube")

Obj = Mapping[str, Any]

# A reason that moves (counts, times) is rewritten at most this often, whatever report_interval_s says.
MOVING_MESSAGE_S = 5.0


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class EventReason(StrEnum):
    SCHEDULED = "Scheduled"  # kube-scheduler's reason for a bound pod
    FAILED_SCHEDULING = "FailedScheduling"  # kube-scheduler's reason for a pod left pending
    GANG_BIND_UNDONE = "GangBindUndone"  # rackscale's: this pod was bound, then deleted with its failed gang
    PREEMPTED = "Preempted"  # kube-scheduler's reason on a victim of preemption


def _timestamp() -> str:
    return micro_time(datetime.now(UTC)).split(".")[0] + "Z"


def _unschedulable(message: str) -> dict[str, Any]:
    return _condition("PodScheduled", "False", "Unschedulable", message)


def _condition(typ: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": typ,
        "status": status,
        "reason": reason,
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": _timestamp(),
    }


class Reporter:
    """Writes events and conditions; remembers what it last told each pod so it does not repeat itself."""

    def __init__(
        self,
        core: client.CoreV1Api,
        *,
        component: str,
        identity: str,
        clock: Callable[[], float],
        report_interval_s: float,
    ) -> None:
        self.core, self.component, self.identity = core, component, identity
        self.clock, self.report_interval_s = clock, report_interval_s
        self.reported: dict[str, tuple[str, float]] = {}  # pod uid -> (message, when)

    @staticmethod
    def uid(pod: Obj) -> str:
        return str(pod["metadata"].get("uid") or pod_key(pod))

    def unschedulable(self, pods: Iterable[Obj], message: str) -> None:
        """A FailedScheduling event and PodScheduled=False, unless this pod was told the same lately."""
        now = self.clock()
        for pod in pods:
            last = self.reported.get(self.uid(pod))
            if last is not None and last[0] == message and now - last[1] < self.report_interval_s:
                continue
            if last is not None and now - last[1] < min(MOVING_MESSAGE_S, self.report_interval_s):
                continue  # the message moves (counts, times): do not write on every cycle
            self.failed(pod, message, reason=EventReason.FAILED_SCHEDULING)

    def failed(
        self,
        pod: Obj,
        message: str,
        *,
        reason: EventReason,
        condition: bool = True,
        status: Mapping[str, Any] | None = None,
    ) -> None:
        """Tell ``pod`` now (no de-duplication), and remember it so the next cycles do not repeat it at once.
        ``status``: other fields patched with the condition, in the same request."""
        self.reported[self.uid(pod)] = (message, self.clock())
        self.event(pod, EventType.WARNING, reason, message)
        if condition:
            self._patch_status(pod, {**(status or {}), "conditions": [_unschedulable(message)]})

    def forget(self, pod: Obj) -> None:
        """The pod is bound: a later problem is news again."""
        self.reported.pop(self.uid(pod), None)

    def disruption(self, pod: Obj, message: str) -> None:
        """The ``DisruptionTarget`` condition of a victim about to be deleted, as kube-scheduler sets it (a Job's
        ``podFailurePolicy`` can tell a preemption from a failure by it)."""
        cond = _condition("DisruptionTarget", "True", "PreemptionByScheduler", message)
        self._patch_status(pod, {"conditions": [cond]})

    def preempted(self, pod: Obj, message: str) -> None:
        """A ``Preempted`` event on a victim (deleted)."""
        self.event(pod, EventType.NORMAL, EventReason.PREEMPTED, message)

    def nominate(self, pod: Obj, node: str, message: str) -> None:
        """``status.nominatedNodeName`` of a pod waiting for its victims, and why it waits (told now): one status
        patch with its condition."""
        self.failed(pod, message, reason=EventReason.FAILED_SCHEDULING, status={"nominatedNodeName": node})

    def _patch_status(self, pod: Obj, status: dict[str, Any]) -> None:
        md = pod["metadata"]
        try:
            call_json(
                self.core.patch_namespaced_pod_status,
                md["name"],
                md.get("namespace", "default"),
                {"status": status},
                _content_type="application/strategic-merge-patch+json",
            )
        except (KubeApiError, OSError) as e:
            log.warning("patching the status of %s: %s", pod_key(pod), e)

    def event(self, pod: Obj, typ: EventType, reason: EventReason, message: str) -> None:
        md = pod["metadata"]
        ns = md.get("namespace", "default")
        ts = _timestamp()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{md['name']}.{uuid.uuid4().hex[:16]}", "namespace": ns},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": md["name"],
                "namespace": ns,
                "uid": md.get("uid"),
                "resourceVersion": md.get("resourceVersion"),
            },
            "reason": str(reason),
            "message": message,
            "type": str(typ),
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.identity,
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
        }
        try:
            call_json(self.core.create_namespaced_event, ns, body)
        except (KubeApiError, OSError) as e:
            log.warning("event for %s: %s", pod_key(pod), e)
