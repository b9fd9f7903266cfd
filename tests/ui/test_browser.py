"""The pages in a real browser: Debian's headless Chromium, driven by Playwright.

The app serves a seeded SQLite database on a loopback port; each page is loaded, its figures are
checked against the JSON API's answer for the same question, the user clicks through model →
configuration → job, and screenshots land in the test's temporary folder. A JavaScript error on
a page, or an error on its console, fails the test. ``bash scripts/test.sh`` installs Chromium
where it is missing (``scripts/browser.sh``).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from api.app import create_app
from api.ui import format as fmt
from operator_db.config import Settings
from operator_db.db import queue
from operator_db.db.store import Store
from tests.ui.seed import ERROR, KINDS, MODEL, NS_MODEL, OWNER, Seeded, seed
from tests.ui.test_trust_pages import RUN_S, WHOLE, add_whole_only

CHROMIUM = os.environ.get("OPDB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""No network from the browser: the machine's closed network refuses Chromium's own calls."""

if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
    pytest.fail(
        f"no Chromium at {CHROMIUM}: run `bash scripts/browser.sh` (or set OPDB_CHROMIUM)",
        pytrace=False,
    )

from playwright.sync_api import ConsoleMessage, Page, sync_playwright  # noqa: E402


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Site:
    """The app on a loopback port, over the seeded database; ``api`` asks its JSON API."""

    def __init__(self, url: str, db_url: str, seeded: Seeded) -> None:
        self.url = url
        self.db_url = db_url
        self.seeded = seeded
        self.api = httpx.Client(base_url=url, timeout=30)

    def json(self, path: str, **params: Any) -> Any:
        """GET ``path`` from the JSON API and return its body."""
        response = self.api.get(path, params=params)
        response.raise_for_status()
        return response.json()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """Serve the seeded database with uvicorn in a thread for the module's tests."""
    folder = tmp_path_factory.mktemp("ui")
    db_url = f"sqlite:///{folder / 'lab.sqlite'}"
    seeded = seed(db_url)
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(Settings(database_url=db_url)),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield Site(f"http://127.0.0.1:{port}", db_url, seeded)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where a test's screenshots go (``UI_SHOTS_DIR`` names another folder, for the docs)."""
    folder = Path(os.environ.get("UI_SHOTS_DIR", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module."""
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Page]:
    """A fresh page that fails the test on a JavaScript error or a console error."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(f"console error: {message.text} ({message.location})")

    tab.on("console", console)
    tab.set_default_timeout(20_000)
    yield tab
    context.close()
    assert not errors, errors


def _wait_for(page: Page, expression: str, timeout_s: float) -> None:
    """Wait until ``expression`` is true in the page.

    Not ``page.wait_for_function``: its predicate is compiled in the page by ``eval``, which the
    pages' CSP (``script-src 'self'``) refuses; ``page.evaluate`` runs through the debugger.
    """
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"not true after {timeout_s} s: {expression}"
        page.wait_for_timeout(100)


def _text(page: Page, selector: str) -> str:
    return page.locator(selector).inner_text().strip()


def test_overview_shows_what_the_api_says(site: Site, page: Page, shots: Path) -> None:
    page.goto(f"{site.url}/ui/")
    assert page.title() == "Overview · operator-db"
    for kind in site.json("/device-kinds"):
        assert page.locator(f'article[data-kind="{kind["name"]}"] h3').inner_text() == kind["name"]
    counts = site.json("/jobs/counts")
    for status in ("queued", "running", "done", "failed"):
        shown = _text(page, f'#queue td[data-status="{status}"]')
        assert int(shown) == counts.get(status, 0), status
    hosts = site.json("/hosts")
    for host in hosts:
        assert host["hostname"] in page.locator("#main").inner_text()
    newest = page.locator("#newest tbody tr")
    stored = site.json("/configurations")["total"] * len(KINDS)  # each measured on each kind
    assert newest.count() == min(20, stored)
    page.screenshot(path=str(shots / "ui-overview.png"), full_page=True)
    # The first focusable thing is the skip link; Enter moves to the content.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"


def test_model_configuration_job_click_through(site: Site, page: Page, shots: Path) -> None:
    page.goto(f"{site.url}/ui/")
    link = page.locator(f'ul.models a:text-is("{MODEL}")')  # hidden in a closed list too
    measured = page.locator("#main details", has=link).first
    if measured.get_attribute("open") is None:
        measured.locator("summary").click()
    measured.get_by_role("link", name=MODEL, exact=True).first.click()
    page.wait_for_url(f"**/ui/models/{MODEL}?device_kind=*")
    kind = KINDS[0]
    estimate = site.json(f"/models/{MODEL}/estimate", device_kind=kind, limit=1000)
    row = page.locator(f'#side-by-side tr[data-kind="{kind}"]')
    assert _cell(row, "total_time_s") == fmt.si(estimate["total_time_s"], "s")
    assert _cell(row, "full_run_time_s") == fmt.si(estimate["full_run_time_s"], "s")
    assert _cell(row, "time_error") == _error_text(estimate)
    assert _cell(row, "energy_j") == fmt.si(estimate["energy_j"], "J")
    assert _cell(row, "coverage") == fmt.percent(estimate["coverage"])
    assert page.locator("#side-by-side tbody tr").count() == len(KINDS)
    configs = page.locator("#configurations tbody tr")
    assert configs.count() == estimate["configurations_total"]
    for shown, row_json in zip(
        configs.all(), estimate["configurations"], strict=True
    ):  # costliest first, as the API ranks them
        assert shown.get_attribute("data-key") == row_json["key"]
        assert _cell(shown, "time_per_call_s") == fmt.si(row_json["time_per_call_s"], "s")
    roofline = page.locator("img.roofline")
    roofline.scroll_into_view_if_needed()
    _wait_for(
        page,
        "document.querySelector('img.roofline').complete && "
        "document.querySelector('img.roofline').naturalWidth > 0",
        timeout_s=60,
    )
    # Sorting by the time per call, ascending, then descending, from the keyboard.
    header = page.locator("#configurations thead th", has_text="time per call")
    header.locator("button").focus()
    page.keyboard.press("Enter")
    assert header.get_attribute("aria-sort") == "ascending"
    column = 2  # configuration, count, time per call
    values = [float(v) for v in _sort_values(page, "#configurations", column)]
    assert values == sorted(values)
    page.keyboard.press("Enter")
    values = [float(v) for v in _sort_values(page, "#configurations", column)]
    assert values == sorted(values, reverse=True)
    page.screenshot(path=str(shots / "ui-model.png"), full_page=True)

    first = page.locator("#configurations tbody tr").first
    key = first.get_attribute("data-key")
    first.get_by_role("link").click()
    page.wait_for_url(f"**/ui/configurations/{key}")
    results = site.json(f"/configurations/{key}/measurements", limit=200)
    assert page.locator("#measurements tbody tr").count() == len(results["items"])
    newest = results["items"][0]
    shown = page.locator(f'#measurements tr[data-id="{newest["id"]}"]')
    assert _cell(shown, "time_median_s") == fmt.si(newest["time_median_s"], "s")
    assert page.locator("svg.chart polyline").count() >= 1
    page.screenshot(path=str(shots / "ui-configuration.png"), full_page=True)

    job_link = page.locator("#measurements tbody tr a[href^='/ui/jobs/']").first
    job_id = int(job_link.inner_text())
    job_link.click()
    page.wait_for_url(f"**/ui/jobs/{job_id}")
    job = site.json(f"/jobs/{job_id}")
    assert _text(page, '#job dd[data-field="status"]') == job["status"]


def test_imported_gpus_and_data_sets_on_the_overview(site: Site, page: Page, shots: Path) -> None:
    """Each kind's spec sheet and sources as /device-kinds gives them; the data sets' totals."""
    page.goto(f"{site.url}/ui/")
    for kind in site.json("/device-kinds"):
        card = page.locator(f'article[data-kind="{kind["name"]}"]')
        for source in kind["sources"]:
            item = card.locator(f'li[data-source="{source["source"]}"]')
            assert _cell(item, "results") == str(source["results"])
            text = item.inner_text()
            if source["imported"]:
                assert text.startswith("Imported from") and source["source"] in text
                assert (source["license"] or "") in text
            else:
                assert text.startswith("Measured by operator-db")
        spec = kind["spec"]
        if spec is not None:
            assert _cell(card, "sms") == str(spec["sms"])
            shown = card.locator('[data-dtype="float32"]').inner_text()
            assert shown == fmt.si(spec["peak_flops_per_s"]["float32"], "FLOP/s")
    for source in site.json("/data-sources")["items"]:
        row = page.locator(f'#data-sets tr[data-source="{source["name"]}"]')
        assert _cell(row, "results") == str(source["results"])
        assert _cell(row, "model_runs") == str(source["model_runs"])
    for row in page.locator("#newest tbody tr").all()[:5]:
        key = row.locator("a").get_attribute("href").rsplit("/", 1)[1]
        results = site.json(f"/configurations/{key}/measurements")["items"]
        (result,) = [r for r in results if r["id"] == int(row.get_attribute("data-id") or 0)]
        assert _cell(row, "source") == fmt.source(result["source"])
    page.locator('article[data-kind="NVIDIA L4"]').screenshot(path=str(shots / "ui-kind-l4.png"))


def test_models_model_and_configuration_say_where_figures_come_from(
    site: Site, page: Page, shots: Path
) -> None:
    page.goto(f"{site.url}/ui/")
    page.locator("#all-models").click()
    page.wait_for_url("**/ui/models")
    listed = site.json("/models")
    assert _cell(page.locator("#models-total"), "total") == str(listed["total"])
    assert page.locator("#models tbody tr").count() == listed["total"]
    for model in listed["items"]:
        row = page.locator(f'#models tr[data-model="{model["name"]}"]')
        for kind in model["device_kinds"]:
            item = row.locator(f'li[data-kind="{kind["device_kind"]}"]')
            assert _cell(item, "configs_with_results") == str(kind["configs_with_results"])
            if kind["configs_imported"]:
                assert _cell(item, "configs_imported") == str(kind["configs_imported"])
    page.screenshot(path=str(shots / "ui-models.png"), full_page=True)

    page.locator(f'#models tr[data-model="{NS_MODEL}"] th a').click()
    page.wait_for_url(f"**/ui/models/{NS_MODEL}")
    for kind in ("NVIDIA L4", "Tesla T4"):
        estimate = site.json(f"/models/{NS_MODEL}/estimate", device_kind=kind, limit=1000)
        row = page.locator(f'#side-by-side tr[data-kind="{kind}"]')
        assert _cell(row, "total_time_s") == fmt.si(estimate["total_time_s"], "s")
        assert _cell(row, "full_run_time_s") == fmt.si(estimate["full_run_time_s"], "s")
        assert _cell(row, "full_run_source") == fmt.source(estimate["full_run_source"])
        assert _cell(row, "time_error") == _error_text(estimate)
        assert _cell(row, "coverage") == fmt.percent(estimate["coverage"])
        shown = _cell(row, "sources")
        for source, n in estimate["sources"].items():
            assert f"{fmt.source(source)}: {n}" in shown
    chosen = page.locator("#side-by-side tr.current").get_attribute("data-kind")
    estimate = site.json(f"/models/{NS_MODEL}/estimate", device_kind=chosen, limit=1000)
    for shown_row, row_json in zip(
        page.locator("#configurations tbody tr").all(), estimate["configurations"], strict=True
    ):
        assert shown_row.get_attribute("data-key") == row_json["key"]
        expected = fmt.source(row_json["source"]) if row_json["source"] else "not measured"
        assert _cell(shown_row, "source") == expected
    page.screenshot(path=str(shots / "ui-model-imported.png"), full_page=True)

    page.goto(f"{site.url}/ui/models/{NS_MODEL}?device_kind=Tesla%20T4")
    page.locator(f'#configurations tr[data-key="{site.seeded.own_key}"] a').click()
    page.wait_for_url(f"**/ui/configurations/{site.seeded.own_key}")
    results = site.json(f"/configurations/{site.seeded.own_key}/measurements")["items"]
    assert {r["source"] for r in results} == {"measured", "neusight"}
    for result in results:
        cell = _cell(page.locator(f'#measurements tr[data-id="{result["id"]}"]'), "source")
        assert cell.startswith(fmt.source(result["source"]))
        if result["source_file"]:
            assert f"({result['source_file']}, line {result['source_line']})" in cell
    newest = results[0]
    said = page.locator("#newest-source").inner_text()
    assert said.startswith("Imported" if newest["source"] != "measured" else "Measured")
    page.screenshot(path=str(shots / "ui-configuration-sources.png"), full_page=True)


def test_jobs_show_errors_and_holders_and_refresh_live(site: Site, page: Page, shots: Path) -> None:
    page.goto(f"{site.url}/ui/jobs")
    failed = page.locator(f'tr[data-job="{site.seeded.failed_job}"]')
    assert ERROR in failed.inner_text()
    running = page.locator(f'tr[data-job="{site.seeded.running_job}"]')
    assert OWNER in running.inner_text() and "running" in running.inner_text()
    assert page.locator("#jobs-table tbody tr").count() == site.json("/jobs")["total"]
    page.screenshot(path=str(shots / "ui-jobs.png"), full_page=True)
    # The worker holding the running job fails it: the page shows it without a reload.
    with Store.open(site.db_url) as store, store.transaction() as session:
        queue.fail_job(session, site.seeded.running_job, OWNER, "killed by the test", retry=False)
    _wait_for(
        page,
        f"document.querySelector('tr[data-job=\"{site.seeded.running_job}\"]')"
        ".textContent.includes('killed by the test')",
        timeout_s=15,
    )
    assert site.json(f"/jobs/{site.seeded.running_job}")["status"] == "failed"
    page.locator(f'tr[data-job="{site.seeded.failed_job}"] a').first.click()
    page.wait_for_url(f"**/ui/jobs/{site.seeded.failed_job}")
    assert _text(page, 'pre[data-field="last_error"]') == ERROR


def test_a_phone_sees_the_overview_without_sideways_scrolling(
    site: Site, browser: Any, shots: Path
) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    tab = context.new_page()
    tab.goto(f"{site.url}/ui/")
    width = tab.evaluate("document.documentElement.scrollWidth")
    assert width <= 391, width  # wide tables scroll inside their own box, not the page
    tab.screenshot(path=str(shots / "ui-overview-phone.png"), full_page=True)
    context.close()


def test_a_comparison_ranks_by_the_runs_and_names_the_flips(site: Site, page: Page) -> None:
    """Finding: "which GPU" ranked against the runs shown beside it, without saying so.

    The seed's two fake GPUs are timed here, so whether their estimates flip their runs varies:
    the page is checked against what the API says either way (a flip forced: test_compare_page).
    """
    rows = site.json(f"/models/{MODEL}/compare")["rows"]
    page.goto(f"{site.url}/ui/models/{MODEL}/compare")
    shown = [tr.get_attribute("data-kind") for tr in page.locator("#compare tbody tr").all()]
    assert shown == [r["device_kind"] for r in rows]
    runs = [r["full_run_s"] for r in rows if r["full_run_s"] is not None]
    assert runs == sorted(runs)  # the runs rank the kinds
    both = [r for r in rows if r["time_s"] and r["full_run_s"]]
    for r in both:  # a flip is an estimate order against the run order
        expected = {
            o["device_kind"]
            for o in both
            if (r["time_s"] - o["time_s"]) * (r["full_run_s"] - o["full_run_s"]) < 0
        }
        assert set(r["flips_with"]) == expected
        flag = page.locator(f'#compare tr[data-kind="{r["device_kind"]}"] .flag')
        assert flag.count() == (1 if expected else 0)
        marker = f'svg.chart.compare g[data-kind="{r["device_kind"]}"] path.run-marker'
        assert page.locator(marker).count() == 1
    assert (page.locator("#flips").count() == 1) == any(r["flips_with"] for r in rows)


def test_a_phone_sees_the_comparison_as_one_card_per_kind(
    site: Site, browser: Any, shots: Path
) -> None:
    """Finding: on a phone the comparison chart's labels were unreadable, and the run, source
    and error columns cut off."""
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    tab = context.new_page()
    tab.goto(f"{site.url}/ui/models/{NS_MODEL}/compare")
    assert tab.evaluate("document.documentElement.scrollWidth") <= 391
    rows = site.json(f"/models/{NS_MODEL}/compare")["rows"]
    assert rows
    for row in rows:
        card = tab.locator(f'#compare tr[data-kind="{row["device_kind"]}"]')
        box = card.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 391, box
        for field in ("time_s", "full_run_s", "source", "coverage"):
            cell = card.locator(f'[data-field="{field}"]')
            if not cell.inner_text().strip():
                continue
            shown = cell.bounding_box()
            assert shown is not None and shown["x"] + shown["width"] <= 391, (field, shown)
            size = cell.evaluate("e => parseFloat(getComputedStyle(e).fontSize)")
            assert size >= 12, (field, size)
    # The chart keeps its own size (labels 12 px) in a strip that scrolls by itself.
    label = tab.locator("svg.chart.compare text.label").first
    assert label.evaluate("e => e.getBoundingClientRect().height") >= 12
    tab.screenshot(path=str(shots / "ui-compare-phone.png"), full_page=True)
    context.close()


def test_an_unknown_model_is_a_404_page(site: Site, browser: Any) -> None:
    """A page, not a stack trace: the API's message, status 404 (Chromium logs the 404 itself
    on the console, so this page is watched for script errors only)."""
    context = browser.new_context()
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    response = tab.goto(f"{site.url}/ui/models/no-such-model")
    assert response is not None and response.status == 404
    assert "no-such-model" in tab.locator("p.error").inner_text()
    assert not errors
    context.close()


def _error_text(estimate: dict[str, Any]) -> str:
    """The model page's error cell: the error, and its interval where it has one."""
    error = fmt.percent(estimate["time_error"], signed=True)
    iv = estimate["time_error_interval"]
    if iv is not None and iv["low"] is not None and iv["high"] > iv["low"]:  # with its noise
        ends = f"{fmt.percent(iv['low'], signed=True)} … {fmt.percent(iv['high'], signed=True)}"
        error += f" ({ends}, {fmt.percent(iv['level'])})"
        error += " within noise" if estimate["within_noise"] else ""
    elif estimate["time_error"] is not None and fmt.imported(estimate["full_run_source"]):
        error += " (no interval: imported as one figure)"
    return str(error)


def _cell(row: Any, field: str) -> str:
    return str(row.locator(f'[data-field="{field}"]').inner_text()).strip()


def _sort_values(page: Page, table: str, column: int) -> list[str]:
    return [
        v
        for v in page.eval_on_selector_all(
            f"{table} tbody tr",
            f"rows => rows.map(r => r.cells[{column}].dataset.sort)",
        )
        if v != ""
    ]


def test_a_newcomer_finds_every_model_and_is_never_misled(
    site: Site, browser: Any, page: Page, shots: Path
) -> None:
    """Nav → models (states per kind, the filter) → a model measured whole only: its run, no
    estimate of 0 s; a measured model's trust line and flag legend; on a phone, the time by
    operator type before anything else (tests/ui/test_trust_pages.py has the rest)."""
    add_whole_only(site.db_url)
    page.goto(f"{site.url}/ui/")
    page.locator('nav a[href="/ui/models"]').click()
    page.wait_for_url("**/ui/models")
    row = page.locator(f'#models tr[data-model="{WHOLE}"]')
    assert row.locator(f'li[data-kind="{KINDS[0]}"]').get_attribute("data-state") == (
        "whole model only"
    )
    page.select_option("#not-measured-on", KINDS[1])
    page.locator('form[role="search"] button').click()
    page.wait_for_url("**not_measured_on=*")
    listed = site.json("/models", not_measured_on=KINDS[1])
    assert page.locator("#models tbody tr").count() == listed["total"] > 0
    page.screenshot(path=str(shots / "ui-models-not-measured.png"), full_page=True)
    page.locator(f'#models tr[data-model="{WHOLE}"] th a').click()
    page.wait_for_url(f"**/ui/models/{WHOLE}")
    trust = page.locator("#trust").inner_text()
    assert "no estimate" in trust and fmt.si(RUN_S, "s") in trust and "−100" not in trust
    page.screenshot(path=str(shots / "ui-model-whole-only.png"), full_page=True)
    page.goto(f"{site.url}/ui/models/{MODEL}?device_kind={KINDS[0]}")
    estimate = site.json(f"/models/{MODEL}/estimate", device_kind=KINDS[0], limit=1000)
    assert fmt.percent(estimate["coverage"]) in page.locator("#trust").inner_text()
    flags = {f for r in estimate["configurations"] for f in (r["flags"] or "").split(",") if f}
    for flag in flags:  # the whole name: "noisy" is inside "host_noisy" and "energy_noisy"
        exact = re.compile(rf"^{re.escape(flag)}$")
        assert page.locator("#flag-legend code", has_text=exact).count() == 1
    phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    tab = phone.new_page()
    tab.goto(f"{site.url}/ui/models/{MODEL}?device_kind={KINDS[0]}")
    headers = tab.locator("#by-op thead th").all_inner_texts()
    assert [h.strip() for h in headers[1:3]] == ["time", "share"]
    time_cell = tab.locator("#by-op tbody tr").first.locator('[data-field="time_s"]')
    box = time_cell.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 390  # on screen, not scrolled to
    assert tab.evaluate("document.documentElement.scrollWidth") <= 391
    tab.screenshot(path=str(shots / "ui-model-phone.png"), full_page=True)
    phone.close()


def test_the_api_reference_renders_offline_under_the_csp(site: Site, page: Page) -> None:
    """/docs loads nothing from another site (every request elsewhere is cut) and runs no
    script; the pages' CSP leaves it whole: a console error would fail the test."""
    elsewhere: list[str] = []

    def only_here(route: Any) -> None:
        if route.request.url.startswith(site.url):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", only_here)
    response = page.goto(f"{site.url}/docs")
    assert response is not None and response.status == 200
    assert "content-security-policy" in response.headers
    assert "the REST API" in _text(page, "h1")
    enqueue = page.locator("#enqueue")
    assert "POST /models/{name}/jobs" in enqueue.locator("h2").inner_text()
    assert enqueue.locator("pre").inner_text().startswith("curl -X POST")
    assert page.locator("#schema-EnqueueIn").is_visible()
    assert not elsewhere, elsewhere


def test_the_csp_leaves_the_pages_scripts_working(site: Site, page: Page) -> None:
    """Sorting (ui.js) and the time-share bars (drawn from data-share: no style attribute)."""
    page.goto(f"{site.url}/ui/models/{MODEL}")
    bars = page.locator(".bar[data-share]")
    assert bars.count() > 0
    widths = bars.evaluate_all("bars => bars.map(b => b.getBoundingClientRect().width)")
    shares = bars.evaluate_all("bars => bars.map(b => Number(b.dataset.share))")
    assert any(w > 0 for w in widths) and all(
        (w > 0) == (s > 0) for w, s in zip(widths, shares, strict=True)
    ), (widths, shares)
    assert page.locator("table.sortable th button").count() > 0  # ui.js ran
