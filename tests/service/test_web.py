"""The web dashboard at ``/``, in a real headless Chromium (Playwright, sync API) against the real service.

Chromium and Playwright are required, never skipped: without them these tests fail and say what to install.
Screenshots land in /tmp/rackscale-web*.png (look at them after a change): the 2-rack page with a job open,
120 racks, and the loading, empty, full and error states.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from tests.service.conftest import LiveService, serve_in_thread, small_cluster, wait_for

from rackscale.cli.output import printable
from rackscale.model.specs import cluster_from_dict
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
SHOT_LOADING = Path("/tmp/rackscale-web-loading.png")
SHOT_EMPTY = Path("/tmp/rackscale-web-empty.png")
SHOT_FULL = Path("/tmp/rackscale-web-full.png")
SHOT_REFUSED = Path("/tmp/rackscale-web-error-token.png")
SHOT_UNREACHABLE = Path("/tmp/rackscale-web-error-unreachable.png")
SHOT_SWITCH = Path("/tmp/rackscale-web-switch-token.png")
# The browser runs in a zone that is not UTC, with a locale whose own time format is 12-hour ("2:05:09 PM"):
# the page must still write every time 24-hour, with the zone named.
ZONE = "America/New_York"
ZONE_RE = r"UTC-0[45]:00"  # New York's offset, winter or summer
STAMP_RE = rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d {ZONE_RE}"
TIME_RE = rf"\d\d:\d\d:\d\d {ZONE_RE}"
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
    ctx = browser.new_context(viewport={"width": 1440, "height": 900}, timezone_id=ZONE, locale="en-US")
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
def _ops_and_team_a(tmp_path: Path) -> ServiceConfig:
    """A fast service with two tokens: ops (admin, ADMIN) and team-a (tenant of team-a, TEAM_A)."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        "tokens:\n"
        f"  - {{name: ops, role: admin, token: {ADMIN}}}\n"
        f"  - {{name: team-a, role: tenant, queues: [team-a], token: {TEAM_A}}}\n"
    )
    return ServiceConfig(
        data_dir=tmp_path / "data", cluster=small_cluster(), speed=1000.0, interval_s=0.01, tokens_file=tokens
    )


def test_with_auth_the_page_asks_for_a_token_and_then_works(tmp_path: Path, page: Any) -> None:
    cfg = _ops_and_team_a(tmp_path)
    with serve_in_thread(cfg) as live:
        submit(live.client(TEAM_A), name="mine", kind="training", gpus=4)
        submit(live.client(ADMIN), name="theirs", kind="training", gpus=4)  # not team-a's: a grey "other"
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
        # Another tenant's GPUs: used, in a neutral grey (no job colour, no name), and said so in the legend.
        other = ".gpu[data-job='(another tenant)']"
        page.wait_for_selector(other)
        assert cells(page, other) == 4 and cells(page, ".gpu[data-job=theirs]") == 0
        assert page.eval_on_selector(other, "e => getComputedStyle(e).backgroundColor") == "rgb(156, 163, 175)"
        assert page.is_visible("#legend-tenant")

        # The token stays for this tab: a reload does not ask again.
        page.reload()
        page.wait_for_selector(".gpu[data-job=mine]")
        assert page.is_hidden("#login")

        # Forgetting it brings the prompt back.
        page.click("#signout")
        page.wait_for_selector("#login:not([hidden])")


