"""A highly available service: several ``rackscale serve`` replicas on one PostgreSQL, one leading
(docs/high-availability.md). The leader runs the runner (the cycle, the backend); standbys serve reads and
take submissions and cancellations into the store, which the leader picks up (service/pickup.py).

The election is the lease row of store/lease.py, in client-go leaderelection's terms
(``rackscale.kube.leader`` does the same on a Kubernetes Lease): a lease duration (5 s), a retry period
(1 s: every replica tries to take or renew the lease this often) and a renew deadline (2/3 of the lease):
a leader that has not renewed for that long on its own monotonic clock stops acting at once, before the
lease can have expired for anyone else. Unlike a Kubernetes Lease, expiry is judged on one clock, the
database's; a takeover increments the generation, which every commit of a leader carries (the fence).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.engine import Engine

from rackscale.service.clock import ServiceClock
from rackscale.service.live import LiveCluster
from rackscale.service.mirror import Mirrored, build_mirror
from rackscale.service.pickup import StorePickup
from rackscale.service.runner import Runner
from rackscale.service.store import Store, unavailable
from rackscale.service.store.lease import LeaseRecord, read_lease, release, take_or_renew

log = logging.getLogger("rackscale.service.leader")
MIRROR_EVERY_S = 5.0  # how often a standby rebuilds its picture of the cluster from the store
MIRROR_COST = 5.0  # ...and at most 1/MIRROR_COST of its time goes to that (a big store takes seconds)


class Role(StrEnum):
    LEADER = "leader"
    STANDBY = "standby"


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseTiming:
    lease_s: float = 5.0  # how long a renewal holds the lease for (the database's clock)
    renew_s: float = 1.0  # how often every replica tries to take or renew it (client-go's retry period)
    deadline_s: float | None = None  # a leader stops acting this long after its last renewal (default 2/3)

    @property
    def renew_deadline_s(self) -> float:
        return self.deadline_s if self.deadline_s is not None else self.lease_s * 2 / 3


class Elector:
    """Call :meth:`tick` every ``renew_s``. ``generation``: the lease's generation this replica last held
    (its commits carry it); :meth:`acting`: whether it may act now (no I/O: asked before every action)."""

    def __init__(
        self, engine: Engine, *, replica: str, timing: LeaseTiming, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.engine, self.replica, self.timing, self.clock = engine, replica, timing, clock
        self._generation: int | None = None
        self._renewed_at = -float("inf")  # our clock when the last successful renewal was *sent*
        self.terms = 0  # times this replica took the lease
        self.down: str | None = None  # why the last try failed (the database is down): logged once, not per try

    @property
    def generation(self) -> int | None:
        return self._generation

    def acting(self) -> bool:
        return self._generation is not None and self.clock() - self._renewed_at < self.timing.renew_deadline_s

    def tick(self, *, service_time: float) -> bool:
        """Take or renew the lease; whether this replica may act as the leader now."""
        sent = self.clock()  # before the statement: the database's expiry is later than this, never earlier
        held = self._generation if self.acting() else None  # past the deadline: a new term or none
        try:
            got = take_or_renew(
                self.engine, me=self.replica, generation=held, ttl_s=self.timing.lease_s, service_time=service_time
            )
        except Exception as e:  # the database is down or slow: the deadline decides, as for a Kubernetes Lease
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            if self.down is None:  # one line when it starts failing, one when it answers again: not one a try
                log.warning("lease: cannot reach the database (tried again every %g s): %s", self.timing.renew_s, why)
            self.down = why
            return self.acting()
        if self.down is not None:
            log.warning("lease: the database answers again")
            self.down = None
        if got is None:
            self._generation = None
            return False
        if got != held:
            self.terms += 1
            log.warning("%s leads at generation %d", self.replica, got)
        self._generation, self._renewed_at = got, sent
        return True

    def resign(self) -> None:
        """Stop leading, and give the lease up so that a standby need not wait for it to expire."""
        gen, self._generation = self._generation, None
        if gen is not None:
            try:
                release(self.engine, me=self.replica, generation=gen)
            except Exception as e:
                log.warning("lease: could not release generation %d: %s", gen, e)


class HighAvailability:
    """The replica's role, driven by the elector on a thread of its own."""

    def __init__(
        self,
        *,
        store: Store,
        runner: Runner,
        elector: Elector,
        speed: float,
        new_live: Callable[[], LiveCluster],
        on_promote: Callable[[], object] = lambda: None,
    ) -> None:
        self.store, self.runner, self.elector, self.speed = store, runner, elector, speed
        self.new_live, self.on_promote = new_live, on_promote
        self.role = Role.STANDBY
        self.holder: str | None = None
        self.since = time.time()  # wall clock of the last change of role
        self.recovered: dict[str, int] = {}
        self._led = False  # whether this process led before (then its live cluster is stale)
        # A standby's picture of the cluster, rebuilt from the store (service/mirror.py) every MIRROR_EVERY_S,
        # and never more often than MIRROR_COST times its last build took.
        self.mirrored: Mirrored | None = None
        self._mirror_due = 0.0
        self._mirroring = False  # a build runs (one at a time)
        self._epoch = 0  # moved (under the runner's lock) when this replica starts leading: no swap after it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Another live replica started with this one's --replica-id: it renews a lease under our id that this
        # process does not hold. Seen when the renewal time of such a lease moves between two reads (a
        # predecessor of this process, killed, left one that only runs out).
        self.duplicate_id = False
        self._own_id_renewed: float | None = None  # renewed_at of a lease under our id that we do not hold
        runner.guard, runner.leading = elector, False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="rackscale-leader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """A clean shutdown: stop leading and release the lease (a standby takes over at its next try)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.role == Role.LEADER:
            self.runner.halt()
        self.elector.resign()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as e:  # a bug must not end the election: say it, go on (the deadline guards)
                if (down := unavailable(e)) is not None:  # the database went away mid-step: a line, no traceback
                    log.warning("leader election step: %s", down)
                else:
                    log.exception("leader election step failed: %s", e)
            self._stop.wait(self.elector.timing.renew_s)

    def tick(self) -> None:
        leads = self.elector.tick(service_time=self.runner.clock.now())
        if self.role == Role.LEADER and (not leads or self.runner.fenced is not None):
            self._demote(self.runner.fenced or "the lease was not renewed in time")
        elif self.role == Role.STANDBY and leads:
            self._promote()
        if self.role == Role.STANDBY:
            if self.elector.down is not None:  # the database is down: nothing to follow (said once, above)
                self.holder = None
                return
            if self.store.failing:  # a write failed here (a submission while the database was down): no
                self.store.probe()  # runner steps on a standby to try again, so its API would refuse for ever
            self._follow()
        else:
            self.holder = self.elector.replica

    def _promote(self) -> None:
        t0 = time.monotonic()
        with self.runner.lock:  # a picture still being built is not swapped in over the leader's live cluster
            self._epoch += 1
        try:
            resume = max(self.store.latest_time() or 0.0, self.runner.clock.now())
            # A fresh live cluster when this one led or mirrored: recovery fills an empty one.
            live = self.new_live() if self._led or self.mirrored is not None else self.runner.live
            self.runner.pickup = StorePickup(self.store, node_names=[n.name for n in self.runner.live.cluster.nodes])
            self.recovered = self.runner.take_over(live, ServiceClock(speed=self.speed, resume_from=resume))
            self.on_promote()
        except Exception as e:  # cannot lead (the store failed meanwhile): let another replica
            if (down := unavailable(e)) is not None:
                log.error("taking over failed (%s): giving the lease up", down)
            else:
                log.exception("taking over failed (%s): giving the lease up", e)
            self.runner.halt()
            self.elector.resign()
            return
        if self.runner.fenced is not None:  # another replica took the lease while this one recovered
            self._demote(self.runner.fenced)
            return
        self._led = True
        self.role, self.since, self.holder = Role.LEADER, time.time(), self.elector.replica
        self.runner.start()
        log.warning(
            "%s took over at generation %s in %.2f s: %s",
            self.elector.replica,
            self.elector.generation,
            time.monotonic() - t0,
            ", ".join(f"{n} {k}" for k, n in self.recovered.items()),
        )

    def _demote(self, why: str) -> None:
        self.runner.halt()
        # Its uncommitted changes are the next leader's to decide (take_over drops them): a standby's API
        # must not refuse work because this runner's last commit failed.
        self.runner.unhealthy = None
        self.elector.resign()  # nobody need wait for the expiry (a no-op once another took it)
        self.role, self.since = Role.STANDBY, time.time()
        log.error("%s stops leading: %s", self.elector.replica, why)

    def _follow(self) -> None:
        """A standby: who leads, and the leader's service clock (a submission here is stamped on it)."""
        rec = read_lease(self.store.engine)
        self.holder = rec.holder if rec is not None and rec.left_s > 0 and rec.holder else None
        self._check_duplicate_id(rec)
        if rec is None or rec.service_time is None or self.holder is None:
            return
        leader_now = rec.service_time + (self.elector.timing.lease_s - rec.left_s) * self.speed
        if abs(self.runner.clock.now() - leader_now) > self.speed * 0.5:
            self.runner.clock = ServiceClock(speed=self.speed, resume_from=leader_now)
        self._mirror()

    def _check_duplicate_id(self, rec: LeaseRecord | None) -> None:
        """A standby reading a live lease held under its own id, renewed since it last looked: another
        replica runs with the same ``--replica-id``. Safe (a takeover still moves the generation, which
        fences), but each one's ``/v1/leader`` would show the other's lease as its own: say it, loudly."""
        if rec is None or rec.holder != self.elector.replica or rec.left_s <= 0:
            self._own_id_renewed, self.duplicate_id = None, False  # told again if it comes back
            return
        seen, self._own_id_renewed = self._own_id_renewed, rec.renewed_at
        if seen is None or rec.renewed_at == seen or self.duplicate_id:
            return
        self.duplicate_id = True
        log.error(
            "another replica runs with this one's --replica-id %r (it renews the lease, generation %d, which "
            "this process does not hold): give every replica its own id (e.g. the pod's name), then restart one",
            self.elector.replica,
            rec.generation,
        )

    def _mirror(self) -> None:
        """Start a rebuild of the standby's picture from the store when one is due. On a thread of its own:
        at scale a build takes seconds (a store of 62,000 active jobs ~30 s), and the election must go on
        trying the lease meanwhile, or a takeover would wait for it."""
        if time.monotonic() < self._mirror_due or self._mirroring:
            return
        self._mirroring = True
        epoch = self._epoch
        threading.Thread(target=self._build_mirror, args=(epoch,), name="rackscale-mirror", daemon=True).start()

    def _build_mirror(self, epoch: int) -> None:
        try:
            live = self.new_live()
            got = build_mirror(self.store, live, backend=self.runner.backend, now=self.runner.clock.now())
            with self.runner.lock:  # readers see the swap at once; a promotion since (epoch moved) wins
                if epoch != self._epoch or self.role != Role.STANDBY:
                    return
                self.runner.live = live
            self.mirrored = got
            self._mirror_due = time.monotonic() + max(MIRROR_EVERY_S, MIRROR_COST * got.seconds)
        except Exception as e:  # the store failing meanwhile: the old picture stays, tried again later
            log.warning("the standby's picture was not rebuilt: %s", e)
            self._mirror_due = time.monotonic() + MIRROR_EVERY_S
        finally:
            self._mirroring = False

    @property
    def shown_role(self) -> Role:
        """The role as told (``/v1/leader``, ``rackscale_leader``): a leader past its renew deadline acts no
        more, though its election tick may still be waiting on a statement (a frozen or partitioned
        database), so it says standby."""
        return Role.LEADER if self.role == Role.LEADER and self.elector.acting() else Role.STANDBY

    def status(self) -> dict[str, object]:
        return {
            "replica": self.elector.replica,
            "role": self.shown_role.value,
            "holder": self.holder,
            "generation": self.elector.generation,
            "leaseSeconds": self.elector.timing.lease_s,
            "since": self.since,
            "terms": self.elector.terms,
            "refusedActions": self.runner.refused,
            "lastAction": self.runner.last_action,
            "fenced": self.runner.fenced,
            "duplicateReplicaId": self.duplicate_id,
        }


