"""The web dashboard at ``/``, in a real headless Chromium (Playwright, sync API) against the real service.

Chromium and Playwright are required, never skipped: without them these tests fail and say what to install.
Screenshots land in /tmp/rackscale-web.png and /tmp/rackscale-web-big.png (look at them after a change).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.service.conftest import LiveService, serve_in_thread, small_cluster, wait_for

from rackscale.model.topology import GPUCluster
from rackscale.service.app import ServiceConfig
from rackscale.service.web import STATIC_DIR

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INSTALL_HINT = (
    "the web page tests need Playwright and Chromium: pip install -e '.[dev]' (Playwright's Python package) and "
    "apt-get install chromium (Debian's browser; do not run `playwright install`). "
    "RACKSCALE_CHROMIUM=/path/to/chromium points at another binary."
)
SHOT = Path("/tmp/rackscale-web.png")
SHOT_BIG = Path("/tmp/rackscale-web-big.png")
ADMIN = "admin-token-0123456789abcdef"
TEAM_A = "team-a-token-0123456789abcdef"


def _chromium() -> str:
    path = os.environ.get("RACKSCALE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).is_file():
        pytest.fail(f"Chromium not found (looked for {path}): {INSTALL_HINT}", pytrace=False)
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        pytest.fail(f"cannot import playwright ({e}): {INSTALL_HINT}", pytrace=False)
    exe = _chromium()
    with sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        except Exception as e:  # a broken or missing browser: say how to fix it
            pytest.fail(f"cannot start Chromium at {exe} ({e}): {INSTALL_HINT}", pytrace=False)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1440, "height": 900})
    pg = ctx.new_page()
    pg.set_default_timeout(10_000)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    ctx.close()
    assert not errors, f"the page raised: {errors}"


def submit(c: httpx.Client, **doc: Any) -> dict[str, Any]:
    doc.setdefault("durationEstimateSeconds", 1e7)
    r = c.post("/v1/jobs", json=doc)
    assert r.status_code == 201, r.text
    return dict(r.json())


def running(c: httpx.Client, name: str) -> dict[str, Any]:
    def placed() -> dict[str, Any] | None:
        job = c.get(f"/v1/jobs/{name}").json()
        return dict(job) if job["status"] == "running" else None

    got = wait_for(placed, timeout=10, what=f"{name} to run")
    assert isinstance(got, dict)
    return got


def pending_with_reason(c: httpx.Client, name: str) -> dict[str, Any]:
    def waiting() -> dict[str, Any] | None:
        job = c.get(f"/v1/jobs/{name}").json()
        return dict(job) if job["status"] == "pending" and job["reason"] not in ("", "Submitted", "Queued") else None

    got = wait_for(waiting, timeout=10, what=f"{name} to wait with a reason")
    assert isinstance(got, dict)
    return got


def cells(page: Any, selector: str) -> int:
    return int(page.eval_on_selector_all(selector, "els => els.length"))


# ---------------------------------------------------------------------- the page on 2 racks
def test_the_page_shows_racks_kpis_jobs_and_a_jobs_details(service: LiveService, page: Any) -> None:
    t0 = time.monotonic()
    with service.svc.ctx.runner.reading() as lv:  # hardware trouble on r001: a down node, one failed GPU
        nodes_by_name = {n.name: n.index for n in lv.cluster.nodes}
        lv.state.fail_node(nodes_by_name["r001-n16"])
        lv.state.fail_gpu(nodes_by_name["r001-n17"], 1)
    # The URL `rackscale serve` prints: the generated token in the fragment, which the page takes and drops.
    page.goto(service.url + f"/#token={service.admin_token}")
    page.wait_for_selector("[data-kpi=idleRate] .value:text-matches('%$')")
    assert "token" not in page.url
    for key in ("idleRate", "intraRackTrafficShare", "allocationRatio", "completed", "failed"):
        assert page.inner_text(f"[data-kpi={key}] .value").strip(), key
    assert page.inner_text("[data-kpi=gpusAllocated] .value").replace(" ", "") == "0/144"
    for rack in ("r000", "r001"):
        assert cells(page, f".rack[data-rack={rack}] .gpu") == 72
    assert cells(page, ".gpu[data-job]") == 0
    failed = page.eval_on_selector_all(".gpu.failed", "els => els.map(e => e.dataset.node + '/' + e.dataset.gpu)")
    assert sorted(failed) == ["r001-n16/0", "r001-n16/1", "r001-n16/2", "r001-n16/3", "r001-n17/1"]
    assert "5 failed" in page.inner_text(".rack[data-rack=r001] .rack-stats")
    assert page.is_hidden("#aggregate")  # 2 racks: every grid at once, no aggregate

    c = service.client()
    submit(c, name="train-a", kind="training", gpus=8)
    placed = running(c, "train-a")["placement"]
    assert len(placed["racks"]) == 1
    rack = placed["racks"][0]
    nodes = {n["node"] for n in placed["nodes"]}
    # The page draws train-a on the 8 GPUs of the rack the API says, and nowhere else.
    mine = f".rack[data-rack={rack}] .gpu[data-job=train-a]"
    page.wait_for_function("sel => document.querySelectorAll(sel).length === 8", arg=mine, timeout=5000)
    assert cells(page, ".gpu[data-job=train-a]") == 8
    assert set(page.eval_on_selector_all(mine, "els => els.map(e => e.dataset.node)")) == nodes
    free_bg, job_bg = page.evaluate(
        "() => [getComputedStyle(document.querySelector('.gpu:not([data-job])')).backgroundColor,"
        " getComputedStyle(document.querySelector('.gpu[data-job=train-a]')).backgroundColor]"
    )
    assert free_bg != job_bg
    page.wait_for_selector("#running tr[data-job=train-a]")
    assert rack in page.inner_text("#running tr[data-job=train-a]")

    # Hovering a GPU says which job and node hold it.
    page.hover(f"{mine} >> nth=0")
    tip = page.wait_for_selector("#tooltip:not([hidden])")
    assert "train-a" in tip.inner_text() and re.search(rf"node {rack}-n\d\d", tip.inner_text())

    # A job that cannot start waits in the queue with the scheduler's reason.
    submit(c, name="huge-z", kind="training", gpus=136)  # fits the 139 healthy GPUs, not the 131 free
    why = pending_with_reason(c, "huge-z")
    page.wait_for_selector("#queue tr[data-job=huge-z] .reason")

    def same_reason() -> bool:  # the page shows what the API says (the reason may move on meanwhile)
        nonlocal why
        why = c.get("/v1/jobs/huge-z").json()
        return bool(page.inner_text("#queue tr[data-job=huge-z] .reason") == why["reason"])

    wait_for(same_reason, timeout=5, what="the queue to show huge-z's reason")
    assert page.inner_text("#queue tr[data-job=huge-z] .msg").strip()

    # Clicking a GPU of train-a opens its details: status, the rack, events.
    page.click(f"{mine} >> nth=0")
    page.wait_for_selector("#details:not([hidden]) [data-field=status]:text-is('running')")
    assert page.evaluate("location.hash") == "#job/train-a"
    assert page.inner_text("#d-name") == "train-a"
    assert rack in page.inner_text("#details [data-field=racks]")
    page.wait_for_selector("#details table.events >> text=scheduled")
    for n in nodes:
        assert n in page.inner_text("#d-body")
    page.screenshot(path=str(SHOT))

    # The queue list opens a pending job's details too; Escape closes the panel.
    page.click("#queue tr[data-job=huge-z]")
    page.wait_for_selector("#details [data-field=status]:text-is('pending')")
    wait_for(
        lambda: page.inner_text("#details [data-field=reason]").startswith(c.get("/v1/jobs/huge-z").json()["reason"]),
        timeout=5,
        what="the details to show huge-z's reason",
    )
    page.keyboard.press("Escape")
    page.wait_for_selector("#details", state="hidden")
    assert time.monotonic() - t0 < 20


# ---------------------------------------------------------------------- 120 racks
def test_a_big_cluster_shows_an_aggregate_and_pages_of_grids(tmp_path: Path, page: Any) -> None:
    t0 = time.monotonic()
    cfg = ServiceConfig(
        data_dir=tmp_path / "data",
        cluster=GPUCluster.uniform(name="big", racks_per_region=120),
        speed=1000.0,
        interval_s=0.01,
    )
    with serve_in_thread(cfg) as live:
        c = live.client()
        for i in range(12):
            submit(c, name=f"full-{i}", kind="training", gpus=72)
        submit(c, name="train-a", kind="training", gpus=8)
        full_rack = running(c, "full-11")["placement"]["racks"]
        assert len(full_rack) == 1
        a_rack = running(c, "train-a")["placement"]["racks"][0]
        too_many = c.get("/v1/ui/overview", params={"detail": ",".join(f"r{i:03d}" for i in range(65))})
        assert too_many.status_code == 422 and "page" in too_many.json()["detail"]

        page.goto(live.url + f"/#token={live.admin_token}")
        page.wait_for_selector("#aggregate:not([hidden])")
        page.wait_for_function("() => document.querySelectorAll('.agg').length === 120")
        page.wait_for_selector(".rack[data-rack=r000]")
        # One cell per rack, and only one page (16 racks) of grids: 1152 GPU cells, not 8640.
        assert cells(page, ".rack") == 16
        assert cells(page, ".gpu") == 16 * 72
        assert "of 120" in page.inner_text("#page-info")
        page.wait_for_selector(f".agg[data-rack={full_rack[0]}].a5")  # a full rack: the darkest cell
        assert "a0" in str(page.get_attribute(".agg[data-rack=r119]", "class"))  # nothing there

        # Page buttons: page 2 holds racks 17-32.
        page.click("#pages button:text-is('2')")
        page.wait_for_selector(".rack[data-rack=r016]")
        assert cells(page, ".rack") == 16 and cells(page, ".rack[data-rack=r000]") == 0

        # The filter box narrows to the racks whose name matches.
        page.fill("#rack-filter", "r11")
        page.wait_for_function("() => document.querySelectorAll('.rack').length === 10")
        names = page.eval_on_selector_all(".rack", "els => els.map(e => e.dataset.rack)")
        assert names == [f"r11{d}" for d in range(10)]
        assert "of 10" in page.inner_text("#page-info")

        # Clicking a rack's aggregate cell zooms to it: its grid is drawn and outlined.
        page.click(".agg[data-rack=r100]")
        page.wait_for_selector(".rack.focus[data-rack=r100]")
        assert cells(page, ".rack") == 16 and page.input_value("#rack-filter") == ""
        assert page.evaluate("location.hash") == "#rack/r100"

        # A job's rack link in its details brings that rack's page back.
        page.goto(live.url + "/#job/train-a")
        page.wait_for_selector("#details [data-field=status]:text-is('running')")
        page.click(f"#details a.rack-link[data-rack={a_rack}]")
        page.wait_for_selector(f".rack.focus[data-rack={a_rack}] .gpu[data-job=train-a]")
        page.keyboard.press("Escape")
        page.wait_for_selector("#details", state="hidden")
        page.evaluate("window.scrollTo(0, 0)")
        page.hover(f".rack[data-rack={a_rack}] .gpu[data-job=train-a] >> nth=0")
        page.screenshot(path=str(SHOT_BIG))
    assert time.monotonic() - t0 < 20


# ---------------------------------------------------------------------- auth on
def test_with_auth_the_page_asks_for_a_token_and_then_works(tmp_path: Path, page: Any) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        "tokens:\n"
        f"  - {{name: ops, role: admin, token: {ADMIN}}}\n"
        f"  - {{name: team-a, role: tenant, queues: [team-a], token: {TEAM_A}}}\n"
    )
    cfg = ServiceConfig(
        data_dir=tmp_path / "data", cluster=small_cluster(), speed=1000.0, interval_s=0.01, tokens_file=tokens
    )
    with serve_in_thread(cfg) as live:
        submit(live.client(TEAM_A), name="mine", kind="training", gpus=4)
        with httpx.Client(base_url=live.url) as anon:
            assert anon.get("/").status_code == 200  # the page itself is public; its data is not
            assert anon.get("/v1/ui/overview").status_code == 401
            assert anon.get("/v1/ui/overview", headers={"Authorization": "Bearer nope"}).status_code == 401

        page.goto(live.url + "/")
        page.wait_for_selector("#login:not([hidden])")
        assert cells(page, ".gpu") == 0
        page.fill("#token", "not-a-token")
        page.click("#login-go")
        page.wait_for_selector("#login-error:text-matches('refused')")
        page.fill("#token", TEAM_A)
        page.click("#login-go")
        page.wait_for_selector("#login", state="hidden")
        page.wait_for_selector(".rack[data-rack=r000]")
        page.wait_for_selector("#running tr[data-job=mine]")
        assert page.evaluate("sessionStorage.getItem('rackscale.token')") == TEAM_A

        # The token stays for this tab: a reload does not ask again.
        page.reload()
        page.wait_for_selector(".gpu[data-job=mine]")
        assert page.is_hidden("#login")

        # Forgetting it brings the prompt back.
        page.click("#signout")
        page.wait_for_selector("#login:not([hidden])")


# ---------------------------------------------------------------------- the overview route, without a browser
def test_the_overview_matches_the_rack_api_and_serves_only_what_is_asked(service: LiveService) -> None:
    c = service.client()
    submit(c, name="train-a", kind="training", gpus=8)
    submit(c, name="shared", kind="batch", tasks=3, gpuMilli=500)
    running(c, "train-a")
    running(c, "shared")
    ov = c.get("/v1/ui/overview", params={"detail": "r000,r001,nope"}).json()
    assert [r["name"] for r in ov["racks"]] == ["r000", "r001"]
    assert [r["failed"] for r in ov["racks"]] == [0, 0]
    assert [d["name"] for d in ov["detail"]] == ["r000", "r001"]
    assert ov["gpusAllocated"] == pytest.approx(9.5)
    for d in ov["detail"]:
        api = c.get(f"/v1/racks/{d['name']}").json()
        summary = next(r for r in ov["racks"] if r["name"] == d["name"])
        assert summary["allocated"] == pytest.approx(api["allocated"])
        want: dict[tuple[int, int], int] = {}
        for pos, node in enumerate(api["nodes"]):
            for g in node["gpuGrid"]:
                if g["usedMilli"]:
                    want[(pos, g["index"])] = g["usedMilli"]
        got: dict[tuple[int, int], int] = {}
        for pos, gpu, _job, milli in d["cells"]:
            got[(pos, gpu)] = got.get((pos, gpu), 0) + milli
        assert got == want
    names = {ov["jobs"][j] for d in ov["detail"] for _, _, j, _ in d["cells"]}
    assert names == {"train-a", "shared"}
    assert c.get("/v1/ui/overview").json()["detail"] == []
    too_many = ",".join(["r000"] * 2 + [f"x{i}" for i in range(100)])
    assert c.get("/v1/ui/overview", params={"detail": too_many}).status_code == 200  # unknown names are dropped


def test_the_page_and_its_assets_are_served_and_fetch_nothing_from_outside(service: LiveService) -> None:
    c = service.client()
    r = c.get("/")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    for asset in ("/static/app.js", "/static/style.css"):
        assert asset in r.text
        assert c.get(asset).status_code == 200
    for f in STATIC_DIR.iterdir():
        text = f.read_text()
        assert not re.search(r"(src|href)=\"(https?:)?//", text), f"{f.name} loads something from outside"
        assert not re.search(r"url\((https?:)?//|@import|fetch\(\"http", text), f"{f.name} loads something from outside"
