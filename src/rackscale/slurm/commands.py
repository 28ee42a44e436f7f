"""The Slurm command-line tools, run as argv lists (never a shell), and parsers for their output."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from rackscale.host.parts import NodeHealth, NodeState
from rackscale.model.errors import RackscaleError

INSTALL_HINT = "install Slurm's client tools (Debian/Ubuntu: apt-get install slurm-wlm)"
TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)
_KEY = re.compile(r" (?=[A-Za-z][\w:/.]*=)")


# sinfo's node states (sinfo(1), "NODE STATE CODES"; %T prints them in full, lower case, joined by "+" and
# followed by flag characters) and what each means for rackscale. DRAINING and FAILING nodes still run their
# jobs ("will not be allocated additional jobs"): closed, not gone. States not listed are healthy.
SINFO_STATES = {
    "down": NodeState.DOWN,
    "fail": NodeState.FAIL,
    "failing": NodeState.DRAIN,
    "drain": NodeState.DRAIN,
    "drained": NodeState.DRAIN,
    "draining": NodeState.DRAIN,
    "inval": NodeState.DOWN,  # did not register correctly: unusable
}
NOT_RESPONDING = "*"  # "presently not responding and will not be allocated any new work"
SINFO_HEALTH = ["sinfo", "-N", "-h", "-o", "%N|%T|%E"]
# What sbatch is given of the service's environment: the local backend's base (docs/security.md) and
# Slurm's own settings. sbatch hands its environment to the job (``--export=ALL``, the default, which keeps
# a job's ``srun`` steps seeing the job script's exports), so anything else there (a store's password, a
# token) would reach every tenant's job.
SBATCH_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "HOME", "USER", "LOGNAME", "SLURM_CONF")
SBATCH_ENV_PREFIX = "SBATCH_"  # sbatch's input variables: the operator's defaults (account, time limit)


def parse_sinfo_health(text: str) -> list[NodeHealth]:
    """``sinfo -N -h -o '%N|%T|%E'`` (node, extended state, reason) -> the nodes that are not healthy. A node
    in several partitions is listed once per partition: the first line is kept."""
    out: dict[str, NodeHealth] = {}
    for line in text.splitlines():
        name, _, rest = line.strip().partition("|")
        raw, _, reason = rest.partition("|")
        if not name or name in out:
            continue
        flags = raw.strip().lower()
        base = flags.rstrip("*~#!%$@^-")
        states = [SINFO_STATES[s] for s in base.split("+") if s in SINFO_STATES]
        if NOT_RESPONDING in flags[len(base) :]:
            states.append(NodeState.NOT_RESPONDING)
        if not states:
            continue
        # A node down and not responding is down: the gravest state wins (gone over closed).
        state = next((s for s in states if s.stops_jobs), states[0])
        why = reason.strip()
        out[name] = NodeHealth(node=name, state=state, reason=why if why and why != "none" else raw.strip())
    return list(out.values())


class SlurmError(RackscaleError, RuntimeError):
    """A Slurm command failed or is missing; the message says which and why."""


def parse_oneliner(line: str) -> dict[str, str]:
    """``Key=Value Key2=Value two`` (scontrol --oneliner) -> dict. A value may hold spaces and ``=``: a field
    ends where the next ``Key=`` starts."""
    out: dict[str, str] = {}
    for field in _KEY.split(line.strip()):
        key, sep, value = field.partition("=")
        if sep:
            out[key] = value.strip()
    return out


def parse_records(text: str) -> list[dict[str, str]]:
    return [parse_oneliner(line) for line in text.splitlines() if "=" in line]


@dataclass(frozen=True, slots=True)
class SlurmJob:
    id: str
    name: str
    state: str  # JobState, e.g. RUNNING, PENDING, COMPLETED (no "+" suffix)
    reason: str
    exit_code: int | None  # the first half of ExitCode=N:S
    signal: int | None
    nodes: tuple[str, ...]
    comment: str
    submit: str
    start: str
    end: str
    priority: int | None = None
    uid: int | None = None  # its owner, from squeue (:meth:`Slurm.jobs`), never from scontrol's text

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


def job_from_record(rec: Mapping[str, str]) -> SlurmJob:
    from rackscale.slurm.hostlist import expand

    code: int | None = None
    sig: int | None = None
    ec = rec.get("ExitCode", "")
    if ":" in ec:
        a, _, b = ec.partition(":")
        code = int(a) if a.isdigit() else None
        sig = int(b) if b.isdigit() else None
    nodelist = rec.get("NodeList", "")
    return SlurmJob(
        id=rec.get("JobId", ""),
        name=rec.get("JobName", ""),
        state=rec.get("JobState", "").split("+")[0],
        reason=rec.get("Reason", ""),
        exit_code=code,
        signal=sig,
        nodes=tuple(expand(nodelist)) if nodelist and nodelist != "(null)" else (),
        comment=rec.get("Comment", "(null)"),
        priority=int(rec["Priority"]) if rec.get("Priority", "").isdigit() else None,
        submit=rec.get("SubmitTime", ""),
        start=rec.get("StartTime", ""),
        end=rec.get("EndTime", ""),
    )


class Slurm:
    """Runs Slurm's tools against one cluster (``SLURM_CONF``: ``conf``, else the default).

    ``prefix`` goes before every command: ``("chroot", "/srv/slurm-root")`` drives a Slurm installed in
    another root (:func:`Slurm.in_root`; the Slurm 24.11 of :mod:`rackscale.slurm.block`), ``("ssh",
    "login1")`` one on a login node. ``root``: the host folder that the tools see as ``/``; paths handed to
    Slurm (job scripts, ``--output``, ``--chdir``) go through :meth:`path`, so they must lie inside it.
    ``conf`` is the path *as the tools see it* (the environment passes through chroot and env)."""

    def __init__(
        self,
        conf: Path | str | None = None,
        *,
        timeout_s: float = 15.0,
        prefix: Sequence[str] = (),
        root: Path | str | None = None,
    ) -> None:
        self.conf = Path(conf) if conf is not None else None
        self.timeout_s = timeout_s
        self.prefix = tuple(prefix)
        self.root = Path(root) if root is not None else None

    @classmethod
    def in_root(cls, root: Path | str, conf: Path | str | None = None, *, timeout_s: float = 15.0) -> Slurm:
        """The Slurm installed in ``root`` (a Debian root made with debootstrap), run through ``chroot``."""
        return cls(conf, timeout_s=timeout_s, prefix=("chroot", str(root)), root=root)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.conf is not None:
            env["SLURM_CONF"] = str(self.conf)
        return env

    def sbatch_env(self) -> dict[str, str]:
        """``sbatch``'s environment, which becomes the job's: :data:`SBATCH_ENV` and ``SBATCH_*`` of
        :meth:`env`, nothing else of the service's."""
        return {k: v for k, v in self.env().items() if k in SBATCH_ENV or k.startswith(SBATCH_ENV_PREFIX)}

    def path(self, host_path: Path) -> str:
        """``host_path`` as Slurm's tools and daemons see it: itself, or relative to ``root`` (then it must
        be inside it: a chrooted sbatch cannot read a script outside its root)."""
        if self.root is None:
            return str(host_path)
        root = self.root.resolve()
        try:
            return str(Path("/") / host_path.resolve().relative_to(root))
        except ValueError:
            raise SlurmError(f"{host_path} is outside {root}, the root Slurm runs in: it cannot read it") from None

    def _missing(self, tool: str) -> str | None:
        """Why ``tool`` cannot run (None: it can): checked on this host, or in ``root``."""
        if self.prefix:
            if shutil.which(self.prefix[0]) is None:
                return f"{self.prefix[0]} not found"
            if self.root is not None and not any((self.root / d / tool).exists() for d in ("usr/bin", "usr/sbin")):
                return f"{tool} not found in {self.root}: {INSTALL_HINT} there"
            return None
        return None if shutil.which(tool) is not None else f"{tool} not found: {INSTALL_HINT}"

    def run(
        self, argv: Sequence[str], *, check: bool = True, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run one tool (through :attr:`prefix`) with :meth:`env`, or ``env`` when given."""
        missing = self._missing(argv[0])
        if missing is not None:
            raise SlurmError(missing)
        try:
            proc = subprocess.run(
                [*self.prefix, *argv],
                capture_output=True,
                text=True,
                env=dict(env) if env is not None else self.env(),
                timeout=self.timeout_s,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            raise SlurmError(f"{' '.join(argv[:3])} timed out after {self.timeout_s:g}s") from e
        if check and proc.returncode != 0:
            msg = (proc.stderr or proc.stdout).strip().splitlines()
            raise SlurmError(f"{' '.join(argv[:3])} failed (exit {proc.returncode}): {msg[-1] if msg else ''}")
        return proc

    # ------------------------------------------------------------------ queries
    def nodes(self) -> list[dict[str, str]]:
        return parse_records(self.run(["scontrol", "show", "nodes", "--oneliner"]).stdout)

    def node_health(self) -> list[NodeHealth]:
        """The nodes Slurm does not call healthy (DOWN, DRAIN, FAIL, not responding), from one ``sinfo``."""
        return parse_sinfo_health(self.run(SINFO_HEALTH).stdout)

    def topology(self) -> list[dict[str, str]]:
        proc = self.run(["scontrol", "show", "topology"], check=False)
        if proc.returncode != 0:
            return []  # no topology plugin configured
        return parse_records(proc.stdout)

    def jobs(self, *, uid: int | None = None) -> dict[str, SlurmJob]:
        """Every job the controller knows (ended ones stay for MinJobAge), by job id; with ``uid``, only that
        user's.

        ``scontrol``'s text cannot be trusted whole: a job's name (and comment, paths) is its submitter's, and
        a name holding `` Comment=...`` forges fields of its own record, one holding a newline whole records
        of any id. So the ids and their owners come from :meth:`owners` (digits only): a record of an id
        squeue does not list is dropped, and an id with more than one record is read alone (``scontrol show
        job ID`` prints that job's record first)."""
        text = self.run(["scontrol", "show", "job", "--oneliner"]).stdout
        owners = self.owners()
        found: dict[str, list[dict[str, str]]] = {}
        for rec in parse_records(text):
            job_id = rec.get("JobId", "")
            if job_id in owners and (uid is None or owners[job_id] == uid):
                found.setdefault(job_id, []).append(rec)
        out: dict[str, SlurmJob] = {}
        for job_id, recs in found.items():
            job = job_from_record(recs[0]) if len(recs) == 1 else self.job(job_id)
            if job is not None and job.id == job_id:
                out[job_id] = replace(job, uid=owners[job_id])
        return out

    def owners(self) -> dict[str, int]:
        """Job id -> its owner's uid, for every job the controller knows (``squeue --states=all -o '%A
        %U'``: fields of digits only, which no submitter can forge)."""
        out = self.run(["squeue", "-h", "--all", "--states=all", "-o", "%A %U"]).stdout
        pairs = (line.split() for line in out.splitlines())
        return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[0].isdigit() and p[1].isdigit()}

    def user_id(self) -> int:
        """The uid Slurm's tools run as here (``id -u``, through the prefix): the owner of what they submit."""
        text = self.run(["id", "-u"]).stdout.strip()
        if not text.isdigit():
            raise SlurmError(f"id -u printed {text!r}, not a uid")
        return int(text)

    def job(self, job_id: str) -> SlurmJob | None:
        proc = self.run(["scontrol", "show", "job", job_id, "--oneliner"], check=False)
        recs = parse_records(proc.stdout) if proc.returncode == 0 else []
        return job_from_record(recs[0]) if recs else None

    def queue_by_name(self, name: str) -> list[tuple[str, str]]:
        """(job id, state) of the queued or running jobs called ``name`` (``squeue --name``)."""
        out = self.run(["squeue", "-h", "--name", name, "-o", "%i %T"]).stdout
        return [(a, b) for a, _, b in (line.strip().partition(" ") for line in out.splitlines()) if a]

    # ------------------------------------------------------------------ actions
    def sbatch(self, args: Sequence[str]) -> str:
        """Submit, with :meth:`sbatch_env` (the job's environment); the job id (``--parsable`` prints
        ``id[;cluster]``)."""
        out = self.run(["sbatch", "--parsable", *args], env=self.sbatch_env()).stdout.strip()
        job_id = out.split(";")[0].strip()
        if not job_id.isdigit():
            raise SlurmError(f"sbatch printed {out!r}, not a job id")
        return job_id

    def scancel(self, ids: Sequence[str]) -> None:
        if ids:
            self.run(["scancel", *ids], check=False)
