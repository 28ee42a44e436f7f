"""The document shapes of cluster and job specs, as pydantic models (camelCase keys, unknown keys refused).

These models check only what one field can check on its own: types, ranges, enumerations. Rules that span
fields live in :mod:`rackscale.model.specs`, which turns a validated document into model values.
Defaults here are documented in ``docs/specs.md``; keep the two in step.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

from rackscale.model.spec_errors import SpecInvalid
from rackscale.model.text import CommandWord, EnvValue, LabelKey, LabelValue, LongText, Name, Plain
from rackscale.model.workload import LLM_MODELS, LLM_PRECISIONS

SEED_GPUS_PER_NODE = 4
SEED_NODES_PER_RACK = 18  # an NVL72 rack: 18 compute trays of 4 GPUs
RICH_RACKS_PER_REGION = 4
RICH_GPU_TYPE = "GB200"
MAX_UNITS = 1 << 20  # far above any real job; stops typos without limiting real use
MAX_MEMORY_MIB = 1 << 40
MAX_GPUS_PER_NODE = 64  # a cluster spec's gpusPerNode (and the emulated Slurm's --node-gpus)
MAX_NODES_PER_RACK = 1024  # a cluster spec's nodesPerRack (and the emulated Slurm's --rack-nodes)


class _Doc(BaseModel):
    # strict: `gpus: yes` or `gpus: "8"` is a mistake, not 1 or 8 (nested mappings are still accepted).
    # allow_inf_nan=False: a NaN bandwidth or price would poison every later computation silently.
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, strict=True, allow_inf_nan=False, frozen=True)


def _toggle(value: object) -> object:
    """``enabled``/``disabled`` as in the seed resource; YAML booleans also accepted."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("enabled", "disabled", "true", "false"):
        return value.strip().lower() in ("enabled", "true")
    raise SpecInvalid("must be enabled or disabled", "write `enabled` or `disabled`")


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(Ki|Mi|Gi|Ti)?\s*$")
_MIB_PER = {"Ki": Decimal(1) / 1024, "Mi": Decimal(1), "Gi": Decimal(1024), "Ti": Decimal(1024**2)}


def _memory(value: object) -> object:
    """``512Mi``, ``2048Gi``, ``1.5Ti`` or a whole number of MiB -> MiB (rounded up: never under-ask)."""
    if value is None:
        return None
    hint = "write e.g. memory: 64Gi (Ki, Mi, Gi, Ti are powers of 1024; a bare number means MiB)"
    if isinstance(value, int) and not isinstance(value, bool):
        mib = value
    elif isinstance(value, str) and (m := _SIZE.match(value)):
        mib = math.ceil(Decimal(m[1]) * _MIB_PER[m[2] or "Mi"])
    else:
        raise SpecInvalid("must be a size like 512Mi, 64Gi or 1Ti, or a whole number of MiB", hint)
    if not 0 <= mib <= MAX_MEMORY_MIB:
        raise SpecInvalid(f"must be between 0 and {MAX_MEMORY_MIB} MiB (1 EiB)", hint)
    return mib


Toggle = Annotated[bool, BeforeValidator(_toggle)]
Memory = Annotated[int | None, BeforeValidator(_memory)]
Count = Annotated[int, Field(ge=1, le=MAX_UNITS)]
NonEmpty = Plain  # short printable text (rackscale.model.text says what every kind of string may hold)
# An environment variable's name: what a shell accepts (a backend may write it into a batch script).
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=256)]
MAX_ARGV = 4096  # words in a command
MAX_ENV = 1024  # entries in env


class MetadataDoc(_Doc):
    name: NonEmpty = Field(examples=["my-cluster"])
    # Accepted so that Kubernetes manifests load unchanged; not used by rackscale.
    labels: dict[LabelKey, LabelValue] | None = Field(None, max_length=256)
    annotations: dict[LabelKey, LongText] | None = Field(None, max_length=256)


class JobMetadataDoc(MetadataDoc):
    name: Name = Field(examples=["train-1"])  # a job's name is stricter


# ------------------------------------------------------------------------------- clusters: seed form
class SeedSpecDoc(_Doc):
    gpu_type: NonEmpty = Field(examples=["A100"])
    gpu_count: int = Field(ge=1, examples=[72])
    nvlink: Toggle = True
    rdma: Toggle = True
    gpus_per_node: int = Field(SEED_GPUS_PER_NODE, ge=1, le=MAX_GPUS_PER_NODE)
    nodes_per_rack: int | None = Field(None, ge=1, le=MAX_NODES_PER_RACK)  # None: 18, or 1 with nvlink disabled
    price_per_gpu_hour: float | None = Field(None, ge=0)


class SeedClusterDoc(_Doc):
    api_version: Literal["nvidia.com/v1"] = Field(examples=["nvidia.com/v1"])
    kind: Literal["GpuCluster"]
    metadata: MetadataDoc
    spec: SeedSpecDoc


