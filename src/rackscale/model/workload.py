"""The workload model: what a job asks for, as immutable values.

A job is made of *units* placed on nodes: the workers of a training gang, the replicas of an inference
service, the tasks of a batch job. Each unit asks for :class:`Resources` on one node (or, for a unit larger
than a node, a tensor-parallel group spread over nodes of one rack).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from rackscale.model.topology import MILLI_PER_GPU

# The seed's PriorityClass. Further classes can be registered per scheduler profile.
BUILTIN_PRIORITY_CLASSES: dict[str, int] = {
    "high-priority": 1_000_000,
    "default": 0,
    "low-priority": -1000,
}


class JobKind(StrEnum):
    TRAINING = "training"
    INFERENCE = "inference"
    BATCH = "batch"


class PreemptionPolicy(StrEnum):
    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
    NEVER = "Never"


class Level(StrEnum):
    """A topology level a constraint can name (the roles of :data:`rackscale.model.topology.LEVEL_ROLES`)."""

    RACK = "rack"
    REGION = "region"


@dataclass(frozen=True, slots=True)
class Resources:
    """What one unit asks for on a node.

    ``gpus`` whole GPUs, or (with ``gpus == 0``) ``gpu_milli`` thousandths of one shared GPU.
    ``gpu_models`` limits the unit to those models (``None``: any).
    """

    gpus: int = 1
    gpu_milli: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_models: frozenset[str] | None = None
    # The hash, computed once: the scheduler keys per-cycle caches on a job's resources.
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        key = (self.gpus, self.gpu_milli, self.cpu_milli, self.memory_mib, self.gpu_models)
        object.__setattr__(self, "_hash", hash(key))

    def __hash__(self) -> int:
        return self._hash

    @property
    def is_fractional(self) -> bool:
        return self.gpus == 0 and self.gpu_milli > 0

    @property
    def gpu_demand_milli(self) -> int:
        """GPU demand in milli-GPU (1000 per whole GPU)."""
        return self.gpus * MILLI_PER_GPU if self.gpus else self.gpu_milli


@dataclass(frozen=True, slots=True)
class TopologyConstraint:
    """``required``: never violated. ``preferred``: relaxed only when it cannot be met now."""

    required: Level | None = None
    preferred: Level | None = Level.RACK


@dataclass(frozen=True, slots=True)
class CommProfile:
    """Per training step (or per inference token batch): bytes all-reduced and compute seconds."""

    bytes_per_step: float = 0.0
    compute_s_per_step: float = 1.0
    collective: str = "ring"  # "ring" or "hierarchical"


@dataclass(frozen=True, slots=True)
class ServingProfile:
    """An inference service's load: a daily curve of requested tokens per second, and its SLO.

    Demand at hour ``h`` of the day: ``peak * (trough + (1 - trough) * (1 + cos(2*pi*(h - peak_hour)/24)) / 2)``.
    The autoscaler keeps replicas near ``target_utilisation`` of their capacity.
    """

    peak_tokens_per_s: float = 4000.0
    trough_fraction: float = 0.3
    peak_hour: float = 14.0
    tokens_per_request: float = 256.0
    slo_p99_s: float = 2.0
    target_utilisation: float = 0.6


class LoadMetric(StrEnum):
    """What an autoscaled service's load query returns (``autoscale.metric``)."""

    TOKENS_PER_SECOND = "tokens_per_second"  # the service's total; ``target`` is per replica
    REQUESTS_PER_SECOND = "requests_per_second"  # the service's total; ``target`` is per replica
    LATENCY_SECONDS = "latency_seconds"  # e.g. a p99; ``target`` is the latency to keep

    @property
    def is_rate(self) -> bool:
        return self is not LoadMetric.LATENCY_SECONDS


class ScaleFallback(StrEnum):
    """What the live autoscaler does while a service's query has no answer (``autoscale.fallback``)."""

    HOLD = "hold"  # keep the replicas it has (the Kubernetes HPA's way when a metric cannot be read)
    MODEL = "model"  # follow the service's own model (its ServingProfile curve) until the query answers


@dataclass(frozen=True, slots=True, kw_only=True)
class AutoscaleSpec:
    """``autoscale:`` on an inference job (docs/specs.md): the live load signal its replicas follow.

    ``query`` is PromQL read through Prometheus's HTTP API; ``None``: the service's own model drives it.
    """

    query: str | None = None
    metric: LoadMetric = LoadMetric.TOKENS_PER_SECOND
    target: float | None = None  # required with a query
    fallback: ScaleFallback = ScaleFallback.HOLD


