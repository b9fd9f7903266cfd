"""The LLM pages in a real browser (headless Chromium, as ``tests/ui/test_browser.py``).

A small Llama is harvested and measured on the fake device; the app serves that database on a
loopback port. The LLM list leads to the LLM's page, whose table shows what the JSON API says,
whose chart and kinds table are drawn, with no JavaScript or console error, and a phone sees it
without the page scrolling sideways.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from playwright.sync_api import Page

from api.app import create_app
from api.ui import format as fmt
from operator_db.config import Settings
from tests.llm.common import measured_tiny
from tests.ui.test_browser import _free_port, browser, page, shots  # noqa: F401 - fixtures


@pytest.fixture
def served(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The small Llama measured into a SQLite file, served; yield the site's URL.

    One database: the pages' queries are the API's, tested on SQLite and PostgreSQL in
    ``test_api.py``."""
    db_url = f"sqlite:///{tmp_path / 'llm.sqlite'}"
    measured_tiny(capsys, db_url, monkeypatch)
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
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_the_llm_pages_show_what_the_api_says(
    served: str,
    page: Page,  # noqa: F811 - the fixture imported above
    browser: Any,  # noqa: F811
    shots: Path,  # noqa: F811
) -> None:
    with httpx.Client(base_url=served, timeout=30) as api:
        (row,) = api.get("/llms/tiny/generation").json()
        kinds = api.get("/llms/tiny/compare").json()
    page.goto(f"{served}/ui/llms")
    assert page.title().startswith("LLMs")
    page.locator('[data-llm="tiny"] a').first.click()
    page.wait_for_url("**/ui/llms/tiny")
    point = page.locator('#generation tr[data-batch="2"][data-prompt="8"][data-new="4"]')
    for figure in ("ttft_s", "tpot_s", "total_s"):
        cell = point.locator(f'td[data-field="{figure}"]')
        assert cell.inner_text().strip() == fmt.ms(row[figure]["value"])
        assert "95 %" in (cell.get_attribute("title") or "")  # its interval, on hover
        run = point.locator(f'td[data-field="{figure[:-2]}_run_s"]').inner_text().strip()
        assert run == fmt.ms(row["measured"][figure]["value"])
        error = point.locator(f'td[data-field="{figure[:-2]}_error"]').inner_text().strip()
        assert error.endswith(("≈", "≠")), error
    chart = page.locator("figure svg")
    assert chart.count() == 1 and chart.locator("path, polyline").count() >= 2  # composed, run
    assert "TPOT against the context" in page.locator("figure").inner_text()
    shown_kinds = page.locator("#kinds tbody tr")
    assert shown_kinds.count() == len(kinds["kinds"] if isinstance(kinds, dict) else kinds)
    assert page.locator('#kinds tr[data-kind="fake:FakeGPU"] [data-field="how"]').inner_text() == (
        "measured"
    )
    page.screenshot(path=str(shots / "llm.png"), full_page=True)

    phone = browser.new_context(viewport={"width": 390, "height": 844})
    small = phone.new_page()
    small.goto(f"{served}/ui/llms/tiny")
    sideways = small.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    small.screenshot(path=str(shots / "llm-phone.png"), full_page=True)
    phone.close()
    assert sideways <= 1, f"the LLM page scrolls {sideways} px sideways on a phone"
