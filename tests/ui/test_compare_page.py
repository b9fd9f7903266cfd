"""The page "which GPU for this model" (``/ui/models/NAME/compare``) without a browser, and its
bar chart (``api.ui.svg.compare_svg``): figures against the API's, the link from the model page,
the empty state, escaping, readable ticks."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape

from api.app import create_app
from api.schemas_compare import CompareRowOut
from api.ui import format as fmt
from api.ui.svg import compare_svg
from operator_db.config import Settings
from operator_db.db.ingest import ingest_specs
from operator_db.db.store import Store
from operator_db.specs.io import load_spec
from tests.helpers import EXAMPLE_SPECS
from tests.ui.seed import KINDS, MODEL, NS_MODEL, seed

HINT = "train one with <code>opdb predict across train</code>"


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    seed(db_url)
    with Store.open(db_url) as store, store.transaction() as session:
        ingest_specs(session, [load_spec(EXAMPLE_SPECS / "mlp-small-b8.yaml", max_bytes=10**6)])
    with TestClient(create_app(Settings(database_url=db_url))) as c:
        yield c


def _row(html: str, kind: str) -> str:
    found = re.search(rf'<tr data-kind="{re.escape(kind)}".*?</tr>', html, re.S)
    assert found is not None, kind
    return found.group(0)


def test_the_page_shows_the_api_comparison_as_a_table_and_a_chart(client: TestClient) -> None:
    for name in (MODEL, NS_MODEL):
        response = client.get(f"/ui/models/{name}/compare")
        assert response.status_code == 200, response.text[:300]
        assert response.headers["content-type"].startswith("text/html")
        html = response.text
        assert f"Which GPU for {name}" in html
        rows = client.get(f"/models/{name}/compare").json()["rows"]
        assert rows, name
        assert html.count('<svg class="chart compare"') == 1
        svg = html[html.index("<svg") : html.index("</svg>")]
        # One bar per kind, in the API's order (fastest first), coloured by how it is known.
        assert re.findall(r'<g data-kind="([^"]+)" data-how="([^"]+)"', svg) == [
            (r["device_kind"], r["how"]) for r in rows
        ]
        for row in rows:
            cells = _row(html, row["device_kind"])
            time_s = row["time_s"]
            assert f'data-field="time_s" data-sort="{time_s!r}">{fmt.ms(time_s)}<' in cells
            assert f'data-field="how">{row["how"]}<' in cells
            assert 'data-field="coverage"' in cells and fmt.percent(row["coverage"]) in cells
            assert 'data-field="energy_j"' in cells and fmt.si(row["energy_j"], "J") in cells
        # No cross-device model is stored: the kinds measured only, and how to train one.
        assert HINT in html
        for left in client.get(f"/models/{name}/compare").json()["left_out"]:  # said, with why
            assert f'<li data-kind="{left["device_kind"]}"><strong>' in html
            assert str(escape(left["why"])) in html
    assert {r["device_kind"] for r in client.get(f"/models/{MODEL}/compare").json()["rows"]} == set(
        KINDS
    )


def test_the_model_page_links_to_the_comparison(client: TestClient) -> None:
    html = client.get(f"/ui/models/{MODEL}").text
    assert f'<a href="/ui/models/{MODEL}/compare" id="compare-link">Compare across GPUs</a>' in html
    page = client.get(f"/ui/models/{MODEL}/compare").text
    assert f'<a href="/ui/models/{MODEL}">the model</a>' in page


def test_a_model_without_figures_says_so(client: TestClient) -> None:
    html = client.get("/ui/models/mlp-small-b8/compare").text
    assert "no kind has figures for this model" in html
    assert HINT in html
    assert "<svg" not in html and 'id="compare"' not in html


def test_an_unknown_model_is_a_404_page(client: TestClient) -> None:
    response = client.get("/ui/models/no-such-model/compare")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert "no-such-model" in response.text


def _row_out(kind: str, how: str, time_s: float, **more: Any) -> CompareRowOut:
    figures: dict[str, Any] = {
        "low_s": None,
        "high_s": None,
        "energy_j": None,
        "bound_by": None,
        "coverage": 1.0,
        "source": "measured",
        "full_run_s": None,
        "level": None,
    }
    return CompareRowOut(device_kind=kind, how=how, time_s=time_s, **(figures | more))


def test_the_chart_has_whiskers_a_legend_and_readable_log_ticks() -> None:
    rows = [
        _row_out("H100", "predicted", 8e-4, low_s=5e-4, high_s=1.3e-3, level=0.9),
        _row_out("A100", "measured", 2e-3),
        _row_out("T4", "measured run", 3.0),
    ]
    svg = compare_svg("m", rows)
    assert 'role="img"' in svg and "log axis" in svg
    assert svg.count('class="whisker"') == 1
    assert re.findall(r'class="legend" data-how="([^"]+)"', svg) == [
        "measured",
        "measured run",
        "predicted",
    ]
    ticks = re.findall(r'text-anchor="middle">([^<]+)<', svg)
    assert ticks == ["100 µs", "1 ms", "10 ms", "100 ms", "1 s", "10 s"]
    assert not re.search(r"\de[+-]\d", svg)  # no "1e+03" anywhere
    assert "0.500 … 1.30 ms (90 %)" in svg
    assert "3,000 ms" in svg


def test_the_chart_is_linear_over_a_narrow_range_and_escapes_names() -> None:
    rows = [
        _row_out("<script>alert(1)</script> & a kind with a very long name", "measured", 1e-3),
        _row_out('say "hi"', "measured", 2.5e-3),
    ]
    svg = compare_svg("<b>", rows)
    assert "linear axis" in svg and "<script>" not in svg and "<b>" not in svg
    assert "&lt;script&gt;" in svg and "&amp;" in svg and "&quot;hi&quot;" in svg
    ticks = re.findall(r'text-anchor="middle">([^<]+)<', svg)
    assert ticks == ["0 s", "1 ms", "2 ms", "3 ms"]
    assert compare_svg("m", []) == ""


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(7.65e-5, "0.0765"), (2.1e-3, "2.10"), (0.0125, "12.5"), (1.2345, "1,234"), (None, "–")],
)
def test_times_are_written_in_ms_without_an_exponent(seconds: float | None, text: str) -> None:
    assert fmt.ms(seconds) == text


def test_a_page_names_the_predictor_and_each_family_s_view() -> None:
    from api.ui.format import predictor

    across = {
        "method": "across devices",
        "version": 3,
        "mode": "zero-shot",
        "from_kinds": ["Tesla T4", "Tesla P4"],
        "views": {"bmm": "0.5 learned + 0.5 nearest × ratio^0.5", "linear": "nearest × ratio"},
    }
    assert predictor(across) == (
        "the cross-device model v3, zero-shot from 2 GPUs; "
        "bmm by 0.5 learned + 0.5 nearest × ratio^0.5, linear by nearest × ratio"
    )
    own = {"version": 2, "device_kind": "cpu", "samples": 40}
    assert predictor(own) == "the cpu predictor v2, 40 configurations"
    assert predictor(None) == "–"


def test_a_run_is_a_marker_on_its_bar_with_the_error_against_it() -> None:
    rows = [
        _row_out("H100", "predicted", 0.199, level=0.9),
        _row_out(
            "A100",
            "imported",
            0.727,
            full_run_s=0.536,
            run_error=0.356,
            run_error_text="+35.6 % (no interval: imported as one figure)",
        ),
        _row_out("T4", "imported run", 3.0, full_run_s=3.0),
    ]
    svg = compare_svg("m", rows)
    # Who gave each figure, in the legend as in the table: imported is never "measured".
    assert re.findall(r'class="legend" data-how="([^"]+)"', svg) == [
        "imported",
        "imported run",
        "predicted",
        "run",
    ]
    # One marker: the T4's run is its bar.
    assert svg.count('<path class="run-marker" d="M') == 2  # the A100's and the legend's
    assert 'data-how="run"' in svg and "whole-model run" in svg
    assert "A100: whole-model run 536 ms; +35.6 % (no interval: imported as one figure)" in svg


def test_the_model_page_opens_on_the_fastest_kind_and_ranks_its_kinds(
    client: TestClient,
) -> None:
    """Finding: the page opened on the alphabetically first kind, its table sorted by name."""
    for name in (MODEL, NS_MODEL):
        html = client.get(f"/ui/models/{name}").text
        listed = re.findall(r'<tr data-kind="([^"]+)" ', html)
        assert listed, name
        summaries = {
            kind: client.get(f"/models/{name}/estimate", params={"device_kind": kind}).json()
            for kind in listed
        }
        ranks = [summaries[k]["full_run_time_s"] or summaries[k]["total_time_s"] for k in listed]
        assert ranks == sorted(ranks), (name, listed, ranks)
        current = re.search(r'<tr data-kind="([^"]+)" aria-current="true"', html)
        assert current is not None and current.group(1) == listed[0]
        compared = {
            r["device_kind"]: r for r in client.get(f"/models/{name}/compare").json()["rows"]
        }
        for kind in listed:  # "bound by": the same answer on the model page and the comparison
            bound = summaries[kind]["roofline_bound"]
            assert f'data-field="roofline_bound">{bound or fmt.DASH}' in _row(html, kind)
            if kind in compared:
                assert compared[kind]["bound_by"] == bound
    html = client.get(f"/ui/models/{NS_MODEL}").text
    row = _row(html, "Tesla T4")
    assert "no interval: imported as one figure" in row


def test_a_partial_sum_says_its_coverage_on_the_bar_and_the_axis() -> None:
    """Finding: every bar a partial sum (78.8 % of calls) on an axis of "time per forward"."""
    rows = [_row_out("A", "imported", 0.7, coverage=0.788), _row_out("B", "measured", 0.9)]
    svg = compare_svg("m", rows)
    assert "700 ms (79% of calls)" in svg
    assert "a partial sum: 78.8% of the model" in svg
    assert "a bar under 100 % of calls is a partial sum" in svg
    assert "900 ms<" in svg  # a whole sum says nothing more
    whole = compare_svg("m", [_row_out("B", "measured", 0.9)])
    assert "partial" not in whole


def test_kinds_whose_estimates_flip_their_runs_are_named(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case, forced: the A100's estimate above the V100's, its run below."""
    import operator_db.predict.across.compare as compare_module
    from api.routes import models

    rows = compare_module.ranked(
        [
            compare_module.KindRow(
                "A100", "imported", 0.727, None, None, None, None, 0.79, "imported: x", 0.536
            ),
            compare_module.KindRow(
                "V100", "imported", 0.700, None, None, None, None, 0.79, "imported: x", 0.729
            ),
        ]
    )
    monkeypatch.setattr(compare_module, "compare", lambda session, name, **_: rows)
    models._compared.clear()
    html = client.get(f"/ui/models/{MODEL}/compare").text
    models._compared.clear()
    note = html.split('id="flips"')[1].split("</div>")[0]
    assert "A100" in note and "V100" in note
    assert re.findall(r'<tr data-kind="([^"]+)"', html) == ["A100", "V100"]  # by their runs
    for kind in ("A100", "V100"):
        assert "order flipped" in _row(html, kind)