# ------------------------------------------------------------------------------- clusters: rich form
class LevelDoc(_Doc):
    name: NonEmpty = Field(examples=["rack"])
    label_key: NonEmpty = Field(examples=["nvidia.com/gpu.clique"])


class ClusterTopologyDoc(_Doc):
    levels: list[LevelDoc] | None = Field(
        None, min_length=3, max_length=3, description="give exactly 3 levels (region, rack, node), coarsest first"
    )


class NodeDoc(_Doc):
    cpu: float = Field(144.0, gt=0, le=1e6, examples=[144])  # cores
    memory_gib: float = Field(1024.0, gt=0, le=1e9, alias="memoryGiB", examples=[1024])

    @property
    def cpu_milli(self) -> int:
        return round(self.cpu * 1000)

    @property
    def memory_mib(self) -> int:
        return round(self.memory_gib * 1024)


class TierDoc(_Doc):
    bandwidth_gbps: float | None = Field(None, gt=0, examples=[400])  # None: the tier's default
    latency_us: float | None = Field(None, ge=0, examples=[5])


class TiersDoc(_Doc):
    nvlink: TierDoc | None = None
    rdma: TierDoc | None = None
    backbone: TierDoc | None = None


class PricingDoc(_Doc):
    per_gpu_hour: float = Field(20.0, ge=0, examples=[20])
    currency: NonEmpty = "CNY"


class PoolDoc(_Doc):
    name: NonEmpty = Field(examples=["h100"])
    gpu_type: NonEmpty = Field(examples=["H100"])
    region: NonEmpty = "region-0"
    racks: int = Field(ge=1, le=100_000, examples=[2])
    nodes_per_rack: int = Field(SEED_NODES_PER_RACK, ge=1, le=MAX_NODES_PER_RACK)
    gpus_per_node: int = Field(SEED_GPUS_PER_NODE, ge=1, le=MAX_GPUS_PER_NODE)
    node: NodeDoc = Field(default_factory=NodeDoc)


class ClusterSpecDoc(_Doc):
    topology: ClusterTopologyDoc | None = None
    # Uniform form (all None: 1 region x 4 racks x 18 nodes x 4 GB200 GPUs) ...
    regions: int | None = Field(None, ge=1, le=1024)
    racks_per_region: int | None = Field(None, ge=1, le=100_000)
    nodes_per_rack: int | None = Field(None, ge=1, le=MAX_NODES_PER_RACK)
    gpus_per_node: int | None = Field(None, ge=1, le=MAX_GPUS_PER_NODE)
    gpu_type: NonEmpty | None = None
    node: NodeDoc | None = None
    # ... or heterogeneous pools, one GPU model each.
    pools: list[PoolDoc] | None = Field(None, min_length=1, description="list at least one pool, or remove pools")
    tiers: TiersDoc | None = None
    spines_per_region: int = Field(4, ge=1, le=1024)
    uplinks_per_rack: int | None = Field(None, ge=1, le=1_000_000)
    pricing: PricingDoc | None = None
    # Compute speed per GPU model, relative to the jobs' own estimates (unlisted models: 1.0).
    gpu_speed: dict[NonEmpty, float] | None = Field(None, examples=[{"H100": 1.0, "GB200": 2.5}])


class ClusterDoc(_Doc):
    api_version: Literal["rackscale.io/v1"] = Field(examples=["rackscale.io/v1"])
    kind: Literal["Cluster"]
    metadata: MetadataDoc
    spec: ClusterSpecDoc = Field(examples=["{regions: 1, racksPerRegion: 4}"])


# ------------------------------------------------------------------------------- jobs
LevelName = Literal["rack", "region"]


class JobTopologyDoc(_Doc):
    required: LevelName | None = None  # absent keys take the job kind's default, see specs._DEFAULT_TOPOLOGY
    preferred: LevelName | None = None


class SpreadDoc(_Doc):
    """``spread:`` on an inference job: how far its replicas spread for availability (docs/placement.md)."""

    racks: int = Field(2, ge=1, le=MAX_UNITS, examples=[2])  # at most a rack per replica (checked in specs)


MAX_QUERY = 4096  # a PromQL expression; longer is a mistake (or an attack), not a query


class AutoscaleDoc(_Doc):
    """``autoscale:`` on an inference job: the live load signal (docs/specs.md, Autoscaling)."""

    query: CommandWord | None = Field(
        None, max_length=MAX_QUERY, examples=["sum(rate(vllm:generation_tokens_total[1m]))"]
    )
    metric: Literal["tokens_per_second", "requests_per_second", "latency_seconds"] = "tokens_per_second"
    target: float | None = Field(None, gt=0, le=1e12, examples=[2000])
    fallback: Literal["hold", "model"] = "hold"


class CommDoc(_Doc):
    bytes_per_step: float = Field(0.0, ge=0)
    compute_seconds_per_step: float = Field(1.0, gt=0)
    collective: Literal["ring", "hierarchical"] = "ring"


