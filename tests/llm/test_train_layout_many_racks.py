"""``train_layout`` over many racks counts the DP groups with numpy (a million-GPU gang's plan search took
39 s in the plain loop): it must find the same slowest group as the loop on any layout."""

from __future__ import annotations

import random

import pytest

from rackscale.llm import job_plans
from rackscale.llm.job_plans import train_layout
from rackscale.llm.training import TrainPlan


def layouts(n: int) -> list[tuple[TrainPlan, tuple[int, ...]]]:
    rng = random.Random(13)
    out = []
    for _ in range(n):
        tp, pp = rng.choice((1, 2, 4, 8)), rng.choice((1, 2, 4, 16))
        racks = rng.randint(2, 40)
        counts = tuple(rng.choice((72, 72, 72, 64, 36, 17, 8, 3)) for _ in range(racks))
        dp = max(sum(counts) // (tp * pp), 1)
        out.append((TrainPlan(tp=tp, pp=pp, dp=dp), counts))
    # packed racks, as the plan search lays a gang out, with a partial last rack
    out.append((TrainPlan(tp=8, pp=16, dp=80), (72,) * 142 + (16,)))
    return out


@pytest.mark.parametrize(("plan", "counts"), layouts(120))
def test_the_vectorised_count_finds_the_loops_slowest_group(
    plan: TrainPlan, counts: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(job_plans, "_VECTOR_RACKS", 10**9)
    looped = train_layout(plan, counts, regions=2)
    monkeypatch.setattr(job_plans, "_VECTOR_RACKS", 0)
    assert train_layout(plan, counts, regions=2) == looped