def test_a_links_token_never_replaces_the_tabs_without_a_yes(tmp_path: Path, page: Any) -> None:
    """Login CSRF: a link /#token=ATTACKER signed the victim's tab in as the attacker, silently (the tab then shows
    the attacker's jobs as the victim's own). Now the page asks, naming both identities, and
    uses the link's token for nothing but that question until the user says yes; the header always says
    who the page is signed in as."""
    cfg = _ops_and_team_a(tmp_path)
    with serve_in_thread(cfg) as live:
        submit(live.client(TEAM_A), name="mine", kind="training", gpus=4)
        submit(live.client(ADMIN), name="theirs", kind="training", gpus=4)
        sent: list[tuple[str, str]] = []  # (path, token) of every API request the page makes
        page.on(
            "request",
            lambda r: (
                sent.append((r.url.split("/", 3)[3], r.headers.get("authorization", ""))) if "/v1/" in r.url else None
            ),
        )
        # The tab signs in as team-a (no token stored yet: the link's is taken), and says so.
        page.goto(live.url + f"/#token={TEAM_A}")
        page.wait_for_selector("#running tr[data-job=mine]")
        assert "token" not in page.url
        page.wait_for_selector("#whoami:text-matches('signed in as team-a')")
        assert "tenant" in page.inner_text("#whoami")

        # A link with another token, opened in the tab (a new page load): asked, not used.
        page.goto("about:blank")
        page.goto(live.url + f"/#token={ADMIN}")
        page.wait_for_selector("#switch:not([hidden])")
        assert "token" not in page.url  # dropped from the address bar all the same
        page.wait_for_selector("#switch-go:not([disabled])")
        assert "ops (admin)" in page.inner_text("#switch-new")
        assert "team-a (tenant of team-a)" in page.inner_text("#switch-now")
        assert page.is_enabled("#switch-go") and "ops" in page.inner_text("#switch-go")
        page.screenshot(path=str(SHOT_SWITCH))
        since = len(sent)
        page.wait_for_selector("#running tr[data-job=mine]")
        page.wait_for_timeout(3500)  # two polls: still team-a's
        assert page.evaluate("sessionStorage.getItem('rackscale.token')") == TEAM_A
        assert cells(page, "#running tr[data-job=theirs]") == 0
        assert "team-a" in page.inner_text("#whoami")
        used = {path.split("?")[0] for path, auth in sent if auth == f"Bearer {ADMIN}"}
        assert used == {"v1/whoami"}, used  # the link's token asked who it is, and nothing else
        assert any(auth == f"Bearer {TEAM_A}" for _, auth in sent[since:])  # the polls went on as team-a
        page.click("#switch-keep")
        page.wait_for_selector("#switch", state="hidden")
        page.wait_for_timeout(1700)
        assert page.evaluate("sessionStorage.getItem('rackscale.token')") == TEAM_A
        assert {p.split("?")[0] for p, a in sent if a == f"Bearer {ADMIN}"} == {"v1/whoami"}

        # A refused token in a link: said so, and nothing to switch to.
        page.evaluate("location.hash = '#token=not-a-token-0123456789'")
        page.wait_for_selector("#switch-new:text-matches('refused')")
        assert page.is_hidden("#switch-go") and "token" not in page.url
        page.keyboard.press("Escape")
        page.wait_for_selector("#switch", state="hidden")

        # The same link followed within the page (no reload: a hashchange), and this time the user says yes.
        page.evaluate(f"location.hash = '#token={ADMIN}'")
        page.wait_for_selector("#switch-go:not([disabled]):text-matches('ops')")
        assert "token" not in page.url
        page.click("#switch-go")
        page.wait_for_selector("#switch", state="hidden")
        page.wait_for_selector("#running tr[data-job=theirs]")
        page.wait_for_selector("#whoami:text-matches('signed in as ops')")
        assert page.evaluate("sessionStorage.getItem('rackscale.token')") == ADMIN


