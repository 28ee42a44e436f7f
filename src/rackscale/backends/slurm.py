"""The ``slurm`` backend: each placement becomes one ``sbatch`` pinned to the placement's nodes.

``start`` writes ``<data_dir>/slurm/<job>.sh`` (the job's ``command`` argv, shell-quoted, run with ``exec``;
without a command ``sleep <durationEstimate or 60>``) and submits it with ``sbatch --parsable
--job-name=rs-<job> --nodelist=<nodes> --nodes=<n> --gres=gpu:<per node> --ntasks-per-node=<units per node>
--comment=<this service's tag> --output=<data_dir>/slurm/<job>.out``. Slurm's job id goes to
``<data_dir>/slurm/<job>.id`` so a restarted service finds it. Before submitting, a live job named
``rs-<job>`` with this service's tag is looked for (a crash between ``sbatch`` and the id file): it is
adopted, never submitted twice.

``poll`` asks ``scontrol show job --oneliner`` (one call for every job, at most every ``poll_interval_s``):
there is no slurmdbd, so ``sacct`` is not used; ended jobs stay visible for ``MinJobAge`` (300 s by default).
Each job is submitted ``--no-requeue``: when a node fails under it Slurm ends it NODE_FAIL, and rackscale (which
owns the queue) requeues it wherever its scheduler places it next. ``health`` reads ``sinfo -N`` (at most every
``health_interval_s``, and at once after a poll saw a NODE_FAIL) into :class:`NodeHealth` (docs/backends.md).
rackscale orders the queue and submits a job only when its nodes are free, pinned with ``--nodelist``, so
Slurm's own priority never decides anything; the priority is passed on (``--priority``) only for what Slurm
shows, and dropped once Slurm refuses it. With ``slurm_root`` the tools run in a chroot
(:meth:`Slurm.in_root`) and every path handed to them is the path inside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shlex
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from rackscale.backends.base import Exit, RunningJobRecord
from rackscale.backends.health import NodeHealth
from rackscale.model.errors import RackscaleError
from rackscale.model.placement import Placement
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobKind, JobSpec, Level
from rackscale.slurm.commands import Slurm, SlurmError, SlurmJob

log = logging.getLogger("rackscale.backends.slurm")

PREFIX = "rs-"
LOST = "lost: Slurm no longer knows the job and no exit was recorded"
DEFAULT_SLEEP_S = 60
# A file name is at most 255 bytes (NAME_MAX), and a job name up to 253 (``NAME_RULE``): the files of a job
# whose name is longer than this are named by its first characters and a digest of the whole name, so that
# ``.<stem>.id.tmp`` (8 more) still fits. Names are ASCII: characters are bytes.
MAX_STEM = 240


class SlurmBackendError(RackscaleError, ValueError):
    """The slurm backend cannot be set up (no Slurm, bad options, a cluster that does not match Slurm)."""


def service_tag(data_dir: Path) -> str:
    """What ``--comment`` carries: tells this service's jobs from others' on a shared Slurm."""
    return "rackscale:" + hashlib.sha1(str(data_dir.resolve()).encode()).hexdigest()[:12]


# How often the backend re-reads the nodes' health when no job ended NODE_FAIL: not every poll, since a
# `sinfo -N` of a few hundred nodes takes a busy controller seconds (one of 72 emulated nodes on this 2-core
# host timed out at 15 s and stalled the runner's step, in `slurm compare --engine block`), and Slurm itself
# notices a node that stops answering only after SlurmdTimeout (300 s by default).
HEALTH_INTERVAL_S = 10.0


def file_stem(job: str) -> str:
    """What the job's files are named after: the name itself, or for a name past :data:`MAX_STEM` its first
    characters and 12 hex digits of its SHA-256 (names differing after them get different files)."""
    if len(job) <= MAX_STEM:
        return job
    return f"{job[: MAX_STEM - 13]}-{hashlib.sha256(job.encode()).hexdigest()[:12]}"


def exit_of(job: str, sj: SlurmJob) -> Exit:
    if sj.state == "COMPLETED" and (sj.exit_code or 0) == 0:
        return Exit(job, ok=True, exit_code=0)
    code = sj.exit_code
    if sj.signal:
        code = code or 128 + sj.signal
    reason = f"slurm job {sj.id} {sj.state}" + (f" ({sj.reason})" if sj.reason and sj.reason != "None" else "")
    if code is not None and sj.state in ("FAILED", "COMPLETED"):
        reason += f", exit code {code}"
    return Exit(job, ok=False, exit_code=code, reason=reason)


def slurm_priority(priority: int) -> int:
    """rackscale's priority (int32, e.g. high-priority = 1,000,000; negative for low) as a Slurm priority
    (positive; 0 would hold the job): shifted by 1,000,001 so the order is kept for priorities down to
    -1,000,000, the ones below all map to 1."""
    return max(1, min(priority, 2_000_000_000) + 1_000_001)


class SlurmBackend:
    name = "slurm"

    def __init__(
        self,
        slurm: Slurm,
        cluster: GPUCluster,
        data_dir: Path,
        *,
        partition: str | None = None,
        poll_interval_s: float = 1.0,
        health_interval_s: float = HEALTH_INTERVAL_S,
        blocks: bool = False,
    ) -> None:
        self.slurm = slurm
        # Slurm runs topology/block: it refuses a --nodelist that spreads a job fitting one block (``admit``).
        self.blocks = blocks
        self._block_gpus = max((r.gpus for r in cluster.racks), default=0)
        self.cluster = cluster
        self.dir = data_dir / "slurm"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.tag = service_tag(data_dir)
        self.partition = partition
        self.poll_interval_s = poll_interval_s
        self.health_interval_s = health_interval_s
        self._jobs: dict[str, str] = {}  # rackscale job -> Slurm job id
        self._pending: list[Exit] = []
        self._reported: list[str] = []
        self._cancelled: set[str] = set()  # Slurm ids we scancelled (never adopted again)
        self._last_poll: float | None = None
        self.pass_priority = True  # off once Slurm refuses --priority (only operators may set it)
        self._health: list[NodeHealth] = []  # the last sinfo read (``health``)
        self._health_at: float | None = None
        self._node_failed = False  # a poll saw a NODE_FAIL: read the nodes' health now, not at the interval
        self._uid: int | None = None  # the user sbatch submits as (``_our_jobs``)

    # ------------------------------------------------------------------ files
    def id_path(self, job: str) -> Path:
        return self.dir / f"{file_stem(job)}.id"

    def out_path(self, job: str) -> Path:
        return self.dir / f"{file_stem(job)}.out"

    def script_path(self, job: str) -> Path:
        return self.dir / f"{file_stem(job)}.sh"

    def _read_id(self, job: str) -> str | None:
        try:
            text = self.id_path(job).read_text().strip()
        except OSError:
            return None
        return text if text.isdigit() else None

    def _write_id(self, job: str, job_id: str) -> None:
        tmp = self.dir / f".{file_stem(job)}.id.tmp"
        tmp.write_text(job_id + "\n")
        os.replace(tmp, self.id_path(job))

    def _forget(self, job: str) -> None:
        self._jobs.pop(job, None)
        with contextlib.suppress(FileNotFoundError):
            self.id_path(job).unlink()

    # ------------------------------------------------------------------ submission
    def sbatch_args(self, spec: JobSpec, placement: Placement) -> list[str]:
        names = [self.cluster.nodes[a.node].name for a in placement.allocs]
        per_node = [len(a.gpus) for a in placement.allocs]
        args = [
            f"--job-name={PREFIX}{spec.name}",
            f"--nodelist={','.join(names)}",
            f"--nodes={len(names)}",
            f"--comment={self.tag}",
            f"--output={self.slurm.path(self.out_path(spec.name))}",
            f"--chdir={self.slurm.path(self.dir)}",
            "--no-requeue",  # a node failure ends it (NODE_FAIL); rackscale requeues it where it places it next
        ]
        if any(per_node):
            if len(set(per_node)) == 1:
                args.append(f"--gres=gpu:{per_node[0]}")
            else:  # uneven slices: Slurm's per-node gres cannot say it; ask for the total on these nodes
                args.append(f"--gpus={sum(per_node)}")
        units = max(1, placement.units)
        if units % len(names) == 0:
            args.append(f"--ntasks-per-node={units // len(names)}")
        else:
            args.append(f"--ntasks={max(units, len(names))}")
        if self.partition:
            args.append(f"--partition={self.partition}")
        if self.pass_priority:
            args.append(f"--priority={slurm_priority(spec.priority)}")
        script = self.script_path(spec.name)
        argv = list(spec.command) or ["sleep", str(int(spec.duration_estimate_s or DEFAULT_SLEEP_S))]
        # Names are checked by the spec (shell identifiers); values are quoted. Never a name that is not one.
        env = [f"export {k}={shlex.quote(v)}" for k, v in spec.env if k.isidentifier() and k.isascii()]
        lines = ["#!/bin/sh", *env, f"exec {shlex.join(argv)}"]
        script.write_text("\n".join(lines) + "\n")
        return [*args, self.slurm.path(script)]

    def _our_jobs(self) -> dict[str, SlurmJob]:
        """The jobs of the user this service submits as: another user's job is never adopted, reported or
        cancelled as ours, whatever its name or comment says (``Slurm.jobs``)."""
        if self._uid is None:
            self._uid = self.slurm.user_id()
        return self.slurm.jobs(uid=self._uid)

    def _live_by_name(self, job: str, jobs: Mapping[str, SlurmJob]) -> list[SlurmJob]:
        return sorted(
            (
                j
                for j in jobs.values()
                if j.name == PREFIX + job and j.comment == self.tag and j.id not in self._cancelled
            ),
            key=lambda j: int(j.id),
        )

    def start(self, spec: JobSpec, placement: Placement, *, now: float) -> None:
        job = spec.name
        try:
            jobs = self._our_jobs()
            live = [j for j in self._live_by_name(job, jobs) if not j.terminal]
            if live:  # submitted before a crash: adopt it, never submit twice
                log.warning("job %s already in Slurm as %s: adopting it", job, live[-1].id)
                self._jobs[job] = live[-1].id
                self._write_id(job, live[-1].id)
                return
            try:
                job_id = self.slurm.sbatch(self.sbatch_args(spec, placement))
            except SlurmError as e:
                if not self.pass_priority or "priorit" not in str(e).lower():
                    raise
                # Setting a job's priority is for Slurm operators: go on without it (the job is pinned to its
                # nodes anyway, so Slurm's priority never decides between rackscale's jobs).
                log.warning("Slurm refused --priority (%s); submitting without it from now on", e)
                self.pass_priority = False
                job_id = self.slurm.sbatch(self.sbatch_args(spec, placement))
        except (SlurmError, OSError) as e:
            landed = self._landed_anyway(job) if "timed out" in str(e) else None
            if landed is None:
                self._pending.append(Exit(job, ok=False, reason=f"sbatch failed: {e}{self._split_hint(placement, e)}"))
                return
            log.warning("sbatch of %s timed out but Slurm has it as %s: adopting it", job, landed)
            job_id = landed
        self._jobs[job] = job_id
        try:
            self._write_id(job, job_id)
        except OSError as e:  # Slurm runs it: keep tracking it (a restart finds it by name, ``adopt``)
            log.warning("cannot write the id file of %s (slurm job %s): %s", job, job_id, e)

    def _landed_anyway(self, job: str) -> str | None:
        """After an sbatch that timed out (a busy controller may have queued the job all the same): the id of
        the live job it made, if any, so that it is tracked and never submitted twice."""
        try:
            live = [j for j in self._live_by_name(job, self._our_jobs()) if not j.terminal]
        except SlurmError:
            return None
        return live[-1].id if live else None

    def _split_hint(self, placement: Placement, e: Exception) -> str:
        """Slurm 24.11's topology/block refuses a ``--nodelist`` that spreads a job which fits in one block
        over several ("Requested node configuration is not available", and ``--segment`` cannot go with a
        node list): say so when that is what happened (docs/slurm.md)."""
        racks = {self.cluster.nodes[a.node].rack for a in placement.allocs}
        if len(racks) < 2 or "not available" not in str(e):
            return ""
        return (
            f" (the placement spans {len(racks)} racks: a Slurm with topology/block refuses that for a job that "
            "fits in one block; ask for topology required: rack)"
        )

    def stop(self, job: str, *, now: float) -> None:
        self._pending = [e for e in self._pending if e.job != job]
        job_id = self._jobs.get(job) or self._read_id(job)
        if job_id is not None:
            self._cancelled.add(job_id)
            try:
                self.slurm.scancel([job_id])
            except SlurmError as e:
                log.warning("scancel %s (%s) failed: %s", job_id, job, e)
        self._forget(job)

    def warn(self, job: str, *, now: float, grace_s: float) -> None:
        """A drain's stop signal at its start: ``scancel --signal=TERM --full`` (scancel(1),
        https://slurm.schedmd.com/scancel.html: by default a signal other than SIGKILL is not sent to the batch
        step, the script itself; ``--batch`` signals the script but not its children, ``--full`` both); the
        job goes on until the runner's ``stop`` at the drain's deadline (a plain scancel). A failed signal is
        logged."""
        job_id = self._jobs.get(job) or self._read_id(job)
        if job_id is None:
            return
        try:
            self.slurm.run(["scancel", "--signal=TERM", "--full", job_id])
        except SlurmError as e:
            log.warning("scancel --signal=TERM %s (%s) failed: %s", job_id, job, e)

    # ------------------------------------------------------------------ tracking
    def poll(self, now: float) -> list[Exit]:
        for job in self._reported:  # committed by the runner: the id files can go
            if job not in self._jobs:
                self._forget(job)
        self._reported = []
        out, self._pending = self._pending, []
        due = self._last_poll is None or now - self._last_poll >= self.poll_interval_s or now < self._last_poll
        if not self._jobs or not due:
            return out
        self._last_poll = now
        try:
            jobs = self._our_jobs()
        except SlurmError as e:
            log.warning("cannot read Slurm's jobs: %s", e)
            return out
        for job, job_id in list(self._jobs.items()):
            sj = jobs.get(job_id)
            if sj is None:
                out.append(Exit(job, ok=False, reason=f"{LOST} (slurm job {job_id})"))
            elif sj.terminal:
                out.append(exit_of(job, sj))
                self._node_failed |= sj.state == "NODE_FAIL"
            else:
                continue
            del self._jobs[job]
            self._reported.append(job)
        return out

    def health(self, now: float) -> list[NodeHealth]:
        """The nodes Slurm does not call healthy (``sinfo -N``), re-read at most every ``health_interval_s``
        unless a poll saw a job end NODE_FAIL (its node is down in this read: the runner requeues the job
        before the failed exit reaches it). A failed read raises (the runner counts it, the host keeps what it
        knew)."""
        every = self.health_interval_s
        due = self._health_at is None or now - self._health_at >= every or now < self._health_at
        if due or self._node_failed:
            self._health = self.slurm.node_health()
            self._health_at, self._node_failed = now, False
        return list(self._health)

    def adopt(self, running: Mapping[str, RunningJobRecord], now: float) -> list[Exit]:
        try:
            jobs = self._our_jobs()
        except SlurmError as e:
            raise SlurmBackendError(f"cannot read Slurm's jobs to adopt them: {e}") from e
        # A replica that led before and leads again (docs/high-availability.md) adopts from the id files and
        # Slurm, as a new process does: what it watched and the failed sbatches it had not reported are
        # forgotten first (kept, a job that ended while it stood by was reported twice, a failed sbatch too,
        # and a job the store no longer calls running was neither cancelled as a stray nor stopped being
        # watched). The ids it cancelled stay cancelled.
        self._jobs.clear()
        self._pending.clear()
        exits: list[Exit] = []
        for job, rec in running.items():
            job_id = self._read_id(job)
            sj = jobs.get(job_id) if job_id is not None else None
            if sj is None:
                named = self._live_by_name(job, jobs)
                sj = named[-1] if named else None
            if sj is None and job_id is None:  # committed but never submitted: start it now
                self.start(rec.spec, rec.placement, now=now)
                continue
            if sj is None:
                exits.append(Exit(job, ok=False, reason=f"{LOST} (slurm job {job_id})"))
                self._reported.append(job)
            elif sj.terminal:
                exits.append(exit_of(job, sj))
                self._reported.append(job)
            else:
                self._jobs[job] = sj.id
                self._write_id(job, sj.id)
        strays = [
            j.id for j in jobs.values() if j.comment == self.tag and not j.terminal and j.id not in self._jobs.values()
        ]
        if strays:
            log.warning("cancelling Slurm jobs %s: this service does not know them as running", strays)
            self._cancelled.update(strays)
            self.slurm.scancel(strays)
        return exits

    def close(self) -> None:
        self._jobs.clear()
        self._pending.clear()

    def admit(self, spec: JobSpec) -> JobSpec:
        """Under topology/block a gang that fits in one block must stay in one: Slurm refuses any other
        placement of it at ``sbatch`` (seen on 24.11.5: docs/slurm.md). Such a gang gets ``topology.required:
        rack`` (a rack is a base block); the scheduler then waits for a rack instead of splitting it."""
        whole = spec.unit.gpus > 0 and spec.kind is not JobKind.INFERENCE
        if not self.blocks or not whole or spec.topology.required is not None or spec.total_gpus > self._block_gpus:
            return spec
        return replace(spec, topology=replace(spec.topology, required=Level.RACK))

    def orphans(self) -> list[str]:
        """Before ``adopt``: the jobs in Slurm that carry this service's tag and have not ended."""
        try:
            jobs = self._our_jobs()
        except SlurmError as e:
            log.warning("cannot read Slurm's jobs to look for this service's: %s", e)
            return []
        return sorted(j.name.removeprefix(PREFIX) for j in jobs.values() if j.comment == self.tag and not j.terminal)


