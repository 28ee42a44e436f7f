"""The topology check, the labels it implies (GFD's keys) and the cluster-spec comparison."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.preflight.builders import HostTree, gpu_host

from rackscale.kube.cluster import GPU_PRODUCT_LABEL as KUBE_PRODUCT_LABEL
from rackscale.model.topology import DEFAULT_RACK_LABEL
from rackscale.preflight.checks import CheckName, Options, Status
from rackscale.preflight.gpu import (
    CLIQUE_LABEL,
    GPU_PRODUCT_LABEL,
    fabric_clique,
    gather,
    labels,
    parse_fabric,
    topology,
)
from rackscale.preflight.spec_compare import compare, expectation

# The "Fabric" section as nvidia-smi -q prints it (layout of the recorded outputs in fixtures/README.md);
# a decoy CliqueId in another section must not be read.
FABRIC = """GPU 00000000:04:00.0
    Product Name                          : NVIDIA GB200
    Inforom Version
        CliqueId                          : 999
    Fabric
        State                             : Completed
        Status                            : Success
        CliqueId                          : {clique}
        ClusterUUID                       : {uuid}
        Health
            Bandwidth                     : N/A
    Processes                             : None
"""
UUID = "9277d399-0674-44a9-b64e-d85bb19ce2b0"


def test_rackscale_reads_its_rack_from_the_label_gfd_writes() -> None:
    assert CLIQUE_LABEL == DEFAULT_RACK_LABEL == "nvidia.com/gpu.clique"
    assert GPU_PRODUCT_LABEL == KUBE_PRODUCT_LABEL


@pytest.mark.parametrize(
    ("gpus", "want"),
    [
        ([(UUID, "32766")] * 4, f"{UUID}.32766"),
        ([("00000000-0000-0000-0000-000000000000", "0")] * 8, None),  # an HGX board: no multi-node fabric
        ([("N/A", "N/A")] * 2, None),
        ([(UUID, "1"), (UUID, "2")], None),  # two cliques on one node: GFD writes no label
    ],
    ids=["nvl-clique", "zero-uuid", "not-applicable", "non-unique"],
)
def test_fabric_clique_follows_gfd(gpus: list[tuple[str, str]], want: str | None) -> None:
    text = "".join(FABRIC.format(uuid=u, clique=c) for u, c in gpus)
    assert parse_fabric(text) == gpus
    assert fabric_clique(parse_fabric(text)) == want


def test_gb200_labels_carry_the_clique_and_the_product(tmp_path: Path) -> None:
    fabric = FABRIC.format(uuid=UUID, clique="32766") * 4
    probe = gpu_host(tmp_path, "topo_gb200_nv18.txt", name="NVIDIA GB200", fabric=fabric).probe()
    assert labels(gather(probe)) == {
        "nvidia.com/gpu.count": "4",
        "nvidia.com/gpu.product": "NVIDIA-GB200",
        "nvidia.com/gpu.clique": f"{UUID}.32766",
    }


def test_h100_without_fabric_gets_no_clique(tmp_path: Path) -> None:
    probe = gpu_host(tmp_path, "topo_h100_nv18.txt").probe()
    got = labels(gather(probe))
    assert got == {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


@pytest.mark.parametrize(
    ("fixture_name", "islands", "nic_statuses"),
    [
        ("topo_h100_nv18.txt", Status.PASS, {Status.PASS}),
        ("topo_pcie_4090.txt", Status.WARN, {Status.WARN}),
        ("topo_gb200_nv18.txt", Status.PASS, {Status.WARN}),
    ],
    ids=["h100-one-domain-rails", "pcie-only", "gb200-c2c-all-sys"],
)
def test_topology_check(tmp_path: Path, fixture_name: str, islands: Status, nic_statuses: set[Status]) -> None:
    checks = topology(gpu_host(tmp_path, fixture_name).probe(), Options())
    assert checks[0].name == "nvlink islands" and checks[0].status is islands
    assert {c.status for c in checks[1:]} == nic_statuses


@pytest.mark.parametrize(
    ("rc", "says"), [(127, "nvidia-smi not found"), (9, "exited 9")], ids=["no-nvidia-smi", "no-driver"]
)
def test_no_gpu_is_a_skip_not_a_fail(tmp_path: Path, rc: int, says: str) -> None:
    probe = HostTree(tmp_path).command("nvidia-smi topo --matrix", "", rc=rc).probe()
    (c,) = topology(probe, Options())
    assert c.status is Status.SKIP and says in c.found


def test_an_unreadable_matrix_is_a_fail_with_the_parse_error(tmp_path: Path) -> None:
    probe = HostTree(tmp_path).command("nvidia-smi topo --matrix", "\tGPU0\tGPU1\nGPU0\t X \tWAT\n").probe()
    (c,) = topology(probe, Options())
    assert c.status is Status.FAIL and "unknown link 'WAT'" in c.found


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("spec_text", "fixture_name", "product", "status", "found"),
    [
        (None, "topo_h100_nv18.txt", "NVIDIA H100 80GB HBM3", Status.FAIL, "this host has 8, NVLink"),
        (None, "topo_gb200_nv18.txt", "NVIDIA GB200", Status.PASS, "this host has 4, NVLink"),
        (
            "gpusPerNode: 8\n  nvlink: enabled",
            "topo_pcie_4090.txt",
            "NVIDIA GeForce RTX 4090",
            Status.FAIL,
            "this host has 8, PCIe only",
        ),
        (
            "gpusPerNode: 8\n  nvlink: disabled",
            "topo_pcie_4090.txt",
            "NVIDIA GeForce RTX 4090",
            Status.PASS,
            "PCIe only",
        ),
    ],
    ids=["nvl72-spec-vs-dgx-h100", "nvl72-spec-vs-gb200", "seed-nvlink-vs-pcie", "seed-pcie-vs-pcie"],
)
def test_cluster_spec_comparison(
    tmp_path: Path, spec_text: str | None, fixture_name: str, product: str, status: Status, found: str
) -> None:
    if spec_text is None:
        spec = ROOT / "examples" / "cluster-nvl72.yaml"  # 4 GB200 per node, NVLink racks
    else:
        spec = tmp_path / "seed.yaml"
        spec.write_text(
            "apiVersion: nvidia.com/v1\nkind: GpuCluster\nmetadata:\n  name: s\nspec:\n  gpuType: A100\n"
            f"  gpuCount: 16\n  {spec_text}\n"
        )
    probe = gpu_host(tmp_path / "host", fixture_name, name=product).probe()
    checks = compare(probe, expectation(spec), spec.name)
    assert checks[0].check is CheckName.spec
    assert checks[0].status is status and found in checks[0].found, checks[0]
    if spec_text is None:
        assert "spec says 4 GPUs per node with NVLink" in checks[0].required
