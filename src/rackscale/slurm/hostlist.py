"""Slurm hostlist expressions: ``node[01-04,07]`` <-> ``node01 node02 node03 node04 node07``."""

from __future__ import annotations

import re
from collections.abc import Iterable

_TAIL = re.compile(r"^(.*?)(\d+)$")


def compress(names: Iterable[str]) -> str:
    """The shortest-form hostlist of ``names`` as Slurm writes it: names that differ only in a trailing
    number of the same width share a bracket (``r000-n[00-03]``); order: first appearance of each prefix,
    numbers ascending. Duplicates are dropped."""
    groups: dict[tuple[str, int], set[int]] = {}
    order: list[tuple[str, int] | str] = []
    plain: set[str] = set()
    for name in names:
        m = _TAIL.match(name)
        if m is None:
            if name not in plain:
                plain.add(name)
                order.append(name)
            continue
        key = (m.group(1), len(m.group(2)))
        if key not in groups:
            groups[key] = set()
            order.append(key)
        groups[key].add(int(m.group(2)))
    parts: list[str] = []
    for item in order:
        if isinstance(item, str):
            parts.append(item)
            continue
        prefix, width = item
        nums = sorted(groups[item])
        if len(nums) == 1:
            parts.append(f"{prefix}{nums[0]:0{width}d}")
            continue
        ranges: list[str] = []
        start = prev = nums[0]
        for n in [*nums[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            ranges.append(f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}")
            if n is not None:
                start = prev = n
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)


def _split_top(expr: str) -> list[str]:
    out: list[str] = []
    depth = 0
    cur = ""
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [p.strip() for p in out if p.strip()]


def expand(expr: str) -> list[str]:
    """Every name of a hostlist expression, in order (``(null)`` and empty: none). Raises ValueError for a
    malformed bracket."""
    expr = expr.strip()
    if not expr or expr == "(null)":
        return []
    out: list[str] = []
    for part in _split_top(expr):
        out.extend(_expand_one(part))
    return out


def _expand_one(part: str) -> list[str]:
    lb = part.find("[")
    if lb < 0:
        return [part]
    rb = part.find("]", lb)
    if rb < 0:
        raise ValueError(f"unbalanced '[' in hostlist {part!r}")
    prefix, body, rest = part[:lb], part[lb + 1 : rb], part[rb + 1 :]
    tails = _expand_one(rest) if rest else [""]
    out: list[str] = []
    for r in body.split(","):
        lo, _, hi = r.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"bad range {r!r} in hostlist {part!r}")
        width = len(lo)
        for n in range(int(lo), int(hi or lo) + 1):
            out.extend(f"{prefix}{n:0{width}d}{t}" for t in tails)
    return out
