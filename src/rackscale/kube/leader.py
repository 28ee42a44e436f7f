"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection package does it.

The holder renews ``spec.renewTime`` every few seconds. Another instance takes the lease over when the record
has not changed for ``lease_duration_s`` *as measured on its own clock* (the time it last saw the record
change), so clock skew between the machines does not matter. Writes use the lease's resourceVersion, so two
candidates that race for an expired lease cannot both win: the second write gets 409 Conflict.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from rackscale.kube.api import KubeApiError, call_json

log = logging.getLogger("rackscale.kube.leader")


def micro_time(t: datetime) -> str:
    """A ``MicroTime`` as the API server writes it."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(slots=True)
class _Observed:
    holder: str
    renew: str
    transitions: int
    seen_at: float  # our clock when the record last changed


class LeaderElector:
    """Call :meth:`tick` every ``renew_interval_s``; it returns whether this instance leads now."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.coord = client.CoordinationV1Api(api)
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_duration_s = lease_duration_s
        # A leader that cannot renew for this long stops leading (before anyone else may take over).
        self.renew_deadline_s = renew_deadline_s if renew_deadline_s is not None else lease_duration_s * 2 / 3
        self.clock = clock
        self._observed: _Observed | None = None
        self._last_renew: float | None = None  # our clock at the last successful write as holder
        self.transitions = 0  # times this instance became leader

    @property
    def is_leader(self) -> bool:
        return self._last_renew is not None and self.clock() - self._last_renew < self.renew_deadline_s

    def tick(self) -> bool:
        was = self.is_leader
        try:
            ok = self._try_acquire_or_renew()
        except (KubeApiError, OSError, ValueError) as e:
            log.warning("lease %s/%s: %s", self.namespace, self.name, e)
            ok = False
        if ok:
            self._last_renew = self.clock()
            if not was:
                self.transitions += 1
                log.info("%s leads (lease %s/%s)", self.identity, self.namespace, self.name)
        elif was and not self.is_leader:
            log.warning("%s lost the lease %s/%s", self.identity, self.namespace, self.name)
        return self.is_leader

    def release(self) -> None:
        """Give the lease up (on a clean shutdown), so another instance need not wait for it to expire."""
        if not self.is_leader:
            return
        self._last_renew = None
        try:
            lease = self._read()
            if lease is not None and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["renewTime"] = None
                self._write(lease)
        except (KubeApiError, OSError, ValueError) as e:
            log.warning("releasing lease %s/%s: %s", self.namespace, self.name, e)

    # ------------------------------------------------------------------ internals
    def _read(self) -> dict[str, Any] | None:
        try:
            return call_json(self.coord.read_namespaced_lease, self.name, self.namespace)
        except KubeApiError as e:
            if e.status == 404:
                return None
            raise

    def _write(self, lease: dict[str, Any]) -> dict[str, Any]:
        return call_json(self.coord.replace_namespaced_lease, self.name, self.namespace, lease)

    def _try_acquire_or_renew(self) -> bool:
        now_wall = datetime.now(UTC)
        now = self.clock()
        lease = self._read()
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now_wall, acquire=True, transitions=0),
            }
            try:
                created = call_json(self.coord.create_namespaced_lease, self.namespace, body)
            except KubeApiError as e:
                if e.status == 409:  # someone else created it first
                    return False
                raise
            self._observe(created, now)
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        self._observe(lease, now)
        assert self._observed is not None
        if holder and holder != self.identity and now - self._observed.seen_at < self.lease_duration_s:
            return False  # held by a live leader
        mine = holder == self.identity
        lease["spec"] = self._spec(
            now_wall,
            acquire=not mine,
            transitions=int(spec.get("leaseTransitions") or 0) + (0 if mine or not holder else 1),
            keep=spec if mine else None,
        )
        try:
            written = self._write(lease)
        except KubeApiError as e:
            if e.status == 409:  # lost a race, or the record moved under us: look again next tick
                return False
            raise
        self._observe(written, now)
        return True

    def _spec(
        self, now: datetime, *, acquire: bool, transitions: int, keep: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        spec = dict(keep or {})
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=max(1, round(self.lease_duration_s)),
            renewTime=micro_time(now),
            leaseTransitions=transitions,
        )
        if acquire or "acquireTime" not in spec:
            spec["acquireTime"] = micro_time(now)
        return spec

    def _observe(self, lease: dict[str, Any], now: float) -> None:
        spec = lease.get("spec") or {}
        rec = (
            str(spec.get("holderIdentity") or ""),
            json.dumps(spec.get("renewTime")),
            int(spec.get("leaseTransitions") or 0),
        )
        o = self._observed
        if o is None or (o.holder, o.renew, o.transitions) != rec:
            self._observed = _Observed(rec[0], rec[1], rec[2], now)
