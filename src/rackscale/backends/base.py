"""The interface every backend implements."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from rackscale.model.placement import Placement
from rackscale.model.workload import JobSpec


@dataclass(frozen=True, slots=True)
class Exit:
    """A running job ended. ``ok``: it completed; otherwise it failed, and ``reason`` says why."""

    job: str
    ok: bool
    exit_code: int | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RunningJobRecord:
    """What the store knows of a job it saw running when the service stopped."""

    spec: JobSpec
    placement: Placement
    started: float  # service clock


class Backend(Protocol):
    """Calls come from one thread at a time, in this order: ``adopt`` once, then any number of
    ``start``/``stop``/``poll``, then ``close``. ``now`` is the service clock (seconds).

    Contracts the runner keeps, which backends may rely on:
    - ``start`` is called only after the store committed the job as running, so after a crash the store may
      say running for a job that never started: ``adopt`` starts it (or reports it lost).
    - A start that fails is reported as a failed :class:`Exit` by the next ``poll`` (``start`` never raises
      for a job's own problems).
    - The exits one ``poll`` returned are committed before the next ``poll``: a backend may forget them then.
    - GPUs are free for the scheduler as soon as ``stop`` is called: a backend with a grace period should
      keep it short.
    """

    name: str

    def adopt(self, running: Mapping[str, RunningJobRecord], now: float) -> list[Exit]:
        """After a restart: take over the jobs the store says are running; return those that ended meanwhile
        (or cannot be found). Anything the backend runs that is not in ``running`` is stopped."""
        ...

    def start(self, spec: JobSpec, placement: Placement, *, now: float) -> None: ...

    def stop(self, job: str, *, now: float) -> None:
        """Stop a running job (cancelled or preempted). No-op if it is not running."""
        ...

    def poll(self, now: float) -> list[Exit]:
        """The jobs that ended since the last call."""
        ...

    def close(self) -> None:
        """The service is stopping. Running work is left as it is (a restart adopts it)."""
        ...


def admitted(backend: object, spec: JobSpec) -> JobSpec:
    """The spec as the backend can run it, for the backends that narrow what they take (an optional method
    ``admit(spec) -> JobSpec``; e.g. a Slurm with topology/block refuses to spread a gang that fits in one
    block, so such a gang must stay in one rack); the spec itself for the others."""
    fn = getattr(backend, "admit", None)
    if fn is None:
        return spec
    out = fn(spec)
    assert isinstance(out, JobSpec), f"{type(backend).__name__}.admit must return a JobSpec"
    return out


def resize(backend: Backend, spec: JobSpec, placement: Placement, *, now: float) -> None:
    """An elastic gang goes on at another size: a backend with an optional ``resize(spec, placement, now=)``
    keeps the run going (the simulated one keeps its progress); any other stops it and starts it on the new
    placement (the job resumes from the checkpoint it saved on the stop signal, as TorchElastic jobs do)."""
    fn = getattr(backend, "resize", None)
    if fn is not None:
        fn(spec, placement, now=now)
        return
    backend.stop(spec.name, now=now)
    backend.start(spec, placement, now=now)


def warn(backend: object, job: str, *, now: float, grace_s: float) -> bool:
    """A drain's stop signal at its start, for the backends that can send it (an optional method
    ``warn(job, *, now, grace_s)``: kubectl drain's SIGTERM, then ``grace_s`` before the runner's ``stop``):
    the job may checkpoint and end. False for a backend without it (the simulated one: nothing to tell)."""
    fn = getattr(backend, "warn", None)
    if not callable(fn):
        return False
    fn(job, now=now, grace_s=grace_s)
    return True


def orphans(backend: object) -> list[str]:
    """The jobs the backend still runs from an earlier start of the service, asked before ``adopt``, for the
    backends that can tell (an optional method ``orphans() -> list[str]``); [] for the others. The service
    refuses to adopt (and so stop) them onto a new, empty store."""
    fn = getattr(backend, "orphans", None)
    return list(fn()) if callable(fn) else []
