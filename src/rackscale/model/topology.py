"""The static cluster model: regions > racks (NVLink domains) > nodes > GPUs, and the link tiers.

A :class:`GPUCluster` is immutable; the live allocation lives in :class:`rackscale.model.state.ClusterState`.
Nodes, racks and regions are addressed by dense integer indexes so that the state can keep flat lists
instead of dictionaries on its hot path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

MILLI_PER_GPU = 1000

DEFAULT_REGION_LABEL = "topology.kubernetes.io/region"
DEFAULT_RACK_LABEL = "nvidia.com/gpu.clique"
DEFAULT_NODE_LABEL = "kubernetes.io/hostname"


@dataclass(frozen=True, slots=True)
class TopologyLevel:
    """One level of the hierarchy, with the node label that carries it (for Kubernetes and Slurm)."""

    name: str
    label_key: str


DEFAULT_LEVELS: tuple[TopologyLevel, ...] = (
    TopologyLevel("region", DEFAULT_REGION_LABEL),
    TopologyLevel("rack", DEFAULT_RACK_LABEL),
    TopologyLevel("node", DEFAULT_NODE_LABEL),
)
# The three roles, coarsest first. Level *names* and label keys are configurable; the roles are fixed.
LEVEL_ROLES = ("region", "rack", "node")


@dataclass(frozen=True, slots=True)
class LinkTier:
    """A class of links. Bandwidth is per link, in Gb/s; latency one way, in microseconds."""

    name: str
    bandwidth_gbps: float
    latency_us: float


# Defaults and their sources (documented in docs/model.md):
# - NVLink 5 (GB200 NVL72): 1.8 TB/s bidirectional per GPU = 7,200 Gb/s each way; ~1 us through NVSwitch.
# - RDMA between racks: the seed's 100G fabric, one NIC per GPU (rail-optimised); ~5 us switch-to-switch.
# - Backbone between regions: the seed's 200G links; tens of us over campus distances.
DEFAULT_NVLINK = LinkTier("nvlink", 7200.0, 1.0)
DEFAULT_RDMA = LinkTier("rdma", 100.0, 5.0)
DEFAULT_BACKBONE = LinkTier("backbone", 200.0, 50.0)


@dataclass(frozen=True, slots=True)
class LinkTiers:
    nvlink: LinkTier = DEFAULT_NVLINK
    rdma: LinkTier = DEFAULT_RDMA
    backbone: LinkTier = DEFAULT_BACKBONE


@dataclass(frozen=True, slots=True)
class Pricing:
    """Price of one GPU-hour. The seed reasons in CNY (元)."""

    per_gpu_hour: float = 20.0
    currency: str = "CNY"


@dataclass(frozen=True, slots=True)
class Node:
    index: int
    name: str
    rack: int
    region: int
    gpus: int
    gpu_model: str
    cpu_milli: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class Rack:
    """An NVLink domain. All its nodes carry one GPU model (as a physical NVL72 rack does)."""

    index: int
    name: str
    region: int
    nodes: tuple[int, ...]
    gpus: int
    gpu_model: str
    gpus_per_node: int
    uplinks: int  # RDMA links from this rack to the spine layer


@dataclass(frozen=True, slots=True)
class Region:
    index: int
    name: str
    racks: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class NodeDecl:
    """A node as declared by a spec or a trace, before indexes are assigned."""

    name: str
    rack: str
    region: str
    gpus: int
    gpu_model: str
    cpu_milli: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class GPUCluster:
    """The GPU pool: an immutable description of the hardware and its links."""

    name: str
    regions: tuple[Region, ...]
    racks: tuple[Rack, ...]
    nodes: tuple[Node, ...]
    levels: tuple[TopologyLevel, ...] = DEFAULT_LEVELS
    tiers: LinkTiers = field(default_factory=LinkTiers)
    pricing: Pricing = field(default_factory=Pricing)
    spines_per_region: int = 4
    gpu_models: tuple[str, ...] = ()
    # Compute speed of each GPU model relative to the job's own estimate (1.0 = as estimated; e.g. 2.0
    # runs compute twice as fast). Models not listed run at 1.0.
    gpu_speed: tuple[tuple[str, float], ...] = ()
    # Derived once (read on every simulated instant): the total and the largest rack.
    total_gpus: int = field(init=False, default=0)
    max_rack_gpus: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total_gpus", sum(r.gpus for r in self.racks))
        object.__setattr__(self, "max_rack_gpus", max((r.gpus for r in self.racks), default=0))

    # ------------------------------------------------------------------ builders
    @classmethod
    def uniform(
        cls,
        *,
        name: str = "nvl72",
        regions: int = 1,
        racks_per_region: int = 4,
        nodes_per_rack: int = 18,
        gpus_per_node: int = 4,
        gpu_model: str = "GB200",
        cpu_milli: int = 144_000,
        memory_mib: int = 1_048_576,
        tiers: LinkTiers | None = None,
        pricing: Pricing | None = None,
        levels: tuple[TopologyLevel, ...] = DEFAULT_LEVELS,
        spines_per_region: int = 4,
        uplinks_per_rack: int | None = None,
        total_gpus: int | None = None,
        gpu_speed: Mapping[str, float] | None = None,
    ) -> GPUCluster:
        """A homogeneous cluster; ``total_gpus`` truncates the last rack (the seed's ``gpuCount``)."""
        decls: list[NodeDecl] = []
        per_rack = nodes_per_rack * gpus_per_node
        remaining = total_gpus if total_gpus is not None else regions * racks_per_region * per_rack
        for g in range(regions):
            for r in range(racks_per_region):
                for n in range(nodes_per_rack):
                    if remaining <= 0:
                        break
                    decls.append(
                        NodeDecl(
                            name=f"g{g}-r{r:03d}-n{n:02d}" if regions > 1 else f"r{r:03d}-n{n:02d}",
                            rack=f"g{g}-r{r:03d}" if regions > 1 else f"r{r:03d}",
                            region=f"region-{g}",
                            gpus=gpus_per_node,
                            gpu_model=gpu_model,
                            cpu_milli=cpu_milli,
                            memory_mib=memory_mib,
                        )
                    )
                    remaining -= gpus_per_node
        return cls.from_nodes(
            decls,
            name=name,
            tiers=tiers,
            pricing=pricing,
            levels=levels,
            spines_per_region=spines_per_region,
            uplinks_per_rack=uplinks_per_rack,
            gpu_speed=gpu_speed,
        )

    @classmethod
    def from_nodes(
        cls,
        decls: Iterable[NodeDecl],
        *,
        name: str,
        tiers: LinkTiers | None = None,
        pricing: Pricing | None = None,
        levels: tuple[TopologyLevel, ...] = DEFAULT_LEVELS,
        spines_per_region: int = 4,
        uplinks_per_rack: int | None = None,
        gpu_speed: Mapping[str, float] | None = None,
    ) -> GPUCluster:
        """Index declared nodes. Raises ``ValueError`` naming the rack if a rack mixes GPU models.

        ``uplinks_per_rack`` defaults to one RDMA link per GPU in the rack (rail-optimised fabric).
        """
        region_ix: dict[str, int] = {}
        rack_ix: dict[str, int] = {}
        rack_region: list[int] = []
        rack_nodes: list[list[int]] = []
        rack_model: list[str] = []
        nodes: list[Node] = []
        seen: set[str] = set()
        for d in decls:
            if d.name in seen:
                raise ValueError(f"node {d.name!r} is declared twice; node names must be unique")
            seen.add(d.name)
            g = region_ix.setdefault(d.region, len(region_ix))
            if d.rack not in rack_ix:
                rack_ix[d.rack] = len(rack_ix)
                rack_region.append(g)
                rack_nodes.append([])
                rack_model.append(d.gpu_model)
            r = rack_ix[d.rack]
            if rack_region[r] != g:
                raise ValueError(f"rack {d.rack!r} appears in two regions; a rack belongs to one region")
            if d.gpus > 0 and rack_model[r] != d.gpu_model:
                raise ValueError(
                    f"rack {d.rack!r} mixes GPU models {rack_model[r]!r} and {d.gpu_model!r}; "
                    "an NVLink domain holds one GPU model: put the nodes in separate racks"
                )
            rack_nodes[r].append(len(nodes))
            nodes.append(Node(len(nodes), d.name, r, g, d.gpus, d.gpu_model, d.cpu_milli, d.memory_mib))
        if not nodes:
            raise ValueError("a cluster needs at least one node")
        racks = []
        for name_, r in rack_ix.items():
            members = tuple(rack_nodes[r])
            gpus = sum(nodes[n].gpus for n in members)
            gpn = max(nodes[n].gpus for n in members)
            racks.append(
                Rack(
                    index=r,
                    name=name_,
                    region=rack_region[r],
                    nodes=members,
                    gpus=gpus,
                    gpu_model=rack_model[r],
                    gpus_per_node=gpn,
                    uplinks=uplinks_per_rack if uplinks_per_rack is not None else max(1, gpus),
                )
            )
        regions = tuple(
            Region(g, name_, tuple(r.index for r in racks if r.region == g)) for name_, g in region_ix.items()
        )
        models = tuple(sorted({n.gpu_model for n in nodes if n.gpus > 0}))  # CPU-only nodes add no model
        return cls(
            name=name,
            regions=regions,
            racks=tuple(racks),
            nodes=tuple(nodes),
            levels=levels,
            tiers=tiers or LinkTiers(),
            pricing=pricing or Pricing(),
            spines_per_region=spines_per_region,
            gpu_models=models,
            gpu_speed=tuple(sorted((gpu_speed or {}).items())),
        )

    # ------------------------------------------------------------------ queries
    def speed_of(self, model: str) -> float:
        for m, v in self.gpu_speed:
            if m == model:
                return v
        return 1.0

    def level(self, role: str) -> TopologyLevel:
        """The level playing ``role`` (``region``, ``rack`` or ``node``)."""
        return self.levels[LEVEL_ROLES.index(role)]

    def node_labels(self, node: int) -> dict[str, str]:
        """The node's labels under the configured keys (what a Kubernetes node would carry)."""
        n = self.nodes[node]
        return {
            self.levels[0].label_key: self.regions[n.region].name,
            self.levels[1].label_key: self.racks[n.rack].name,
            self.levels[2].label_key: n.name,
        }

    def racks_of(self, nodes: Sequence[int]) -> set[int]:
        return {self.nodes[n].rack for n in nodes}
