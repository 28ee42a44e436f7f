"""The sweep's table: an append-only JSONL file (the source of truth), its CSV/Parquet exports, and the
statistics over seeds (``rackscale.sim.stats``, shared with ``bench simulate``).

Statistics (docs/sweep.md): per group of cells that differ only by ``seed``, the mean of each KPI and the
half-width of its 95 % confidence interval, ``t(0.975, n-1) * s / sqrt(n)`` (Student t, sample standard
deviation). A comparison against the baseline policy is *paired by seed*: for each seed the relative
difference ``(x - baseline) / baseline`` of the two cells that differ only by policy, then the mean of
those differences and the same t interval around it.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from rackscale.sim.stats import estimate


class ResultsWriter:
    """Appends one JSON line per finished cell, flushed and fsynced at once: a crash loses nothing done."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._f = path.open("a", encoding="utf-8")
        if _torn(path):  # a crash mid-line: end that line, or the next record would be glued to it and lost
            self._f.write("\n")
            self._f.flush()

    def append(self, record: Mapping[str, Any]) -> None:
        self._f.write(json.dumps(record, sort_keys=True, ensure_ascii=True, default=str) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _torn(path: Path) -> bool:
    """Whether ``path`` ends inside a line (its last byte is not a newline)."""
    with path.open("rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return False
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


def read_results(path: Path) -> dict[str, dict[str, Any]]:
    """The latest record of each cell key. A torn last line (a crash while writing it) is ignored: that
    cell was not done."""
    out: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return out
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("key"), str):
                out[rec["key"]] = rec
    return out


def flat_rows(records: Iterable[Mapping[str, Any]], kpis: Iterable[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """One flat row per cell (options, then the KPIs), and the column order."""
    recs = list(records)
    option_cols = sorted({k for r in recs for k in r.get("options", {})})
    kpi_cols = list(dict.fromkeys(kpis))
    cols = ["key", "status", *option_cols, *kpi_cols, "error", "attempts", "elapsed_s"]
    rows = []
    for r in recs:
        row: dict[str, Any] = {"key": r["key"], "status": r.get("status"), "error": r.get("error")}
        row.update(attempts=r.get("attempts"), elapsed_s=r.get("elapsed_s"))
        for k in option_cols:
            v = r.get("options", {}).get(k)
            row[k] = json.dumps(v) if isinstance(v, list | dict) else v
        for k in kpi_cols:
            row[k] = (r.get("kpis") or {}).get(k)
        rows.append(row)
    return cols, rows


def write_csv(records: Iterable[Mapping[str, Any]], path: Path, kpis: Iterable[str]) -> None:
    cols, rows = flat_rows(records, kpis)
    tmp = path.with_name(path.name + ".part")
    with tmp.open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def write_parquet(records: Iterable[Mapping[str, Any]], path: Path, kpis: Iterable[str]) -> bool:
    """The same table as Parquet when pyarrow is installed (the ``sweep`` extra); False when it is not."""
    try:
        import pyarrow as pa  # type: ignore[import-not-found, import-untyped, unused-ignore]
        import pyarrow.parquet as pq  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        return False
    cols, rows = flat_rows(records, kpis)
    arrays = {}
    for c in cols:
        values = [r[c] for r in rows]
        try:
            arrays[c] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types in one column: keep them as text
            arrays[c] = pa.array([None if v is None else str(v) for v in values], type=pa.string())
    tmp = path.with_name(path.name + ".part")
    pq.write_table(pa.table(arrays), tmp)
    os.replace(tmp, path)
    return True


def _group(options: Mapping[str, Any], drop: tuple[str, ...]) -> str:
    return json.dumps({k: v for k, v in options.items() if k not in drop}, sort_keys=True)


def aggregate(records: Iterable[Mapping[str, Any]], kpis: Iterable[str]) -> list[dict[str, Any]]:
    """Per group of ``ok`` cells that differ only by seed: n and, per KPI, mean and 95 % CI half-width."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        if r.get("status") == "ok":
            groups.setdefault(_group(r["options"], ("seed",)), []).append(r)
    out = []
    for g, recs in groups.items():
        row: dict[str, Any] = {"options": json.loads(g), "seeds": sorted(r["options"].get("seed", 0) for r in recs)}
        for k in kpis:
            e = estimate(v for r in recs if isinstance(v := (r.get("kpis") or {}).get(k), int | float))
            row[k] = None if e is None else {"n": e.n, "mean": e.mean, "ci95": e.ci95}
        out.append(row)
    return out


def compare(records: Iterable[Mapping[str, Any]], *, baseline: str, kpis: Iterable[str]) -> list[dict[str, Any]]:
    """Each policy vs ``baseline`` per KPI, paired by seed within each group of the other options: the
    mean relative difference (per cent) and its 95 % CI."""
    cells: dict[tuple[str, str, int], Mapping[str, Any]] = {}
    for r in records:
        if r.get("status") == "ok":
            o = r["options"]
            cells[(_group(o, ("seed", "policy")), o.get("policy", "rackscale"), int(o.get("seed", 0)))] = r
    out = []
    for group, policy, _seed in sorted({(g, p, 0) for g, p, _ in cells}):
        if policy == baseline:
            continue
        for k in kpis:
            diffs = []
            for (g, p, seed), r in cells.items():
                b = cells.get((g, baseline, seed))
                if g != group or p != policy or b is None:
                    continue
                x, y = (r.get("kpis") or {}).get(k), (b.get("kpis") or {}).get(k)
                if isinstance(x, int | float) and isinstance(y, int | float) and y != 0:
                    diffs.append(100.0 * (x - y) / abs(y))
            e = estimate(diffs)
            if e is None:
                continue
            ci = "" if e.ci95 is None else f" ± {e.ci95:.1f} %"
            text = f"{policy} vs {baseline}: {k} {e.mean:+.1f} %{ci} ({e.n} paired seed{'s' if e.n != 1 else ''})"
            out.append({"options": json.loads(group), "policy": policy, "baseline": baseline, "kpi": k,
                        "n": e.n, "mean_pct": e.mean, "ci95_pct": e.ci95, "text": text})  # fmt: skip
    return out
