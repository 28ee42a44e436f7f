"""Reading the Alibaba ``openb`` CSVs (the only module of :mod:`rackscale.pack` that touches files)."""

from __future__ import annotations

import csv
from pathlib import Path

from rackscale.model.errors import RackscaleError
from rackscale.pack.trace import Nodes, Pods

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec")


class TraceError(RackscaleError, ValueError):
    """A trace file is missing a column or holds a value that is not a number (message names file:line)."""


def _rows(path: Path, columns: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in columns if c not in (reader.fieldnames or ())]
        if missing:
            raise TraceError(f"{path}: missing column(s) {', '.join(missing)}")
        # Line numbers count the header as line 1, as an editor shows them.
        return [(i + 2, row) for i, row in enumerate(reader)]


def _int(path: Path, line: int, row: dict[str, str], key: str) -> int:
    text = (row.get(key) or "").strip()
    try:
        return int(float(text)) if text else 0
    except ValueError:
        raise TraceError(f"{path}:{line}: column {key!r} is not a number: {text!r}") from None


def read_nodes(path: Path) -> Nodes:
    names: list[str] = []
    cpu: list[int] = []
    mem: list[int] = []
    gpus: list[int] = []
    models: list[str] = []
    for line, row in _rows(path, NODE_COLUMNS):
        names.append(row["sn"])
        cpu.append(_int(path, line, row, "cpu_milli"))
        mem.append(_int(path, line, row, "memory_mib"))
        gpus.append(_int(path, line, row, "gpu"))
        models.append((row.get("model") or "").strip())
    if not names:
        raise TraceError(f"{path}: no nodes")
    if max(gpus) <= 0:
        raise TraceError(f"{path}: no node has a GPU")
    return Nodes.build(names=names, cpu_milli=cpu, memory_mib=mem, gpus=gpus, models=models)


def read_pods(path: Path) -> Pods:
    names: list[str] = []
    cpu: list[int] = []
    mem: list[int] = []
    num_gpu: list[int] = []
    gpu_milli: list[int] = []
    spec: list[str] = []
    for line, row in _rows(path, POD_COLUMNS):
        names.append(row["name"])
        cpu.append(_int(path, line, row, "cpu_milli"))
        mem.append(_int(path, line, row, "memory_mib"))
        num_gpu.append(_int(path, line, row, "num_gpu"))
        gpu_milli.append(_int(path, line, row, "gpu_milli"))
        spec.append((row.get("gpu_spec") or "").strip())
    if not names:
        raise TraceError(f"{path}: no pods")
    return Pods.build(names=names, cpu_milli=cpu, memory_mib=mem, num_gpu=num_gpu, gpu_milli=gpu_milli, spec=spec)