def _one_of(names: tuple[str, ...], what: str) -> Callable[[object], object]:
    """A validator for a name out of ``names``, case-insensitive; the fix lists them (and the nearest)."""

    def check(value: object) -> object:
        if isinstance(value, str) and (key := value.strip().lower()) in names:
            return key
        near = difflib.get_close_matches(value.strip().lower(), names, 1) if isinstance(value, str) else []
        hint = f"did you mean {near[0]!r}? " if near else ""
        message = f"unknown {what}" if isinstance(value, str) else f"must be a string naming a {what}"
        raise SpecInvalid(message, f"{hint}use one of: {', '.join(names)}")

    return check


LlmModelName = Annotated[str, BeforeValidator(_one_of(LLM_MODELS, "built-in model"))]
LlmPrecision = Annotated[str, BeforeValidator(_one_of(LLM_PRECISIONS, "precision"))]
MAX_PARALLEL = 4096  # ways of one parallel dimension (a TP/PP/DP/EP degree)
MAX_TOKENS = 1 << 20  # a sequence, prompt or output length: a million tokens
Degree = Annotated[int, Field(ge=1, le=MAX_PARALLEL)]
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]


class LlmDoc(_Doc):
    """``llm:`` on a training or inference job: the model it runs and how (docs/specs.md, LLM jobs)."""

    model: LlmModelName = Field(examples=["llama-3.1-70b"])
    precision: LlmPrecision = "bf16"
    tp: Degree | None = None
    pp: Degree | None = None
    dp: Degree | None = None
    ep: Degree | None = None
    seq_len: Tokens = 4096
    global_batch: int | None = Field(None, ge=1, le=1 << 24, examples=[1024])
    isl: Tokens = 1024
    osl: Tokens = 1024
    interactivity_slo: float | None = Field(None, gt=0, le=1e6, examples=[50])  # tokens/s per user
    ttft_slo_seconds: float | None = Field(None, gt=0, le=1e6, examples=[2])
    mtp: bool = False


class JobBodyDoc(_Doc):
    kind: Literal["training", "inference", "batch"] = Field(examples=["training"])
    # Sizing; which fields a kind accepts is checked in specs._SIZING.
    gpus: int | None = Field(None, ge=0, le=MAX_UNITS, examples=[8])
    gpus_per_worker: Count | None = None
    # An elastic training gang: the fewest and the most GPUs it may run on (multiples of gpusPerWorker).
    min_gpus: Count | None = None
    max_gpus: Count | None = None
    replicas: Count | None = None
    gpus_per_replica: int | None = Field(None, ge=0, le=MAX_UNITS)
    min_replicas: Count | None = None
    max_replicas: Count | None = None
    tasks: Count | None = None
    gpu_milli: int | None = Field(None, ge=1, le=999, examples=[500])
    # Per unit (worker, replica or task).
    cpu: float | None = Field(None, ge=0, le=1e6)
    cpu_milli: int | None = Field(None, ge=0, le=10**9)
    memory: Memory = None
    gpu_models: list[NonEmpty] | None = Field(
        None, min_length=1, description="list at least one model, or remove gpuModels to accept any"
    )
    # Scheduling.
    priority: int | None = Field(None, ge=-(2**31), le=2**31 - 1)
    priority_class_name: NonEmpty | None = None
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"
    preemptible: bool = True
    queue: Name = "default"
    topology: JobTopologyDoc | None = None
    spread: SpreadDoc | None = Field(None, examples=["{racks: 2}"])  # inference only
    autoscale: AutoscaleDoc | None = Field(None, examples=["{query: 'sum(rate(x[1m]))', target: 2000}"])  # inference
    comm: CommDoc | None = None
    llm: LlmDoc | None = None
    checkpoint_interval_seconds: float | None = Field(None, gt=0)
    # The job saves its state when it is told to stop (SIGTERM): a preemption loses (nearly) no work.
    checkpoint_on_preempt: bool = False
    duration_estimate_seconds: float | None = Field(None, gt=0)
    submit_time: float = Field(0.0, ge=0)
    # What the `local` backend runs: an argv list (never a shell line), and extra environment variables.
    command: list[CommandWord] | None = Field(
        None, min_length=1, max_length=MAX_ARGV, examples=[["python", "train.py", "--epochs", "3"]]
    )
    env: dict[EnvName, EnvValue] | None = Field(None, max_length=MAX_ENV, examples=[{"NCCL_DEBUG": "INFO"}])


class FlatJobDoc(JobBodyDoc):
    name: Name = Field(examples=["train-1"])


class K8sJobDoc(_Doc):
    api_version: Literal["rackscale.io/v1"] = Field(examples=["rackscale.io/v1"])
    kind: Literal["Job"]
    metadata: JobMetadataDoc
    spec: JobBodyDoc
