"""The HTML report: one self-contained, escaped document with a chart per view, from real simulations."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rackscale.model import CommProfile, GPUCluster, batch, training
from rackscale.sim.report import render_report, write_report
from rackscale.sim.simulator import SimConfig, SimResult, Simulator

EVIL = '<script>alert("x")</script>'
POLICIES = ("rackscale", "random")


@pytest.fixture(scope="module")
def cluster() -> GPUCluster:
    return GPUCluster.uniform(name=f"lab {EVIL}", racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)


@pytest.fixture(scope="module")
def results(cluster: GPUCluster) -> list[SimResult]:
    comm = CommProfile(bytes_per_step=1e9, compute_s_per_step=0.5)
    jobs = [
        training(
            f"train-{i}", 8 if i % 3 == 0 else 4, comm=comm, duration_estimate_s=1800.0 + 600 * i, submit_time=300.0 * i
        )
        for i in range(6)
    ]
    jobs.append(batch(f"batch {EVIL}", gpus=1, tasks=2, duration_estimate_s=1200.0, submit_time=100.0))
    return [Simulator(cluster, jobs, SimConfig(policy=p, sample_every_s=300.0)).run() for p in POLICIES]


@pytest.fixture(scope="module")
def page(cluster: GPUCluster, results: list[SimResult]) -> str:
    return render_report(cluster=cluster, results=results, workload=f"7 jobs & {EVIL}")


def test_simulations_complete(results: list[SimResult]) -> None:
    assert [r.policy for r in results] == list(POLICIES)
    assert all(r.kpis["completed"] == 7 for r in results)


def test_one_html_document(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<html") == 1 and page.rstrip().endswith("</html>")
    assert page.count("<body>") == 1 and page.count("</body>") == 1


def test_a_chart_per_view(page: str) -> None:
    # allocation, queue, running jobs, 3 traffic tiers, JCT CDF, one heatmap per policy
    assert page.count("<svg") == page.count("</svg>") == 7 + len(POLICIES)
    for title in ("GPU allocation", "Queue length", "NVLink", "RDMA", "backbone", "JCT CDF", "per rack"):
        assert title in page
    assert "<polyline" in page and "<rect" in page


def test_names_both_policies_and_kpis(page: str) -> None:
    for p in POLICIES:
        assert f"<th>{p}</th>" in page
        assert f"{p}: allocated share per rack" in page
    assert "idle rate" in page and "intra-rack (NVLink) traffic share" in page
    assert 'class="best"' in page  # the better value is highlighted somewhere


def test_seed_references_are_labelled(page: str) -> None:
    assert "seed reference (not a result)" in page
    for figure in ("280,000 samples/s", "0.0003 元 per token", "x15"):
        assert figure in page


def test_self_contained(page: str) -> None:
    assert "http://" not in page and "https://" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert "<link" not in page and "@import" not in page and "url(" not in page


def test_escapes_text(page: str) -> None:
    assert "<script" not in page
    assert "lab &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "7 jobs &amp; &lt;script&gt;" in page


def test_deterministic(cluster: GPUCluster, results: list[SimResult], page: str) -> None:
    assert render_report(cluster=cluster, results=results, workload=f"7 jobs & {EVIL}") == page


def test_many_racks_are_bucketed(results: list[SimResult]) -> None:
    big = GPUCluster.uniform(racks_per_region=130, nodes_per_rack=1, gpus_per_node=4)
    r = results[0]
    fake = SimResult(r.policy, r.kpis, r.jobs, r.series, [[(i % 7) / 7 for i in range(130)] for _ in r.rack_series])
    page = render_report(cluster=big, results=[fake], workload="synthetic")
    assert "each row averages 3 racks" in page
    assert page.count("…") <= 16  # row labels are thinned


def test_write_report(tmp_path: Path, cluster: GPUCluster, results: list[SimResult], page: str) -> None:
    out = tmp_path / "report.html"
    write_report(out, cluster=cluster, results=results, workload=f"7 jobs & {EVIL}")
    assert out.read_text(encoding="utf-8") == page
    write_report(str(tmp_path / "again.html"), cluster=cluster, results=results[:1], workload="one policy")
    assert "cost efficiency relative" not in (tmp_path / "again.html").read_text(encoding="utf-8")