# The built-in models of ``rackscale.llm.models.BUILTIN_MODELS`` and the precisions of
# ``rackscale.llm.precision.Precision``, by name. The model layer may not import ``rackscale.llm`` (it sits
# above), yet a spec must be refused at parse time with the field named, so the names are kept here too;
# ``tests/model/test_specs_llm.py`` keeps both lists equal to the catalogue's.
LLM_MODELS: tuple[str, ...] = (
    "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "deepseek-v3", "deepseek-r1", "mixtral-8x7b", "gpt3-175b",
)  # fmt: skip
LLM_MOE_MODELS: frozenset[str] = frozenset({"deepseek-v3", "deepseek-r1", "mixtral-8x7b"})  # expert parallel fits
LLM_PRECISIONS: tuple[str, ...] = ("bf16", "fp8", "fp4")


@dataclass(frozen=True, slots=True, kw_only=True)
class LlmWork:
    """An LLM a training or inference job runs, and how: the simulator times it with ``rackscale.llm``.

    Plain values (names, not catalogue objects): ``rackscale.llm.jobs`` resolves them. A parallel degree
    left ``None`` is chosen by rackscale (the fastest plan that fits HBM on the job's GPUs).

    - training: ``seq_len`` tokens per sequence, ``global_batch`` sequences per optimizer step (``None``:
      about 4M tokens, rounded to the data-parallel degree);
    - serving: ``isl``/``osl`` input and output tokens per request; ``interactivity_slo`` the tokens/s
      each user must see (the batch is the largest that meets it), ``ttft_slo_s`` the time-to-first-token
      target; ``mtp`` decodes with multi-token prediction (DeepSeek's MTP module).
    """

    model: str
    precision: str = "bf16"
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    ep: int | None = None
    seq_len: int = 4096
    global_batch: int | None = None
    isl: int = 1024
    osl: int = 1024
    interactivity_slo: float | None = None
    ttft_slo_s: float | None = None
    mtp: bool = False


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job as submitted. Keyword-only; build with :func:`training`, :func:`inference`, :func:`batch`."""

    name: str
    kind: JobKind
    unit: Resources
    units: int  # workers (training), replicas (inference), tasks (batch)
    # Inference: min replicas, and max replicas for the autoscaler. Training: an elastic gang's smallest and
    # largest worker counts (``minGpus``/``maxGpus``; the scheduler may shrink or grow it between them).
    # 0 means ``units`` (a fixed size, all or none).
    min_units: int = 0
    max_units: int = 0
    priority: int = 0
    preemption_policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    preemptible: bool = True
    # Consolidation may stop it to start it again elsewhere (``consolidate.py``). False where a stop loses the
    # job for good: a Kubernetes pod that no controller recreates (``kube.snapshot``).
    movable: bool = True
    queue: str = "default"
    topology: TopologyConstraint = field(default_factory=TopologyConstraint)
    comm: CommProfile = field(default_factory=CommProfile)
    checkpoint_interval_s: float | None = None
    # Saves its state on the stop signal (``checkpointOnPreempt``): a preemption costs only the save.
    checkpoint_on_preempt: bool = False
    duration_estimate_s: float | None = None
    submit_time: float = 0.0
    serving: ServingProfile | None = None  # inference only: load curve and SLO (defaults if None)
    command: tuple[str, ...] = ()  # what the `local` backend runs (argv, no shell)
    env: tuple[tuple[str, str], ...] = ()  # extra environment variables for the command
    llm: LlmWork | None = None  # training/inference: the model it runs; None = the CommProfile's generic step
    # Inference: the racks the replicas spread over, when they can (``spread.racks``; 2 survives one rack's
    # loss, 1 spreads over nodes only); further replicas pack into those racks (docs/placement.md).
    spread_racks: int = 2
    # Inference: the live autoscaler's load signal (``autoscale``); None: its model, when it has bounds.
    autoscale: AutoscaleSpec | None = None

    @property
    def total_gpus(self) -> int:
        """Whole GPUs the job needs (fractional units count 0 here; see ``gpu_demand_milli``)."""
        return self.unit.gpus * self.units

    @property
    def gpu_demand_milli(self) -> int:
        return self.unit.gpu_demand_milli * self.units

    @property
    def timed_by_llm(self) -> bool:
        """The LLM performance model times it (a training or inference job with ``llm``; batch jobs never)."""
        return self.llm is not None and self.kind is not JobKind.BATCH

    @property
    def required_units(self) -> int:
        return self.min_units or self.units

    @property
    def is_elastic(self) -> bool:
        """A training gang that may run on any worker count from ``min_units`` to ``max_units``, in steps of
        :attr:`resize_step`. A job that names its model resizes only once its model shard is fixed (``llm``'s
        ``tp`` and ``pp`` given, ``dp`` not: only the data-parallel degree changes); the host fixes them at
        admission from the plan chosen for the size asked (``llm.jobs.elastic_llm``)."""
        if self.kind is not JobKind.TRAINING or not ((0 < self.min_units < self.units) or self.max_units > self.units):
            return False
        llm = self.llm
        return llm is None or (llm.tp is not None and llm.pp is not None and llm.dp is None)

    @property
    def resize_step(self) -> int:
        """Workers an elastic gang grows or shrinks by: 1, or for an LLM gang one data-parallel rank of its
        model (``tp x pp x ep`` GPUs, in whole workers)."""
        llm = self.llm
        if llm is None or self.kind is not JobKind.TRAINING or llm.tp is None or llm.pp is None:
            return 1
        g = max(self.unit.gpus, 1)
        return math.lcm(llm.tp * llm.pp * (llm.ep or 1), g) // g

    @property
    def elastic_max_units(self) -> int:
        return max(self.max_units, self.units)

    @property
    def is_gang(self) -> bool:
        """Training and batch are all-or-nothing; inference can start with ``min_units`` replicas."""
        return self.kind is not JobKind.INFERENCE


def training(
    name: str,
    gpus: int,
    *,
    gpus_per_worker: int = 1,
    cpu_milli: int = 0,
    memory_mib: int = 0,
    gpu_models: frozenset[str] | None = None,
    topology: TopologyConstraint | None = None,
    min_gpus: int = 0,
    max_gpus: int = 0,
    **kw: object,
) -> JobSpec:
    """A training gang of ``gpus`` GPUs in workers of ``gpus_per_worker`` (all or none). ``min_gpus`` /
    ``max_gpus`` (0: ``gpus``) make it elastic: it may run on any multiple of ``gpus_per_worker`` between them."""
    for what, n in (("gpus", gpus), ("min_gpus", min_gpus), ("max_gpus", max_gpus)):
        if n % gpus_per_worker:
            raise ValueError(f"{what} ({n}) must be a multiple of gpus_per_worker ({gpus_per_worker})")
    if min_gpus > gpus or (max_gpus and max_gpus < gpus):
        raise ValueError(f"need min_gpus ({min_gpus}) <= gpus ({gpus}) <= max_gpus ({max_gpus})")
    return JobSpec(
        name=name,
        kind=JobKind.TRAINING,
        unit=Resources(gpus=gpus_per_worker, cpu_milli=cpu_milli, memory_mib=memory_mib, gpu_models=gpu_models),
        units=gpus // gpus_per_worker,
        min_units=min_gpus // gpus_per_worker,
        max_units=max_gpus // gpus_per_worker,
        topology=topology or TopologyConstraint(),
        **kw,  # type: ignore[arg-type]
    )


def inference(
    name: str,
    replicas: int,
    *,
    gpus_per_replica: int = 1,
    gpu_milli: int = 0,
    min_replicas: int = 0,
    max_replicas: int = 0,
    cpu_milli: int = 0,
    memory_mib: int = 0,
    gpu_models: frozenset[str] | None = None,
    spread_racks: int = 2,
    **kw: object,
) -> JobSpec:
    """An inference service: ``replicas`` units, each in one rack, spread over nodes and over ``spread_racks``
    racks (then packed into those)."""
    if spread_racks < 1:
        raise ValueError(f"spread_racks ({spread_racks}) must be at least 1 (1: spread over nodes only)")
    unit = Resources(
        gpus=0 if gpu_milli else gpus_per_replica,
        gpu_milli=gpu_milli,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        gpu_models=gpu_models,
    )
    return JobSpec(
        name=name,
        kind=JobKind.INFERENCE,
        unit=unit,
        units=replicas,
        min_units=min_replicas,
        max_units=max_replicas,
        topology=TopologyConstraint(required=Level.RACK, preferred=Level.RACK),
        spread_racks=spread_racks,
        **kw,  # type: ignore[arg-type]
    )


def batch(
    name: str,
    *,
    gpus: int = 1,
    gpu_milli: int = 0,
    tasks: int = 1,
    cpu_milli: int = 0,
    memory_mib: int = 0,
    gpu_models: frozenset[str] | None = None,
    **kw: object,
) -> JobSpec:
    """A batch job: ``tasks`` independent units, no communication, placed to fill fragments."""
    unit = Resources(
        gpus=0 if gpu_milli else gpus,
        gpu_milli=gpu_milli,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        gpu_models=gpu_models,
    )
    return JobSpec(
        name=name,
        kind=JobKind.BATCH,
        unit=unit,
        units=tasks,
        topology=TopologyConstraint(required=None, preferred=None),
        **kw,  # type: ignore[arg-type]
    )