def make_slurm_backend(
    data_dir: Path, cluster: GPUCluster | None, options: Mapping[str, object]
) -> tuple[SlurmBackend, GPUCluster]:
    """The service's factory. Options: ``slurm_conf`` (path, else $SLURM_CONF / Slurm's default),
    ``slurm_root`` (a folder: Slurm's tools run there through ``chroot``, e.g. the Slurm 24.11 root of
    :mod:`rackscale.slurm.block`; ``slurm_conf`` is then the path inside it, and ``data_dir`` must be inside
    it too), ``partition``, ``poll_interval_s`` (default 1), ``health_interval_s`` (default 10), ``gpu_model``
    (for the imported cluster)."""
    from rackscale.slurm.importer import import_cluster

    conf = options.get("slurm_conf")
    root = options.get("slurm_root")
    if root is not None and not isinstance(root, str | os.PathLike):
        raise SlurmBackendError(f"slurm_root must be a path (got {root!r})")
    if root is not None and not Path(root).is_dir():
        raise SlurmBackendError(f"slurm_root {root}: no such folder")
    partition = options.get("partition")
    interval = options.get("poll_interval_s", 1.0)
    health_every = options.get("health_interval_s", HEALTH_INTERVAL_S)
    model = options.get("gpu_model")
    if conf is not None and not isinstance(conf, str | os.PathLike):
        raise SlurmBackendError(f"slurm_conf must be a path (got {conf!r})")
    if conf is not None and not (Path(root) / str(conf).lstrip("/") if root is not None else Path(conf)).is_file():
        raise SlurmBackendError(f"--slurm-conf {conf}: no such file" + (f" in {root}" if root is not None else ""))
    if partition is not None and not isinstance(partition, str):
        raise SlurmBackendError(f"partition must be a string (got {partition!r})")
    if not isinstance(interval, int | float) or isinstance(interval, bool) or interval < 0:
        raise SlurmBackendError(f"poll_interval_s must be a number >= 0 (got {interval!r})")
    if not isinstance(health_every, int | float) or isinstance(health_every, bool) or health_every < 0:
        raise SlurmBackendError(f"health_interval_s must be a number >= 0 (got {health_every!r})")
    slurm = Slurm(Path(conf) if conf is not None else None)
    if root is not None:
        slurm = Slurm.in_root(Path(root), Path(conf) if conf is not None else None)
        try:
            slurm.path(data_dir)
        except SlurmError as e:
            raise SlurmBackendError(f"the data dir must be inside slurm_root: {e}") from e
    try:
        live = import_cluster(slurm, gpu_model=model if isinstance(model, str) else None)
    except (SlurmError, ValueError) as e:
        raise SlurmBackendError(f"cannot read the Slurm cluster: {e}") from e
    if cluster is not None:
        known = {n.name for n in live.nodes}
        missing = [n.name for n in cluster.nodes if n.name not in known]
        if missing:
            raise SlurmBackendError(
                f"the cluster given names {len(missing)} node(s) Slurm does not know (e.g. {missing[0]!r}); "
                "leave out --cluster to import Slurm's nodes"
            )
    else:
        cluster = live
    try:
        blocks = any("BlockName" in sw for sw in slurm.topology())
    except SlurmError as e:
        raise SlurmBackendError(f"cannot read Slurm's topology: {e}") from e
    backend = SlurmBackend(
        slurm,
        cluster,
        data_dir,
        partition=partition,
        poll_interval_s=float(interval),
        health_interval_s=float(health_every),
        blocks=blocks,
    )
    return backend, cluster
