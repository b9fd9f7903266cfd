"""The pages without a browser, on SQLite and PostgreSQL: what each serves, tokens, bad input."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.app import create_app
from api.ui import format as fmt
from api.ui.pages import COOKIE
from operator_db.config import Settings
from operator_db.db.ingest import ingest_specs
from operator_db.db.store import Store
from operator_db.specs.io import load_spec
from tests.helpers import EXAMPLE_SPECS
from tests.ui.seed import ERROR, KINDS, MODEL, NS_MODEL, OWNER, Seeded, seed

READ = "reader-token"


@pytest.fixture
def seeded(db_url: str) -> Seeded:
    return seed(db_url)


@pytest.fixture
def client(db_url: str, seeded: Seeded) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=db_url))) as c:
        yield c


def test_every_page_answers_html(client: TestClient, seeded: Seeded) -> None:
    keys = [c["key"] for c in client.get("/configurations").json()["items"]]
    for path in (
        "/ui/",
        f"/ui/models/{MODEL}",
        f"/ui/models/{MODEL}?device_kind={KINDS[1]}",
        "/ui/models",
        "/ui/models?search=tiny&offset=0",
        f"/ui/models/{NS_MODEL}",
        "/ui/jobs",
        "/ui/jobs?status=failed",
        "/ui/jobs?status=&device_kind=",
        "/ui/jobs/rows?status=running",
        f"/ui/jobs/{seeded.failed_job}",
        f"/ui/configurations/{keys[0]}",
        "/ui/login",
    ):
        response = client.get(path)
        assert response.status_code == 200, (path, response.text[:300])
        assert response.headers["content-type"].startswith("text/html")
        assert '<main id="main">' in response.text or path.startswith("/ui/jobs/rows")
    assert client.get("/ui", follow_redirects=False).headers["location"] == "/ui/"
    assert client.get("/ui/static/ui.css").status_code == 200
    assert client.get("/ui/static/ui.js").status_code == 200


def test_the_model_page_shows_the_api_estimate_of_each_kind(client: TestClient) -> None:
    html = client.get(f"/ui/models/{MODEL}").text
    for kind in KINDS:
        estimate = client.get(f"/models/{MODEL}/estimate", params={"device_kind": kind}).json()
        row = re.search(rf'<tr data-kind="{re.escape(kind)}".*?</tr>', html, re.S)
        assert row is not None, kind
        assert fmt.si(estimate["total_time_s"], "s") in row.group(0)
        assert fmt.percent(estimate["time_error"], signed=True) in row.group(0)
        assert estimate["full_run_time_s"] is not None
        # The energy error with its interval over the trials of both sides, where it is bounded
        # (two trials of the fake's coarse counter: an end is often infinite, null in JSON), and
        # none where neither side has a spread (equal trials), never one of zero width.
        ev = estimate["energy_error_interval"]
        if ev is None:
            sides = (estimate["energy_interval"], estimate["full_run_energy_interval"])
            assert all(s is not None and s["low"] == s["high"] for s in sides), estimate
            assert 'data-field="energy_error_interval"' not in row.group(0)
            continue
        assert ev["low"] is not None, estimate
        shown = 'data-field="energy_error_interval"' in row.group(0)
        assert shown is (ev["high"] is not None and ev["high"] > ev["low"])
        if shown:
            low, high = (fmt.percent(ev[end], signed=True) for end in ("low", "high"))
            assert f"({low} … {high}" in row.group(0)


def test_predictions_are_asked_for_and_their_absence_said(client: TestClient) -> None:
    """No predictor on the kind (``opdb predict train`` never ran): the measured ones, and why."""
    html = client.get(f"/ui/models/{MODEL}", params={"predict": "true"}).text
    assert "No prediction:" in html and "Measured ones only" in html
    # Fully measured: nothing to predict, so not offered (tests/ui/test_trust_pages.py).
    assert "Predict the" not in client.get(f"/ui/models/{MODEL}").text
    # A kind the model is not measured on: said so, never another kind in its place.
    other = client.get(f"/ui/models/{MODEL}", params={"device_kind": "cpu:nowhere"}).text
    assert "Nothing measured on <strong>cpu:nowhere</strong>" in other
    assert not re.findall(r'<tr data-key="', other)


def test_the_jobs_page_says_who_holds_what_and_why_a_job_failed(
    client: TestClient, seeded: Seeded
) -> None:
    html = client.get("/ui/jobs").text
    assert OWNER in html and ERROR in html
    rows = client.get("/ui/jobs/rows", params={"status": "failed"}).text
    assert f'data-job="{seeded.failed_job}"' in rows
    assert f'data-job="{seeded.running_job}"' not in rows


def test_bad_input_gets_a_page_with_the_apis_status(client: TestClient) -> None:
    missing = client.get("/ui/models/no-such-model")
    assert missing.status_code == 404 and "no-such-model" in missing.text
    assert client.get("/ui/configurations/deadbeef").status_code == 404
    assert client.get("/ui/jobs/999999").status_code == 404
    assert client.get("/ui/jobs/99999999999999999999").status_code == 422  # not a job id
    bad = client.get("/ui/jobs", params={"status": "exploded"})
    assert bad.status_code == 422 and "unknown job status" in bad.text
    assert client.get("/ui/models/x", params={"device_kind": "a" * 201}).status_code == 422
    # Markup in a name is text, never markup.
    hostile = client.get("/ui/models/<img src=x onerror=alert(1)>")
    assert hostile.status_code == 404 and hostile.headers["content-type"].startswith("text/html")
    assert "<img src=x" not in hostile.text and "&lt;img src=x" in hostile.text


def test_protected_reads_ask_for_a_token_and_keep_it_in_a_cookie(db_url: str) -> None:
    settings = Settings(
        database_url=db_url, api_read_tokens=[SecretStr(READ)], api_protect_reads=True
    )
    with TestClient(create_app(settings)) as c:
        first = c.get("/ui/jobs?status=failed", follow_redirects=False)
        assert first.status_code == 303
        assert first.headers["location"] == "/ui/login?next=/ui/jobs%3Fstatus%3Dfailed"
        wrong = c.post(
            "/ui/login", data={"token": "nope", "next": "/ui/jobs"}, follow_redirects=False
        )
        assert wrong.status_code == 303 and "failed=true" in wrong.headers["location"]
        assert COOKIE not in wrong.cookies
        # Only this app's pages are places to go back to.
        elsewhere = c.post(
            "/ui/login", data={"token": READ, "next": "//evil.example/"}, follow_redirects=False
        )
        assert elsewhere.headers["location"] == "/ui/"
        good = c.post("/ui/login", data={"token": READ, "next": "/ui/jobs"}, follow_redirects=False)
        assert good.status_code == 303 and good.headers["location"] == "/ui/jobs"
        assert "httponly" in good.headers["set-cookie"].lower()
        assert "samesite=strict" in good.headers["set-cookie"].lower()
        assert c.get("/ui/jobs").status_code == 200  # the cookie
        c.cookies.clear()
        assert c.get("/ui/", headers={"Authorization": f"Bearer {READ}"}).status_code == 200
        assert c.get("/ui/", follow_redirects=False).status_code == 303


def _row(html: str, attribute: str, value: str) -> str:
    pattern = rf'<(tr|li|article)[^>]* {attribute}="{re.escape(value)}".*?</\1>'
    found = re.search(pattern, html, re.S)
    assert found is not None, (attribute, value)
    return found.group(0)


def test_the_overview_shows_imported_gpus_with_their_spec_and_source(client: TestClient) -> None:
    html = client.get("/ui/").text
    for kind in client.get("/device-kinds").json():
        card = _row(html, "data-kind", kind["name"])
        for source in kind["sources"]:
            item = _row(card, "data-source", source["source"])
            assert f'data-field="results">{source["results"]}<' in item
            assert ("Imported" in item) == source["imported"]
            assert ("Measured" in item) == (not source["imported"])
        if kind["spec"] is not None:
            assert f'data-field="sms">{kind["spec"]["sms"]}<' in card
            cc, memory = kind["spec"]["compute_capability"], kind["spec"]["memory_type"]
            assert f'data-field="compute_capability">{cc}<' in card
            assert f'data-field="memory_type">{memory}<' in card
            assert f'data-field="board_power_w">{kind["spec"]["board_power_w"]:g} W<' in card
    l4 = _row(html, "data-kind", "NVIDIA L4")
    assert "Num_Sm 60 → 58" in l4 and "neusight" in l4 and "MIT" in l4
    (source,) = client.get("/data-sources").json()["items"]
    row = _row(html.split('id="data-sets"')[1], "data-source", "neusight")
    assert f'data-field="results">{source["results"]}<' in row
    assert f'data-field="model_runs">{source["model_runs"]}<' in row
    # The newest results: the import, then one own measurement; each says which it is.
    newest = html.split('id="newest"')[1]
    rows = re.findall(r'<tr data-id="(\d+)">.*?/ui/configurations/(\w+).*?</tr>', newest, re.S)
    assert len(rows) == 20
    for result_id, key in rows:
        results = client.get(f"/configurations/{key}/measurements").json()["items"]
        (result,) = [r for r in results if r["id"] == int(result_id)]
        assert fmt.source(result["source"]) in _row(newest, "data-id", result_id)
    assert newest.count("imported: neusight") == 19 and newest.count("own measurement") == 1
    assert 'href="/ui/models"' in html


def test_the_models_page_lists_every_model_measured_or_not(client: TestClient, db_url: str) -> None:
    with Store.open(db_url) as store, store.transaction() as session:
        ingest_specs(session, [load_spec(EXAMPLE_SPECS / "mlp-small-b8.yaml", max_bytes=10**6)])
    html = client.get("/ui/models").text
    listed = client.get("/models").json()
    assert f'data-field="total">{listed["total"]}<' in html
    for model in listed["items"]:
        row = _row(html, "data-model", model["name"])
        for kind in model["device_kinds"]:
            item = _row(row, "data-kind", kind["device_kind"])
            assert f'data-field="configs_with_results">{kind["configs_with_results"]}<' in item
            assert ("imported" in item) == bool(
                kind["configs_imported"] or set(kind["model_runs"]) - {"measured"}
            )
    never = _row(html, "data-model", "mlp-small-b8")  # ingested, never measured
    assert never.count('data-state="not measured"') == len(client.get("/device-kinds").json())
    unmeasured = client.get("/ui/models/mlp-small-b8").text
    assert "No figure on any device kind yet" in unmeasured
    later = client.get("/ui/models", params={"offset": 2}).text
    names = [m["name"] for m in listed["items"]]
    assert f'data-model="{names[0]}"' not in later and f'data-model="{names[2]}"' in later
    assert 'rel="prev"' in later and 'rel="next"' not in later
    ns = _row(html, "data-model", NS_MODEL)
    assert "imported: neusight" in _row(ns, "data-kind", "Tesla T4")
    found = client.get("/ui/models", params={"search": "wide"}).text
    assert 'data-model="tiny-wide"' in found and f'data-model="{MODEL}"' not in found
    assert client.get("/ui/models", params={"offset": -1}).status_code == 422


def test_the_model_page_says_which_figures_are_imported(client: TestClient) -> None:
    html = client.get(f"/ui/models/{NS_MODEL}", params={"device_kind": "Tesla T4"}).text
    for kind in ("NVIDIA L4", "Tesla T4"):
        estimate = client.get(f"/models/{NS_MODEL}/estimate", params={"device_kind": kind}).json()
        row = _row(html, "data-kind", kind)
        assert fmt.si(estimate["total_time_s"], "s") in row
        assert fmt.source(estimate["full_run_source"]) in row
        for source, n in estimate["sources"].items():
            assert f"{fmt.source(source)}: {n}" in row
    t4 = _row(html, "data-kind", "Tesla T4")
    assert "imported: neusight" in t4.split('data-field="full_run_source"')[1][:80]
    table = html.split('id="configurations"')[1]
    assert "own measurement" in table and "imported: neusight" in table
    assert "not measured" in table  # the L4's configurations have no figure on the T4
    assert "imported: 31 of 36 configurations" in html  # the estimate's note


def test_the_configuration_page_names_each_results_source(
    client: TestClient, seeded: Seeded
) -> None:
    html = client.get(f"/ui/configurations/{seeded.own_key}").text
    results = client.get(f"/configurations/{seeded.own_key}/measurements").json()["items"]
    for result in results:
        row = _row(html, "data-id", str(result["id"]))
        assert fmt.source(result["source"]) in row
        if result["source_file"]:
            assert result["source_file"] in row and f"line {result['source_line']}" in row
    assert "· imported: neusight" in html  # its own series in the chart
