"""The `nvidia-smi topo --matrix` parser on recorded outputs of real machines (fixtures/README.md)."""

from __future__ import annotations

import pytest
from tests.preflight.builders import fixture

from rackscale.preflight.topo import Link, TopoError, affinity, islands, parse_topo


@pytest.mark.parametrize(
    ("name", "gpus", "nics", "island_sizes", "gpu0_nics", "gpu0_link"),
    [
        ("topo_h100_nv18.txt", 8, [f"mlx5_{i}" for i in range(8)], [8], ("mlx5_0",), Link.PIX),
        ("topo_a100_nv12.txt", 8, [f"mlx5_{i}" for i in range(10)], [8], ("mlx5_0", "mlx5_1"), Link.PXB),
        (
            "topo_gb200_nv18.txt",
            4,
            [f"mlx5_{i}" for i in range(8)],
            [4],
            tuple(f"mlx5_{i}" for i in range(8)),
            Link.SYS,
        ),
        ("topo_pcie_4090.txt", 8, ["NIC0", "NIC1"], [1] * 8, ("NIC0", "NIC1"), Link.SYS),
    ],
    ids=["dgx-h100-nv18-spaces", "dgx-a100-nv12-tabs", "gb200-4gpu-grace", "8x4090-pcie-no-legend"],
)
def test_recorded_matrices_parse_into_islands_and_affinity(
    name: str, gpus: int, nics: list[str], island_sizes: list[int], gpu0_nics: tuple[str, ...], gpu0_link: Link
) -> None:
    topo = parse_topo(fixture(name))
    assert len(topo.gpus) == gpus
    assert list(topo.nics) == nics  # the NIC Legend applied where there is one
    assert [len(i) for i in islands(topo)] == island_sizes
    aff = affinity(topo)[0]
    assert (aff.nics, aff.link) == (gpu0_nics, gpu0_link)


def test_h100_rails_one_nic_per_gpu_at_pix() -> None:
    """DGX H100: GPUn shares a PCIe switch with mlx5_n (PIX), every other NIC is NODE or SYS."""
    aff = affinity(parse_topo(fixture("topo_h100_nv18.txt")))
    assert [(a.gpu, a.nics, a.link) for a in aff] == [(f"GPU{i}", (f"mlx5_{i}",), Link.PIX) for i in range(8)]


def test_a100_pairs_of_gpus_share_two_nics() -> None:
    """DGX A100 (4 NUMA pairs): GPU6/GPU7 -> mlx5_6, mlx5_7 at PXB; mlx5_8/9 (storage) are near no GPU."""
    topo = parse_topo(fixture("topo_a100_nv12.txt"))
    by_gpu = {a.gpu: a.nics for a in affinity(topo)}
    assert by_gpu["GPU7"] == ("mlx5_6", "mlx5_7")
    assert all("mlx5_8" not in v for v in by_gpu.values())
    assert topo.link("GPU0", "GPU5").nvlinks == 12


def test_pcie_host_gpu6_is_the_only_one_near_a_nic() -> None:
    aff = {a.gpu: a for a in affinity(parse_topo(fixture("topo_pcie_4090.txt")))}
    assert aff["GPU6"].link is Link.PHB
    assert {a.link for g, a in aff.items() if g != "GPU6"} == {Link.SYS}


def test_two_nvlink_islands_are_two_components() -> None:
    """Synthetic (not recorded): two NVL2 pairs joined only by PCIe::

    GPU0 ==NV4== GPU1      GPU2 ==NV4== GPU3
       \\______ SYS ______/
    """
    text = (
        "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\n"
        "GPU0\t X \tNV4\tSYS\tSYS\t0-15\n"
        "GPU1\tNV4\t X \tSYS\tSYS\t0-15\n"
        "GPU2\tSYS\tSYS\t X \tNV4\t16-31\n"
        "GPU3\tSYS\tSYS\tNV4\t X \t16-31\n"
    )
    assert islands(parse_topo(text)) == [("GPU0", "GPU1"), ("GPU2", "GPU3")]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "no header line starting with GPU0"),
        ("hello\nworld\n", "no header line"),
        ("\tGPU0\tGPU1\nGPU0\t X \tFOO\nGPU1\tFOO\t X \n", "unknown link 'FOO'"),
        ("\tGPU0\tGPU1\nGPU0\t X \nGPU1\tPIX\t X \n", "row GPU0 has 1 cells"),
        ("\tGPU0\tGPU1\nGPU0\t X \tPIX\n", "no row for GPU1"),
        ("\tGPU0\tGPU0\nGPU0\t X \tX\n", "repeats"),
    ],
    ids=["empty", "not-a-matrix", "unknown-cell", "short-row", "missing-row", "duplicate-column"],
)
def test_hostile_matrices_raise_one_line_naming_the_place(text: str, says: str) -> None:
    with pytest.raises(TopoError, match=says):
        parse_topo(text)
