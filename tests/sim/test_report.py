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
    # locality, allocation, queue, running jobs, 3 traffic tiers, JCT CDF, one heatmap per policy
    assert page.count("<svg") == page.count("</svg>") == 8 + len(POLICIES)
    for title in ("Placement locality", "GPU allocation", "Queue length", "NVLink", "RDMA", "backbone", "JCT CDF"):
        assert title in page
    assert "<polyline" in page and "<rect" in page


def test_names_both_policies_and_kpis(page: str) -> None:
    for p in POLICIES:
        assert f"<th>{p}</th>" in page
        assert f"{p}: allocated share per rack" in page
    assert "idle rate" in page and "intra-rack (NVLink) traffic" in page
    assert 'class="best"' in page  # the better value is highlighted somewhere


def test_seed_references_are_labelled(page: str) -> None:
    assert "seed reference (not a result)" in page
    for figure in ("280,000 samples/s", "CNY 0.0003 per token", "x15"):
        assert figure in page


def test_money_is_written_with_its_currency_code_not_a_sign(page: str) -> None:
    # 元 renders as a box without CJK fonts: the ISO code reads everywhere
    assert "元" not in page
    assert "CNY 20.00 per GPU-hour" in page and re.search(r"CNY [\d,.]+</td>", page)


def test_placement_and_jct_come_first_and_the_load_last(page: str) -> None:
    sections = re.findall(r"<h2>([^<]+)</h2>", page)
    assert sections[:3] == ["KPIs", "Placement and locality", "Job completion times"]
    assert sections[3:] == ["Per-rack allocation", "Cluster over time"]
    order = ("<h2>Placement and locality", "Placement locality (higher", "JCT CDF", 'aria-label="GPU allocation"')
    at = [page.index(x) for x in order]
    assert at == sorted(at)


def test_the_tail_is_explained_beside_the_allocation_chart(page: str) -> None:
    figure = page[page.index('aria-label="GPU allocation"') :]
    figure = figure[: figure.index("</figure>")]
    assert '<p class="note">' in figure and "the last job ended" in figure


def test_goals_policies_and_verdict(page: str) -> None:
    assert "<th>goal</th>" in page and "&lt;= 5 %" in page
    assert re.search(r"\((met|missed|best|worse than \w+)\)</td>", page)
    assert "<b>rackscale</b>: this project" in page and "<b>random</b>: a random node" in page
    assert "<h3>Verdict</h3>" in page and "rackscale vs random: " in page
    table = page[page.index('<table class="kpi">') : page.index("</table>")]
    assert not re.search(r"\d[eE][+-]\d", table), "a value in e-notation"


def test_units_are_for_people() -> None:
    from rackscale.sim.summary import fmt_bytes, fmt_duration, fmt_kpi, fmt_money, fmt_number, fmt_pct

    assert [fmt_duration(s) for s in (0, 0.35, 42, 303, 7800, 86_400 + 20 * 3600, 429_200)] == [
        "0 s",
        "0.35 s",
        "42 s",
        "5 min 3 s",
        "2 h 10 min",
        "1 d 20 h",
        "4 d 23 h",
    ]
    assert fmt_bytes(1.2e12) == "1.2 TB" and fmt_bytes(13.2e15) == "13.2 PB" and fmt_bytes(0) == "0 B"
    assert fmt_money(1014.2, "CNY") == "CNY 1,014" and fmt_money(0.0003, "元") == "CNY 0.0003"
    assert fmt_pct(0.19) == "19.0 %" and fmt_number(0.000143) == "0.000143" and fmt_number(2965.3) == "2,965"
    assert fmt_kpi("makespan_s", None) == "n/a" and fmt_kpi("completed", 12345) == "12,345"


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
