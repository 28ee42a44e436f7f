"""``nvidia-smi topo --matrix`` -> devices, links, NVLink islands and GPU-NIC affinity.

The matrix (nvidia-smi's own legend): ``X`` self; ``NV#`` a bonded set of # NVLinks; ``PIX`` at most one
PCIe bridge; ``PXB`` several bridges, no host bridge; ``PHB`` through a PCIe host bridge; ``NODE`` between
host bridges inside a NUMA node; ``SYS`` across the SMP interconnect (QPI/UPI). NIC columns are named
``NIC#`` with a "NIC Legend:" that maps them to RDMA devices (``NIC0: mlx5_0``), or directly ``mlx5_0`` in
older drivers. An NVLink island is a connected component of the NV# links; a GPU's NIC affinity is the
NIC(s) at its closest PCIe distance, PIX < PXB < PHB < NODE < SYS.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from rackscale.model.errors import RackscaleError


class TopoError(RackscaleError, ValueError):
    """The text is not a topology matrix; the message names the line and what is wrong."""


class Link(StrEnum):
    SELF = "X"
    NVLINK = "NV"
    PIX = "PIX"
    PXB = "PXB"
    PHB = "PHB"
    NODE = "NODE"
    SYS = "SYS"


PCIE_RANK = {Link.PIX: 0, Link.PXB: 1, Link.PHB: 2, Link.NODE: 3, Link.SYS: 4}
_NV = re.compile(r"^NV(\d+)$")
_GPU = re.compile(r"^GPU\d+$")
_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_TRAILERS = ("CPU", "NUMA", "GPU NUMA")  # the first words of the non-device columns of the header
MAX_DEVICES = 512


@dataclass(frozen=True, slots=True)
class Cell:
    link: Link
    nvlinks: int = 0  # the # of NV#


@dataclass(frozen=True, slots=True, kw_only=True)
class Topology:
    gpus: tuple[str, ...]
    nics: tuple[str, ...]  # RDMA device names (the legend applied): ("mlx5_0", ...)
    cells: dict[tuple[str, str], Cell]  # (row, column) -> the link; device names as in ``gpus``/``nics``

    def link(self, a: str, b: str) -> Cell:
        return self.cells[(a, b)]

    @property
    def nvlink(self) -> bool:
        """Some GPU pair is joined by NVLink."""
        return any(c.link is Link.NVLINK for c in self.cells.values())


def _cell(token: str, where: str) -> Cell:
    t = token.strip()
    if t == "X":
        return Cell(Link.SELF)
    m = _NV.match(t)
    if m:
        return Cell(Link.NVLINK, int(m.group(1)))
    try:
        return Cell(Link(t))
    except ValueError:
        raise TopoError(f"{where}: unknown link {t!r} (expected X, NV#, PIX, PXB, PHB, NODE or SYS)") from None


def _header(lines: list[str]) -> tuple[int, list[str]]:
    for i, line in enumerate(lines):
        words = line.split()
        if words and words[0] == "GPU0":
            cols: list[str] = []
            for w in words:
                if w in _TRAILERS or w.startswith("CPU") or w.startswith("NUMA"):
                    break
                cols.append(w)
            return i, cols
    raise TopoError("no header line starting with GPU0: is this `nvidia-smi topo --matrix` output?")


def parse_topo(text: str) -> Topology:
    """Parse the matrix. Tabs or spaces, with or without the trailing affinity columns and legends."""
    lines = text.replace("\r", "").splitlines()
    at, cols = _header(lines)
    if len(cols) > MAX_DEVICES:
        raise TopoError(f"header: {len(cols)} devices, more than {MAX_DEVICES}")
    if len(set(cols)) != len(cols):
        raise TopoError(f"line {at + 1}: a device name repeats in the header")
    legend = {m.group(1): m.group(2) for line in lines if (m := _LEGEND.match(line))}
    name = {c: legend.get(c, c) for c in cols}
    cells: dict[tuple[str, str], Cell] = {}
    rows: set[str] = set()
    for n, line in enumerate(lines[at + 1 :], start=at + 2):
        words = line.split()
        if not words or words[0] not in name:
            continue
        row = words[0]
        vals = words[1 : 1 + len(cols)]
        if len(vals) < len(cols):
            raise TopoError(f"line {n}: row {row} has {len(vals)} cells, the header names {len(cols)} devices")
        for col, tok in zip(cols, vals, strict=True):
            cells[(name[row], name[col])] = _cell(tok, f"line {n}, {row} x {col}")
        rows.add(row)
    gpus = tuple(c for c in cols if _GPU.match(c))
    missing = [g for g in gpus if g not in rows]
    if missing:
        raise TopoError(f"no row for {', '.join(missing)}")
    if not gpus:
        raise TopoError("the header names no GPU")
    nics = tuple(name[c] for c in cols if not _GPU.match(c))
    return Topology(gpus=gpus, nics=nics, cells=cells)


def islands(topo: Topology) -> list[tuple[str, ...]]:
    """The NVLink islands: GPUs joined by NV# links, directly or through other GPUs; largest first, then by
    the first GPU's number. A PCIe-only host has one island per GPU."""
    parent = {g: g for g in topo.gpus}

    def find(g: str) -> str:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    for a in topo.gpus:
        for b in topo.gpus:
            if a != b and topo.cells.get((a, b), Cell(Link.SYS)).link is Link.NVLINK:
                parent[find(a)] = find(b)
    groups: dict[str, list[str]] = {}
    for g in topo.gpus:
        groups.setdefault(find(g), []).append(g)
    out = [tuple(v) for v in groups.values()]
    return sorted(out, key=lambda t: (-len(t), topo.gpus.index(t[0])))


@dataclass(frozen=True, slots=True, kw_only=True)
class Affinity:
    gpu: str
    nics: tuple[str, ...]  # the closest NIC(s); () when the host has none
    link: Link | None  # their distance


def affinity(topo: Topology) -> list[Affinity]:
    """Each GPU's closest NIC(s) by PCIe distance (the rail a GPU should use for GPUDirect RDMA)."""
    out: list[Affinity] = []
    for g in topo.gpus:
        best: list[str] = []
        best_link: Link | None = None
        for nic in topo.nics:
            cell = topo.cells.get((g, nic))
            if cell is None or cell.link not in PCIE_RANK:
                continue
            if best_link is None or PCIE_RANK[cell.link] < PCIE_RANK[best_link]:
                best, best_link = [nic], cell.link
            elif cell.link is best_link:
                best.append(nic)
        out.append(Affinity(gpu=g, nics=tuple(best), link=best_link))
    return out


def describe_islands(groups: Iterable[tuple[str, ...]]) -> str:
    return " | ".join("+".join(g.removeprefix("GPU") for g in grp) for grp in groups)