class LeaderCollector(Collector):
    """``rackscale_leader{replica}`` (1 leading, 0 standby), ``rackscale_leader_generation``,
    ``rackscale_leader_duplicate_replica_id``, and the backend actions refused because the lease was no
    longer this replica's."""

    def __init__(self, ha: HighAvailability) -> None:
        self.ha = ha

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        leading = GaugeMetricFamily("rackscale_leader", "1 if this replica leads, 0 if a standby.", labels=["replica"])
        leading.add_metric([self.ha.elector.replica], 1.0 if self.ha.shown_role == Role.LEADER else 0.0)
        yield leading
        gen = self.ha.elector.generation
        yield GaugeMetricFamily(
            "rackscale_leader_generation", "The lease generation this replica last held.", value=float(gen or 0)
        )
        yield GaugeMetricFamily(
            "rackscale_leader_duplicate_replica_id",
            "1 while another live replica renews the lease under this replica's --replica-id.",
            value=1.0 if self.ha.duplicate_id else 0.0,
        )
        yield CounterMetricFamily(
            "rackscale_leader_refused_actions",
            "Backend actions not sent: the lease was no longer this replica's.",
            value=self.ha.runner.refused,
        )


__all__ = ["Elector", "HighAvailability", "LeaderCollector", "LeaseTiming", "Role"]