# ---------------------------------------------------------------------- loading, empty, error
def test_before_the_first_answer_the_page_says_it_is_loading_then_shows_the_empty_cluster(
    service: LiveService, page: Any
) -> None:
    held: list[Any] = []  # the API's answers, held back: the page has nothing to show yet
    released = False

    def hold(route: Any) -> None:
        if released:
            route.continue_()
        else:
            held.append(route)

    page.route("**/v1/**", hold)
    page.goto(service.url + f"/#token={service.admin_token}")
    page.wait_for_selector("#state[data-kind=loading] .spinner")
    wait_for(lambda: page.wait_for_timeout(20) or len(held) >= 5, timeout=5, what="the page's first requests")
    assert page.get_attribute("body", "data-state") == "loading"
    assert "Loading" in page.inner_text("#state-title")
    assert page.is_hidden("#kpis") and page.is_hidden("main")
    text = page.inner_text("body")
    for said in ("no job is waiting", "nothing is running", "no job has ended", "0 / 144"):
        assert said not in text, f"{said!r} before any answer"
    page.screenshot(path=str(SHOT_LOADING))

    released = True
    for route in held:
        route.continue_()
    page.unroute("**/v1/**")
    page.wait_for_selector("body.loaded[data-state=ready]")
    assert page.is_hidden("#state")
    # The empty cluster, now that the service said so.
    page.wait_for_selector("#queue-empty:text-is('no job is waiting')")
    assert page.inner_text("#running-empty") == "nothing is running"
    assert page.inner_text("#history-empty") == "no job has ended yet"
    assert cells(page, ".gpu") == 144 and cells(page, ".gpu[data-job]") == 0

    # The two allocation cards say which is now and which is since the start, with their definitions.
    assert page.text_content("[data-kpi=gpusAllocated] .label") == "GPUs in use now"
    assert page.inner_text("[data-kpi=gpusAllocated] .value").replace(" ", "") == "0/144"
    assert page.text_content("[data-kpi=allocationRatio] .label") == "Allocation since start"
    assert re.fullmatch(r"\d+\.\d%", page.inner_text("[data-kpi=allocationRatio] .value"))
    now_help = str(page.get_attribute("[data-kpi=gpusAllocated]", "title"))
    ratio_help = str(page.get_attribute("[data-kpi=allocationRatio]", "title"))
    assert "at this instant" in now_help
    assert "allocated GPU-seconds / available GPU-seconds" in ratio_help and "since the service started" in ratio_help
    labels = page.eval_on_selector_all(".kpi .label", "els => els.map(e => e.textContent)")
    assert sum("llocat" in x for x in labels) == 1, labels  # one card says "allocation"; the other "in use"

    # The clocks: 24-hour, the browser's zone named, in the header and the live indicator.
    assert re.search(rf"clock {STAMP_RE}", page.inner_text("#cluster-info")), page.inner_text("#cluster-info")
    assert re.fullmatch(rf"live · {TIME_RE}", page.inner_text("#live-text")), page.inner_text("#live-text")
    assert not re.search(r"\b[AP]M\b", page.inner_text("body"))
    page.screenshot(path=str(SHOT_EMPTY))


def test_a_refused_token_and_an_unreachable_service_are_said_so(service: LiveService, page: Any) -> None:
    page.goto(service.url + "/#token=not-the-token")
    page.wait_for_selector("#state[data-kind=refused]")
    assert page.get_attribute("body", "data-state") == "refused"
    assert page.inner_text("#state-title") == "The service refused the token"
    assert "unknown token" in page.inner_text("#state-text")
    assert page.is_visible("#login") and "refused" in page.inner_text("#login-error")
    assert page.is_hidden("#kpis") and cells(page, ".gpu") == 0
    page.screenshot(path=str(SHOT_REFUSED))
    page.fill("#token", str(service.admin_token))
    page.click("#login-go")
    page.wait_for_selector("body.loaded .rack[data-rack=r000]")

    # The service goes away after the page had data: a banner over the last data, the live dot red.
    page.route("**/v1/**", lambda route: route.abort())
    page.wait_for_selector("#banner:not([hidden]):text-matches('cannot be reached')")
    assert re.search(rf"Showing the data of {TIME_RE}", page.inner_text("#banner"))
    assert "down" in str(page.get_attribute("#live", "class"))
    assert cells(page, ".gpu") == 144  # still drawn
    page.unroute("**/v1/**")
    page.wait_for_selector("#banner", state="hidden")

    # ... and before it had any: the error state, no empty lists.
    page.route("**/v1/**", lambda route: route.abort())
    page.reload()
    page.wait_for_selector("#state[data-kind=unreachable]")
    assert page.inner_text("#state-title") == "The service cannot be reached"
    assert "retrying" in page.inner_text("#state-text").lower()
    assert page.is_hidden("#kpis") and page.is_hidden("main")
    assert "nothing is running" not in page.inner_text("body")
    page.screenshot(path=str(SHOT_UNREACHABLE))
    page.unroute("**/v1/**")
    page.wait_for_selector("body.loaded[data-state=ready] .rack[data-rack=r000]")


