"""The attained service of stopped gangs under Kubernetes (``--las-preemption``): one ConfigMap, so that it
outlives the pods, a restart and a failover.

Least attained service (docs/scheduler-las.md) orders waiting gangs, and chooses victims among running gangs of
equal priority, by the GPU time each has had over all its runs. A running gang's current run is read from its
pods (``status.startTime`` x its GPUs, :mod:`rackscale.kube.snapshot`); what it had in its *earlier* runs is
gone with the pods it had then: its controller recreates new ones. So when rackscale stops a gang (any stop it
carries out: priority, consolidation, attained service), it records the gang's service so far, keyed by
namespace and pod group, in one ConfigMap (``data["attained.json"]``) in the lease's namespace, and a new
leader (or this one after a restart) reads it back.

- **Writes** carry the ConfigMap's ``resourceVersion`` (optimistic concurrency, as the Lease's): a 409 (another
  writer, e.g. a leader that has not noticed it lost the lease yet, or a person) is re-read, the two merged
  entry by entry (the later stop wins), and written again. A write that fails otherwise is tried again after
  the next stop or the next cycle; meanwhile the records live in memory.
- **Bounded**: at most ``max_entries`` entries (the least recently seen dropped first), an entry of a gang not
  seen (pending or running) for ``ttl_s`` dropped, a key longer than :data:`MAX_KEY_CHARS` never recorded,
  and the document kept under :data:`MAX_BYTES` (the API server's limit is 1 MiB).
- **Hostile or corrupt content** (not JSON, wrong types, huge numbers, NaN, deep nesting) is ignored entry by
  entry (the whole document when it is no JSON object at all) with one log line per read, never an exception
  mid-cycle; the next write replaces it.

Times in the ConfigMap are Unix seconds on the scheduler's wall clock; the cycle's map
(:meth:`ServiceRecord.for_cycle`) is on the core's clock (seconds since the scheduler started). Lone pods (no
``rackscale.io/pod-group``) are not recorded: a controller recreates one under another name.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from urllib3.exceptions import HTTPError

from rackscale.kube.api import KubeApiError, call_json
from rackscale.scheduler.framework import AttainedService

log = logging.getLogger("rackscale.kube")

DATA_KEY = "attained.json"
MAX_ENTRIES = 1000
TTL_S = 7 * 86400.0  # a gang not seen for a week is forgotten
MAX_KEY_CHARS = 317  # a namespace (63), "/", and a pod group as long as a DNS subdomain (253)
MAX_BYTES = 512 * 1024  # half the API server's 1 MiB for a ConfigMap
WRITE_TRIES = 3  # a write meeting 409 Conflict is re-read, merged and tried again at most this often per flush
# What an entry may hold (beyond: hostile or corrupt, ignored): ~2 M GPUs for 150 years; seconds up to the
# year 5138; a billion runs.
MAX_GPU_S = 1e16
MAX_S = 1e11
MAX_RUNS = 10**9

_GROUP, _RUNNING_GROUP = "group:", "running-group:"  # the core's job names of a gang's pods (kube.pods, preemption)


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One gang's record: its earlier runs' service (times: Unix seconds), when a leader last saw the gang, and
    the start of the last run recorded (a stop decided again for the same run is not counted twice)."""

    service: AttainedService
    seen: float
    last_start: float | None = None


def record_key(job: str) -> str | None:
    """``namespace/group`` of a gang's job name (pending or running), or None for a lone pod."""
    for prefix in (_RUNNING_GROUP, _GROUP):
        if job.startswith(prefix):
            key = job[len(prefix) :]
            return key if len(key) <= MAX_KEY_CHARS else None
    return None


def after_stop(old: Entry | None, *, started: float | None, stopped: float, gpus: float) -> Entry | None:
    """``old`` with one more run, from ``started`` (None: unknown, counted as a run of no service) to ``stopped``
    on ``gpus`` GPUs, as the host records a stop (``restarted``, then ``after_run``); None when that run is
    recorded already."""
    if started is not None and not 0 <= started <= MAX_S:
        started = None  # no time an entry may hold (its next read would refuse it): unknown
    if old is not None and started is not None and old.last_start == started:
        return None
    at = stopped if started is None else min(started, stopped)
    base = AttainedService() if old is None else old.service.restarted(at)
    return Entry(service=base.after_run(started=at, now=stopped, gpus=gpus), seen=stopped, last_start=started)


def merge(theirs: Mapping[str, Entry], ours: Mapping[str, Entry]) -> dict[str, Entry]:
    """``theirs`` with ``ours`` over it, entry by entry: the later stop wins (ours on a tie), seen the later."""
    out = dict(theirs)
    for key, mine in ours.items():
        other = out.get(key)
        if other is None:
            out[key] = mine
            continue
        won = mine if mine.service.stopped_at >= other.service.stopped_at else other
        out[key] = _seen(won, max(mine.seen, other.seen))
    return out


def _seen(e: Entry, seen: float) -> Entry:
    return e if e.seen == seen else Entry(service=e.service, seen=seen, last_start=e.last_start)