# ---------------------------------------------------------------------- colours, history, the full page
def _rgb(css: str) -> tuple[float, float, float]:
    m = re.fullmatch(r"rgba?\((\d+), (\d+), (\d+)(?:, [\d.]+)?\)", css)
    assert m, css
    return float(m[1]), float(m[2]), float(m[3])


def delta_e(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    """CIE76 colour difference (Euclidean in CIELAB, D65): about 2.3 is just noticeable; over 25, clearly
    different colours."""

    def lab(rgb: tuple[float, float, float]) -> tuple[float, float, float]:
        lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (x / 255 for x in rgb)]
        r, g, b = lin
        xyz = (
            (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047,
            0.2126 * r + 0.7152 * g + 0.0722 * b,
            (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883,
        )
        f = [v ** (1 / 3) if v > 0.008856 else 7.787 * v + 16 / 116 for v in xyz]
        return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])

    return float(sum((x - y) ** 2 for x, y in zip(lab(a), lab(b), strict=True)) ** 0.5)


GRID_CELLS_JS = """() => [...document.querySelectorAll('.gpu')].map(e => [
    e.closest('.rack').dataset.rack, +e.style.gridColumnStart, +e.style.gridRowStart, e.dataset.job || '',
    e.classList.contains('shared'), getComputedStyle(e).backgroundColor])"""


def test_adjacent_jobs_differ_in_colour_and_ended_jobs_stay_listed(service: LiveService, page: Any) -> None:
    c = service.client()
    names = [f"j{i:02d}" for i in range(10)]
    for n in names:
        submit(c, name=n, kind="training", gpus=4)  # a node each: side by side on a grid
    for n in ("half-a", "half-b", "half-c"):
        submit(c, name=n, kind="batch", gpus=2)  # two GPUs each: one above the other
    for n in [*names, "half-a", "half-b", "half-c"]:
        running(c, n)
    page.goto(service.url + f"/#token={service.admin_token}")
    page.wait_for_function("() => document.querySelectorAll('.gpu[data-job]').length === 46")

    got = page.evaluate(GRID_CELLS_JS)
    at = {(rack, col, row): (job, shared, _rgb(bg)) for rack, col, row, job, shared, bg in got}
    free = next(rgb for job, _, rgb in at.values() if not job)
    by_job: dict[str, set[tuple[float, float, float]]] = {}
    for job, shared, rgb in at.values():
        if job and not shared:
            by_job.setdefault(job, set()).add(rgb)
    assert all(len(v) == 1 for v in by_job.values()), by_job  # one colour per job, on every one of its GPUs
    pairs: dict[tuple[str, str], float] = {}
    for (rack, col, row), (job, shared, rgb) in at.items():
        for nxt in ((rack, col + 1, row), (rack, col, row + 1)):  # the node to the right, the GPU below
            if nxt not in at or shared:
                continue
            other, other_shared, other_rgb = at[nxt]
            if job and other and job != other and not other_shared:
                pairs[(min(job, other), max(job, other))] = delta_e(rgb, other_rgb)
    assert len(pairs) >= 10, pairs  # the jobs do touch: side by side and one above the other
    worst = min(pairs.items(), key=lambda kv: kv[1])
    assert worst[1] >= 25, f"adjacent jobs {worst[0]} look alike: ΔE {worst[1]:.1f} (all: {pairs})"
    for job, (rgb,) in by_job.items():
        assert delta_e(rgb, free) >= 25, f"{job} looks like a free GPU"
        assert delta_e(rgb, _rgb("rgb(220, 38, 38)")) >= 25, f"{job} looks like a failed GPU"

    # A cancel and a completion: both listed under "Recently ended", newest end first, with the reason,
    # the end time and how long each ran.
    cancelled = c.delete("/v1/jobs/j03")
    assert cancelled.status_code == 200, cancelled.text
    submit(c, name="short-1", kind="training", gpus=1, durationEstimateSeconds=30)
    done = wait_for(
        lambda: (j := c.get("/v1/jobs/short-1").json())["status"] == "completed" and j, timeout=10, what="short-1"
    )
    assert isinstance(done, dict)
    page.wait_for_selector("#history tr[data-job=short-1]")
    page.wait_for_selector("#history tr[data-job=j03]")
    rows = page.eval_on_selector_all(
        "#history tbody tr", "rs => rs.map(r => [r.dataset.job, ...[...r.cells].map(td => td.innerText.trim())])"
    )
    assert [r[0] for r in rows] == ["short-1", "j03"], rows
    (_, _, status, reason, ended, ran), (_, _, status3, reason3, ended3, ran3) = rows
    assert status == "completed" and reason.startswith("Completed")
    assert status3 == "cancelled" and reason3.startswith("Cancelled") and "cancelled by a user" in reason3
    for t in (ended, ended3):
        assert re.fullmatch(rf"{TIME_RE}|{STAMP_RE}", t), t
    for r in (ran, ran3):
        assert re.fullmatch(r"\d+s|\d+m \d+s|\d+h \d+m|\d+d \d+h", r), r
    assert page.is_hidden("#history-empty")
    assert cells(page, ".gpu[data-job=j03]") == 0

    # The details of an ended job: its times in the same format, and how long it ran.
    page.click("#history tr[data-job=short-1]")
    page.wait_for_selector("#details [data-field=status]:text-is('completed')")
    details = page.inner_text("#d-body")
    for field in ("submitted", "started", "ended"):
        assert re.search(rf"{field}\s+{STAMP_RE} \(", details), (field, details)
    assert re.search(r"ran for\s+\d", details)
    assert "none" in str(page.get_attribute("#d-swatch", "class"))  # it holds no GPU: no colour to match
    page.keyboard.press("Escape")
    page.wait_for_selector("#details", state="hidden")

    # The full page: jobs on the grids, a queue, running jobs, history.
    submit(c, name="huge-z", kind="training", gpus=136)
    page.wait_for_selector("#queue tr[data-job=huge-z] .reason")
    assert not re.search(r"\b[AP]M\b", page.inner_text("body"))
    page.screenshot(path=str(SHOT_FULL))


def test_the_history_shows_the_latest_ended_jobs_without_reading_them_all(service: LiveService, page: Any) -> None:
    c = service.client()
    submit(c, name="old-long", kind="training", gpus=4)  # submitted first: the lowest cursor of all
    running(c, "old-long")
    many = [f"s{i:03d}" for i in range(70)]
    for n in many:
        submit(c, name=n, kind="batch", gpus=1, durationEstimateSeconds=10)
    wait_for(
        lambda: all(j["status"] == "completed" for j in c.get("/v1/jobs", params={"kind": "batch"}).json()["items"]),
        timeout=15,
        what="the short jobs to complete",
    )
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "status=completed" in r.url else None)
    page.goto(service.url + f"/#token={service.admin_token}")
    page.wait_for_function("() => document.querySelectorAll('#history tbody tr').length === 20")
    first_load = list(asked)
    # A search over the cursor, each probe at most 40 rows; not a walk through all 70 ended jobs.
    assert all("limit=40" in u for u in first_load), first_load
    assert 2 <= len(first_load) <= 16, first_load
    shown = page.eval_on_selector_all("#history tbody tr", "rs => rs.map(r => r.dataset.job)")
    ended = {j["name"]: j["ended"] for j in c.get("/v1/jobs", params={"status": "completed"}).json()["items"]}
    assert set(shown) <= set(many[-40:]) and many[-1] in shown, shown  # the ones submitted last
    assert [ended[n] for n in shown] == sorted((ended[n] for n in shown), reverse=True)  # newest end first

    # The job submitted first ends now: the page saw it leave the running list, so it tops the history
    # although the cursor search starts after it.
    assert c.delete("/v1/jobs/old-long").status_code == 200
    page.wait_for_selector("#history tbody tr:first-child[data-job=old-long]")
    assert cells(page, "#history tbody tr") == 20
    polls = asked[len(first_load) :]
    assert polls and all("limit=40" in u for u in polls)  # each later poll: one small request