def bounded(
    entries: Mapping[str, Entry],
    *,
    now: float,
    present: Collection[str] = (),
    ttl_s: float = TTL_S,
    max_entries: int = MAX_ENTRIES,
    max_bytes: int = MAX_BYTES,
) -> dict[str, Entry]:
    """What is written: the ``present`` gangs' entries seen ``now``; the others' dropped once not seen for
    ``ttl_s``; the most recently seen ``max_entries``, and fewer while the document is over ``max_bytes``."""
    fresh = {k: (_seen(e, now) if k in present else e) for k, e in entries.items()}
    kept = sorted(
        ((k, e) for k, e in fresh.items() if now - e.seen < ttl_s),
        key=lambda ke: (ke[1].seen, ke[1].service.stopped_at, ke[0]),
        reverse=True,
    )[: max(max_entries, 0)]
    while kept and len(dump(dict(kept)).encode()) > max_bytes:
        kept = kept[: len(kept) - max(1, len(kept) // 8)]  # the least recently seen eighth
    return dict(kept)


def dump(entries: Mapping[str, Entry]) -> str:
    """The ConfigMap's document: compact JSON, keys sorted (the same records give the same text)."""
    return json.dumps(
        {"version": 1, "entries": {k: _as_json(e) for k, e in entries.items()}},
        sort_keys=True,
        separators=(",", ":"),
        allow_nan=False,
    )


def _as_json(e: Entry) -> dict[str, Any]:
    s = e.service
    out: dict[str, Any] = {
        "gpuS": round(s.gpu_s, 3),
        "runS": round(s.run_s, 3),
        "waitedS": round(s.waited_s, 3),
        "stoppedAt": round(s.stopped_at, 3),
        "runs": s.runs,
        "seen": round(e.seen, 3),
    }
    if e.last_start is not None:
        out["lastStart"] = e.last_start
    return out


def _int(text: str) -> int | float:
    """A JSON integer: huge ones (Python refuses past 4,300 digits, raising mid-parse) read as infinite, so
    that the entry holding one is refused, not the whole document."""
    return int(text) if len(text) <= 30 else math.inf


def _number(v: object, top: float) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) and 0 <= f <= top else None


def _entry(key: object, raw: object) -> Entry | str:
    """The entry, or why it is refused."""
    if not isinstance(key, str) or not 3 <= len(key) <= MAX_KEY_CHARS or "/" not in key:
        return "its key is no namespace/pod-group"
    if not isinstance(raw, dict):
        return "not an object"
    got: dict[str, float] = {}
    for field, top in (
        ("gpuS", MAX_GPU_S),
        ("runS", MAX_S),
        ("waitedS", MAX_S),
        ("stoppedAt", MAX_S),
        ("seen", MAX_S),
    ):
        v = _number(raw.get(field), top)
        if v is None:
            return f"{field} is no number from 0 to {top:g}"
        got[field] = v
    runs = raw.get("runs")
    if isinstance(runs, bool) or not isinstance(runs, int) or not 0 <= runs <= MAX_RUNS:
        return f"runs is no whole number from 0 to {MAX_RUNS}"
    last: float | None = None
    if raw.get("lastStart") is not None:
        last = _number(raw.get("lastStart"), MAX_S)
        if last is None:
            return f"lastStart is no number from 0 to {MAX_S:g}"
    svc = AttainedService(got["gpuS"], got["runS"], got["waitedS"], got["stoppedAt"], runs)
    return Entry(service=svc, seen=got["seen"], last_start=last)


def parse(text: object) -> tuple[dict[str, Entry], list[str]]:
    """The entries of a stored document, and what was refused in it (one line each, the key cut to 60
    characters). Never raises."""
    if text is None:
        return {}, []
    if not isinstance(text, str):
        return {}, [f"data[{DATA_KEY!r}] is no string"]
    try:
        doc = json.loads(text, parse_int=_int)
    except (ValueError, RecursionError) as e:  # not JSON (or nested past the parser's depth)
        return {}, [f"not JSON ({str(e)[:80]})"]
    entries = doc.get("entries") if isinstance(doc, dict) else None
    if not isinstance(entries, dict):
        return {}, ["no 'entries' object"]
    out: dict[str, Entry] = {}
    bad: list[str] = []
    for key, raw in entries.items():
        got = _entry(key, raw)
        if isinstance(got, str):
            bad.append(f"{str(key)[:60]!r}: {got}")
        else:
            out[key] = got
    return out, bad


class ServiceRecord:
    """The ConfigMap ``namespace/name`` and its entries in memory; the loop thread's only (no lock)."""

    def __init__(
        self,
        core: client.CoreV1Api,
        *,
        name: str,
        namespace: str,
        ttl_s: float = TTL_S,
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.core, self.name, self.namespace = core, name, namespace
        self.ttl_s, self.max_entries, self.max_bytes = ttl_s, max_entries, max_bytes
        self.entries: dict[str, Entry] = {}
        self.changed: dict[str, Entry] = {}  # recorded since the last write that took
        self.loaded = False  # read since this replica last became leader (reset by :meth:`forget`)
        self._rv: str | None = None  # the stored object's resourceVersion; None: there is none
        self._failing = False  # the last read or write failed (logged once until one succeeds)

    @property
    def where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    def forget(self) -> None:
        """Read it again before the next use (this replica became leader: another may have written since)."""
        self.loaded = False

    def load(self) -> bool:
        """Read the ConfigMap (absent: no records yet), our unwritten records over it. False when it could not
        be read: the records in memory serve meanwhile, and the next cycle tries again."""
        try:
            cm = call_json(self.core.read_namespaced_config_map, self.name, self.namespace)
        except KubeApiError as e:
            if e.status != 404:
                return self._failed("reading", e)
            cm = None
        except (OSError, ValueError, HTTPError) as e:  # (urllib3's: a connection its retries gave up on)
            return self._failed("reading", e)
        stored: dict[str, Entry] = {}
        bad: list[str] = []
        self._rv = None
        if cm is not None:
            self._rv = str((cm.get("metadata") or {}).get("resourceVersion") or "") or None
            data = cm.get("data")
            if isinstance(data, dict):
                stored, bad = parse(data.get(DATA_KEY))
            elif data is not None:  # (absent: an empty ConfigMap, no records)
                bad = ["its data is no map"]
            if bad:
                log.warning(
                    "%s: ignored %d record(s) that are not attained service as rackscale writes it (the next write "
                    "replaces them): %s",
                    self.where,
                    len(bad),
                    "; ".join(bad[:3]) + ("; ..." if len(bad) > 3 else ""),
                )
        self.entries = merge(stored, self.changed)
        self.loaded, self._failing = True, False
        return True

    def record(self, key: str, *, started: float | None, stopped: float, gpus: float) -> None:
        """One stop of the gang ``key`` (``namespace/group``), written by the next :meth:`flush`."""
        e = after_stop(self.entries.get(key), started=started, stopped=stopped, gpus=gpus)
        if e is not None:
            self.entries[key] = self.changed[key] = e

    def flush(self, *, now: float, present: Collection[str] = ()) -> bool:
        """Write the records made since the last write (and drop what :func:`bounded` drops). True when there was
        nothing to write or the write took."""
        if not self.changed:
            return True
        for _ in range(WRITE_TRIES):
            if not self.loaded and not self.load():
                return False
            self.entries = bounded(
                self.entries,
                now=now,
                present=present,
                ttl_s=self.ttl_s,
                max_entries=self.max_entries,
                max_bytes=self.max_bytes,
            )
            body: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": self.name,
                    "namespace": self.namespace,
                    "labels": {"app.kubernetes.io/part-of": "rackscale"},
                },
                "data": {DATA_KEY: dump(self.entries)},
            }
            try:
                if self._rv is None:
                    out = call_json(self.core.create_namespaced_config_map, self.namespace, body)
                else:
                    body["metadata"]["resourceVersion"] = self._rv
                    out = call_json(self.core.replace_namespaced_config_map, self.name, self.namespace, body)
            except KubeApiError as e:
                if e.status in (409, 404):  # written, created or deleted since we read it: read, merge, again
                    self.loaded = False
                    continue
                return self._failed("writing", e)
            except (OSError, ValueError, HTTPError) as e:
                return self._failed("writing", e)
            self._rv = str((out.get("metadata") or {}).get("resourceVersion") or "") or None
            self.changed.clear()
            self._failing = False
            return True
        log.warning("%s: still conflicting after %d writes; trying again later", self.where, WRITE_TRIES)
        return False

    def _failed(self, doing: str, e: Exception) -> bool:
        if not self._failing:
            log.warning("%s: %s failed (%s); the records stay in memory and it is tried again", self.where, doing, e)
        self._failing = True
        return False

    def for_cycle(
        self,
        *,
        pending: Iterable[str],
        running: Mapping[str, float],
        wall_now: float,
        core_now: float,
    ) -> tuple[dict[str, AttainedService], set[str]]:
        """The core's ``attained`` map for a cycle, on its clock (seconds since the scheduler started), for the
        ``pending`` gangs and the ``running`` ones (job name -> its run's start on that clock, which counts as a
        restart: the wait since the last stop is added, as the host does); and the record keys of the gangs
        seen (:func:`bounded`'s ``present``). An entry of a gang seen here that was last written as seen half
        its TTL ago is written again (by the next :meth:`flush`), so that a new leader does not drop it."""
        out: dict[str, AttainedService] = {}
        seen: set[str] = set()
        starts: list[tuple[str, float | None]] = [(j, None) for j in pending]
        starts.extend(running.items())
        for job, started in starts:
            key = record_key(job)
            if key is None:
                continue
            seen.add(key)
            e = self.entries.get(key)
            if e is None:
                continue
            if wall_now - e.seen > self.ttl_s / 2:
                e = self.entries[key] = self.changed[key] = _seen(e, wall_now)
            svc = e.service._replace(stopped_at=core_now - (wall_now - e.service.stopped_at))
            out[job] = svc if started is None else svc.restarted(started)
        return out, seen


__all__ = ["Entry", "ServiceRecord", "after_stop", "bounded", "dump", "merge", "parse", "record_key"]