def test_the_job_palette_is_well_separated_and_neither_red_nor_grey() -> None:
    text = (STATIC_DIR / "app.js").read_text()
    block = re.search(r"const PALETTE = \[(.*?)\];", text, re.S)
    assert block
    hexes = re.findall(r'"#([0-9a-f]{6})"', block[1])
    assert len(hexes) >= 10
    rgbs = [(int(x[0:2], 16), int(x[2:4], 16), int(x[4:6], 16)) for x in hexes]
    closest = min(delta_e(a, b) for i, a in enumerate(rgbs) for b in rgbs[i + 1 :])
    assert closest >= 30, closest
    for special in ((220, 38, 38), (156, 163, 175), (241, 243, 246)):  # failed, another tenant, free
        assert min(delta_e(c, special) for c in rgbs) >= 30, special


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


# ---------------------------------------------------------------------- hostile text, and the page's headers
# The page's own defences besides writing every value as text (app.js's `h`): a Content-Security-Policy that
# lets it run only its own script and style and talk only to its own origin, no MIME sniffing, and no framing.
CSP_DIRECTIVES = {
    "default-src": "'none'",
    "script-src": "'self'",
    "style-src": "'self'",
    "connect-src": "'self'",
    "frame-ancestors": "'none'",
    "base-uri": "'none'",
    "form-action": "'none'",
}


@pytest.mark.parametrize("path", ["/", "/static/app.js", "/static/style.css", "/static/index.html"])
def test_the_page_and_its_assets_carry_a_strict_csp_nosniff_and_no_framing(service: LiveService, path: str) -> None:
    r = service.client().get(path)
    assert r.status_code == 200
    assert r.headers.get("x-content-type-options") == "nosniff"
    assert r.headers.get("x-frame-options") == "DENY"
    assert r.headers.get("referrer-policy") == "no-referrer"
    csp = dict(d.strip().split(" ", 1) for d in r.headers.get("content-security-policy", "").split(";") if d.strip())
    for directive, value in CSP_DIRECTIVES.items():
        assert csp.get(directive) == value, (directive, csp)
    assert "'unsafe-inline'" not in str(csp) and "'unsafe-eval'" not in str(csp)


def _watch_csp(page: Any) -> list[str]:
    """Every CSP violation the page reports (the DOM event, and Chromium's console line)."""
    seen: list[str] = []
    page.on("console", lambda m: seen.append(m.text) if "Content Security Policy" in m.text else None)
    page.expose_function("__cspViolation", lambda d: seen.append(str(d)))
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation',"
        " e => window.__cspViolation(e.violatedDirective + ' ' + e.blockedURI))"
    )
    return seen


def test_the_page_works_under_its_csp_and_the_csp_blocks_injected_markup(service: LiveService, page: Any) -> None:
    violations = _watch_csp(page)
    c = service.client()
    submit(c, name="train-a", kind="training", gpus=8)
    rack = running(c, "train-a")["placement"]["racks"][0]
    page.goto(service.url + f"/#token={service.admin_token}")
    page.wait_for_selector(f".rack[data-rack={rack}] .gpu[data-job=train-a]")
    page.wait_for_selector("[data-kpi=idleRate] .value:text-matches('%$')")
    page.hover(f".rack[data-rack={rack}] .gpu[data-job=train-a] >> nth=0")  # styles set from the script
    page.wait_for_selector("#tooltip:not([hidden])")
    page.click(f".rack[data-rack={rack}] .gpu[data-job=train-a] >> nth=0")
    page.wait_for_selector("#details table.events >> text=scheduled")
    page.wait_for_function("() => document.querySelector('.gpu[data-job=train-a]').style.background !== ''")
    page.wait_for_timeout(300)
    assert violations == []
    # Were markup ever injected (a future bug), its inline handler would not run.
    page.evaluate("document.body.insertAdjacentHTML('beforeend', '<img src=x onerror=\"window.__xss=1\">')")
    page.wait_for_timeout(300)
    assert page.evaluate("window.__xss") is None
    assert any("script-src" in v or "img-src" in v or "default-src" in v for v in violations)


# Values a cluster's operator or a tenant controls, each written into every field the page shows that may hold
# it: the cluster's name, a pool's (so its racks' and nodes' names), a region, the currency, and a job's
# gpuModels (quoted in its reason's message: 40 of them make a message of about 10,000 characters).
HOSTILE = {
    "img-onerror": "<img src=x onerror=window.__xss=1>",
    "script-close": "</script><script>window.__xss=1</script>",
    "javascript-url": "javascript:window.__xss=1//",
    "entity": "&lt;b&gt;bold&lt;/b&gt; <b>bold</b>",
    "zero-width": "a\u200bb\u2060c\ufeffd",
    "long-word": "w" * 10,  # padded like every value below to its field's most: one unbroken word
}


def _pad(text: str, n: int) -> str:
    return (text + "x" * n)[:n]


def _hostile_cluster(payload: str) -> GPUCluster:
    return cluster_from_dict(
        {
            "apiVersion": "rackscale.io/v1",
            "kind": "Cluster",
            "metadata": {"name": _pad(payload, 253)},
            "spec": {
                "pools": [
                    {"name": _pad(payload, 248), "gpuType": "H100", "region": _pad(payload, 253), "racks": 1},
                    {"name": "plain", "gpuType": "H100", "racks": 1},
                ],
                "pricing": {"currency": _pad(payload, 253)},
            },
        }
    )


def _no_overflow(page: Any) -> None:
    """Nothing wider than its box: no page-wide scroll, the header's right end and every rack box in view, the
    job's panel no wider than itself."""
    got = page.evaluate(
        """() => ({
          page: document.documentElement.scrollWidth, win: innerWidth,
          live: document.getElementById('live').getBoundingClientRect().right,
          racks: Math.max(0, ...[...document.querySelectorAll('.rack')].map(e => e.getBoundingClientRect().right)),
          section: document.getElementById('racks-section').getBoundingClientRect().right,
          panel: document.getElementById('details').hidden ? 0
            : document.getElementById('details').scrollWidth - document.getElementById('details').clientWidth,
        })"""
    )
    assert got["panel"] <= 0, got  # the job's panel: no sideways scroll
    assert got["page"] <= got["win"], got
    assert got["live"] <= got["win"], got
    assert got["racks"] <= got["section"], got


@pytest.mark.parametrize("payload", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_names_and_messages_are_shown_as_text_and_keep_the_layout(
    tmp_path: Path, page: Any, payload: str
) -> None:
    cluster = _hostile_cluster(payload)
    rack = cluster.racks[0].name
    cfg = ServiceConfig(data_dir=tmp_path / "data", cluster=cluster, speed=1000.0, interval_s=0.01)
    with serve_in_thread(cfg) as live:
        c = live.client()
        long_job = "j" * 253
        submit(c, name=long_job, kind="training", gpus=4)
        running(c, long_job)
        submit(c, name="picky", kind="training", gpus=4, gpuModels=[_pad(f"{payload}{i}", 253) for i in range(40)])
        failed = wait_for(lambda: c.get("/v1/jobs/picky").json()["status"] == "failed", timeout=10, what="picky")
        assert failed
        message = c.get("/v1/jobs/picky").json()["message"]
        assert payload in message and len(message) > 10_000

        page.goto(live.url + f"/#token={live.admin_token}")
        page.wait_for_selector("#history tr[data-job=picky]")
        page.wait_for_selector(".gpu[data-job]")
        assert page.text_content("#cluster-info").startswith(_pad(payload, 253) + " · ")
        names = page.eval_on_selector_all(".rack .rack-name", "els => els.map(e => e.textContent)")
        assert rack in names and len(names) == 2
        assert page.text_content("[data-kpi=costPerHour] .sub") == f"{_pad(payload, 253)} per hour"
        _no_overflow(page)
        page.hover(".gpu[data-job] >> nth=0")
        assert rack in page.inner_text("#tooltip")

        page.click("#history tr[data-job=picky]")
        page.wait_for_selector("#details [data-field=reason] >> text=NoGPUsOfRequestedModel")
        assert page.text_content("#details [data-field=reason]") == f"NoGPUsOfRequestedModel {message}"
        _no_overflow(page)
        page.click(f"#running tr[data-job={long_job}]")
        page.wait_for_selector("#details [data-field=racks] a.rack-link")
        link = page.get_attribute("#details a.rack-link", "href")
        assert link == "#rack/" + quote(rack, safe="-_.!~*'()")  # encodeURIComponent: nothing but a fragment
        page.click("#details a.rack-link")
        _no_overflow(page)
        page.screenshot(path=f"/tmp/rackscale-web-hostile-{next(k for k, v in HOSTILE.items() if v == payload)}.png")
        page.wait_for_timeout(300)
        assert page.evaluate("window.__xss") is None
        hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
        assert not [h for h in hrefs if h.lower().lstrip().startswith("javascript:")]


# Text the page cannot trust to be printable: a job's message on the `local` backend ends with the last line of
# its log (the tenant's own output), and `/#job/NAME` is whatever a link says. The page shows such characters
# as the CLI does (`printable`): as escapes, never acted on (U+202E would show the rest of the line reversed).
CONTROLS = {
    "ansi-clear-title": "\x1b[2J\x1b]0;pwned\x07done",
    "rtl-override": "report\u202etxt.exe",
    "isolates-and-marks": "a\u2066b\u2069c\u200fd\u061ce",
    "carriage-return": "ok\rFAILED",
    "c1-csi": "x\x9b31my",
    "line-separator": "one\u2028two\u2029three",
}


@pytest.mark.parametrize("text", list(CONTROLS.values()), ids=list(CONTROLS))
def test_control_and_bidi_characters_are_shown_escaped_as_the_cli_does(
    service: LiveService, page: Any, text: str
) -> None:
    c = service.client()
    submit(c, name="loud", kind="training", gpus=4)
    running(c, "loud")
    shown = printable(text, multiline=True)
    assert shown != text

    def hostile_message(route: Any) -> None:  # what a job's log line brings into its message and events
        reply = route.fetch()
        body = reply.json()
        for item in body.get("items", [body]):
            item["message"] = text
        route.fulfill(response=reply, json=body)

    page.route("**/v1/jobs/loud", hostile_message)
    page.route("**/v1/jobs/loud/events*", hostile_message)
    page.goto(service.url + f"/#token={service.admin_token}")
    page.wait_for_selector("#running tr[data-job=loud]")
    page.goto(service.url + "/#job/loud")
    page.wait_for_selector("#details [data-field=reason] >> text=Scheduled")
    assert page.text_content("#details [data-field=reason]") == f"Scheduled {shown}"
    page.wait_for_selector("#details table.events tbody tr")
    assert shown in page.text_content("#details table.events")
    assert text not in page.text_content("#d-body")

    # A link's job name: shown escaped in the panel's title and its "no job named" line.
    page.goto(service.url + "/#job/" + quote(text, safe=""))
    page.wait_for_selector("#details .error")
    assert page.text_content("#d-name") == shown
    assert shown in page.text_content("#details .error")


def test_a_rack_whose_name_holds_a_comma_shows_its_grid(tmp_path: Path, page: Any) -> None:
    """A pool's name is plain text, so a rack's may hold a comma; the page asked for its racks' grids as one
    comma-separated detail=, which split such a name and left its grid empty without a word. It now asks
    with one rack= per rack, matched exactly (detail= stays for scripts)."""
    cluster = cluster_from_dict(
        {
            "apiVersion": "rackscale.io/v1",
            "kind": "Cluster",
            "metadata": {"name": "commas"},
            "spec": {"pools": [{"name": "a,b", "gpuType": "H100", "racks": 1}]},
        }
    )
    rack = cluster.racks[0].name
    assert "," in rack
    cfg = ServiceConfig(data_dir=tmp_path / "data", cluster=cluster, speed=1000.0, interval_s=0.01)
    with serve_in_thread(cfg) as live:
        c = live.client()
        submit(c, name="train-a", kind="training", gpus=4)
        running(c, "train-a")
        by_rack = c.get("/v1/ui/overview", params={"rack": rack}).json()
        assert [d["name"] for d in by_rack["detail"]] == [rack] and by_rack["detail"][0]["cells"]
        assert c.get("/v1/ui/overview", params={"detail": rack}).json()["detail"] == []  # why rack= exists
        page.goto(live.url + f"/#token={live.admin_token}")
        page.wait_for_selector(".gpu[data-job=train-a]")  # the grid of the rack, with the job's GPUs
