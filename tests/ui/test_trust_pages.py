"""Pages that never mislead: no 0 s estimate, every model listed with its state, a trust line.

Each test is one finding of issue 37 (a fresh clone after the demo): a model measured whole
only, the models no page linked to, one configuration's two figures, a looped-alone estimate
without a warning, hash prefixes, flags without a legend, an unlabelled spec peak, numbers with
exponents, "1 results", a kind without figures that showed another kind.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape
from sqlalchemy import select

from api.app import create_app
from api.ui import format as fmt
from api.ui import trust
from api.ui.svg import time_series_svg
from operator_db.config import Settings
from operator_db.db import queries
from operator_db.db.ingest import ingest_specs
from operator_db.db.models import FullModelRun, Model, utcnow
from operator_db.db.store import Store
from operator_db.measure.flags import MEANING, Flag
from operator_db.predict import mix
from operator_db.roofline.chips import match_chip
from operator_db.roofline.record import store_spec_peaks
from operator_db.specs.io import load_spec
from tests.helpers import EXAMPLE_SPECS, result_row
from tests.ui.seed import KINDS, MODEL, OTHER, Seeded, seed

WHOLE = "mlp-small-b8"
"""A model measured whole only on ``KINDS[0]`` (its run: ``RUN_S``), nothing on ``KINDS[1]``."""
RUN_S = 2.5e-3


def add_whole_only(db_url: str) -> None:
    """Store ``WHOLE`` and a whole-model run of it on ``KINDS[0]``, none of its operators."""
    with Store.open(db_url) as store, store.transaction() as session:
        ingest_specs(session, [load_spec(EXAMPLE_SPECS / f"{WHOLE}.yaml", max_bytes=10**6)])
        kind = queries.get_device_kind(session, KINDS[0])
        model_id = session.scalars(select(Model.id).where(Model.name == WHOLE)).one()
        session.add(
            FullModelRun(
                model_id=model_id,
                device_kind_id=kind.id,
                created_at=utcnow(),
                **result_row(time_median_s=RUN_S),
            )
        )


@pytest.fixture
def seeded(db_url: str) -> Seeded:
    found = seed(db_url)
    add_whole_only(db_url)
    return found


@pytest.fixture
def client(db_url: str, seeded: Seeded) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=db_url))) as c:
        yield c


def _item(html: str, attribute: str, value: str) -> str:
    pattern = rf'<(tr|li|p)[^>]* {attribute}="{re.escape(value)}".*?</\1>'
    found = re.search(pattern, html, re.S)
    assert found is not None, (attribute, value)
    return found.group(0)


def test_a_model_measured_whole_only_has_no_estimate_but_its_run(client: TestClient) -> None:
    """Finding: "estimate 0 s, error −100.0 %", 0 s per operator type, a broken roofline."""
    api = client.get(f"/models/{WHOLE}/estimate", params={"device_kind": KINDS[0]}).json()
    assert api["total_time_s"] is None and api["time_error"] is None
    assert "no operator" in api["no_estimate"] and api["full_run_time_s"] == RUN_S
    html = client.get(f"/ui/models/{WHOLE}").text
    row = _item(html, "data-kind", KINDS[0])
    assert "no estimate" in row and "−100.0 %" not in row and ">0 s<" not in row
    assert fmt.si(RUN_S, "s") in row
    trust = _item(html, "id", "trust")
    assert "no estimate" in trust and fmt.si(RUN_S, "s") in trust
    assert 'id="no-estimate"' in html
    assert 'id="by-op"' not in html and "roofline.svg" not in html  # nothing to draw


def test_every_model_is_listed_with_its_state_per_kind_and_a_filter(client: TestClient) -> None:
    """Finding: 9 of 22 models could not be reached from any page."""
    assert 'href="/ui/models"' in client.get("/ui/jobs").text  # the nav, on every page
    html = client.get("/ui/models").text
    listed = client.get("/models", params={"limit": 100}).json()
    for model in listed["items"]:
        row = _item(html, "data-model", model["name"])
        assert f'data-field="params">{fmt.si(model["params"], "")}<' in row
        for kind in KINDS:  # every kind, measured or not, has a state
            assert f'data-kind="{kind}"' in row
    whole = _item(html, "data-model", WHOLE)
    assert 'data-state="whole model only"' in _item(whole, "data-kind", KINDS[0])
    assert 'data-state="not measured"' in _item(whole, "data-kind", KINDS[1])
    assert 'data-state="complete"' in _item(_item(html, "data-model", MODEL), "data-kind", KINDS[0])
    missing = client.get("/ui/models", params={"not_measured_on": KINDS[1]}).text
    assert f'data-model="{WHOLE}"' in missing and f'data-model="{MODEL}"' not in missing
    api = client.get("/models", params={"not_measured_on": KINDS[1]}).json()
    assert WHOLE in {m["name"] for m in api["items"]} and MODEL not in {
        m["name"] for m in api["items"]
    }
    assert f'data-field="total">{api["total"]}<' in missing
    assert client.get("/models", params={"not_measured_on": "no:such"}).status_code == 404


def test_the_trust_line_says_error_coverage_flags_and_context(client: TestClient) -> None:
    """Finding: the headline said nothing of how far to trust it; flags had no legend."""
    html = client.get(f"/ui/models/{MODEL}", params={"device_kind": KINDS[0]}).text
    api = client.get(f"/models/{MODEL}/estimate", params={"device_kind": KINDS[0]}).json()
    trust = _item(html, "id", "trust")
    assert fmt.percent(api["time_error"], signed=True) in trust
    assert fmt.percent(api["coverage"]) in trust and "flagged figures" in trust
    assert ("looped alone" in trust) == (api["context"] != "replay")
    shown = {f for r in api["configurations"] for f in (r["flags"] or "").split(",") if f}
    legend = html.split('id="flag-legend"')[1] if shown else ""
    for flag in shown:
        assert f"<code>{flag}</code>" in legend and str(escape(MEANING[Flag(flag)])) in legend


def test_a_looped_alone_estimate_is_warned_of(client: TestClient) -> None:
    """Finding: resnet50-b1 (looped alone, no run) showed 52.8 ms with no warning."""
    html = client.get(f"/ui/models/{OTHER}", params={"device_kind": KINDS[0]}).text
    api = client.get(f"/models/{OTHER}/estimate", params={"device_kind": KINDS[0]}).json()
    assert api["context"] == "alone" and api["total_time_s"] is not None
    warning = _item(html, "id", "looped-alone")
    assert "looped alone" in warning
    # The CPU's own figures are said on a CPU only (the seeded kinds are fake GPUs).
    assert "13 % to 26 % below" not in warning


def test_what_timing_alone_leaves_out_is_said_where_it_applies() -> None:
    """Finding: the CPU's "13–26 % below" showed on imported GPU figures."""
    assert "13 % to 26 % below" in trust.looped_alone("cpu", {"measured": 4})
    assert "13 % to 26 % below" not in trust.looped_alone("gpu", {"measured": 4})
    imported = trust.looped_alone("cpu", {"neusight": 9})
    assert "imported from (neusight)" in imported and "13 %" not in imported
    assert trust.looped_alone("gpu", None) == trust.LOOPED_ALONE


def test_configurations_show_shapes_and_how_each_figure_was_timed(
    client: TestClient, db_url: str
) -> None:
    """Findings: hash prefixes for configurations; two figures for one configuration."""
    html = client.get(f"/ui/models/{MODEL}", params={"device_kind": KINDS[0]}).text
    table = html.split('id="configurations"')[1].split("</table>")[0]
    rows = client.get(f"/models/{MODEL}/estimate", params={"device_kind": KINDS[0]}).json()
    for r in rows["configurations"]:
        row = _item(table, "data-key", r["key"])
        assert f"<code>{r['key'][:12]}</code>" not in row
        assert fmt.shapes(r["inputs"]) in row and fmt.short_op(r["op"]) in row
        timed = "in this model's replay" if r["timing"] == "replay" else "looped alone"
        assert f'data-field="timed">{timed}<' in row
    key = rows["configurations"][0]["key"]
    page = client.get(f"/ui/configurations/{key}").text
    uses = _item(page, "id", "uses")
    assert f'data-model="{MODEL}"' in uses and f'data-model="{OTHER}"' in uses
    assert "looped alone" in page and not re.search(r"\b1 results\b", page)


def test_a_kind_without_figures_is_said_and_never_another(client: TestClient) -> None:
    """Finding: ``?device_kind=`` of an unmeasured kind silently showed another kind."""
    html = client.get(f"/ui/models/{MODEL}", params={"device_kind": "cpu:nowhere"}).text
    assert "Nothing measured on <strong>cpu:nowhere</strong>" in html
    assert 'id="configurations"' not in html and 'id="trust"' not in html
    assert 'class="current"' not in html  # no other kind chosen in its place


def test_predict_is_offered_only_where_something_is_unmeasured(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Findings: "Predict the unmeasured" on a fully measured model, answered with backticks;
    offered where no predictor exists, leading to "No prediction"."""
    whole = client.get(f"/ui/models/{MODEL}", params={"device_kind": KINDS[0]}).text
    assert "Predict the" not in whole
    partial = client.get(f"/ui/models/{WHOLE}", params={"device_kind": KINDS[0]}).text
    assert "Predict the" not in partial  # no predictor for the kind: nothing to offer
    monkeypatch.setattr(mix, "can_predict", lambda session, kind: True)
    partial = client.get(f"/ui/models/{WHOLE}", params={"device_kind": KINDS[0]}).text
    assert "Predict the 4 unmeasured configurations" in partial
    asked = client.get(f"/ui/models/{WHOLE}", params={"device_kind": KINDS[0], "predict": True})
    note = _item(asked.text, "role", "status")
    assert "`" not in note and "<code>" in note


def test_numbers_never_carry_an_exponent_and_counts_agree() -> None:
    """Finding: ``1e+03 µs``, ``2e+03 Ts``, clipped ``+02 µs`` axis labels, "1 results"."""
    assert fmt.si(999.6e-6, "s") == "1 ms" and fmt.si(123.0, "µs", 2) == "120 µs"
    assert fmt.si(2e15, "FLOP/s") == "2 PFLOP/s" and fmt.si(1.5e-3, "s") == "1.5 ms"
    for value in (1e-13, 3.3e-7, 999.9, 1e21, -0.0456):
        assert "e+" not in fmt.si(value, "s") and "e-" not in fmt.si(value, "s")
    assert fmt.plural(1, "result") == "1 result" and fmt.plural(2, "result") == "2 results"
    assert str(fmt.code("run `opdb x` <b>")) == "run <code>opdb x</code> &lt;b&gt;"
    chart = time_series_svg({"a": [(utcnow(), 123e-6), (utcnow(), 99e-6)]}, "s")
    assert "e+" not in chart and "e-0" not in chart and "2 results" in chart
    assert fmt.describe_config("torch.nn.Conv2d", "1x3x8x8", {"kernel_size": [3, 3]}) == (
        "Conv2d 1×3×8×8 · kernel_size=3,3"
    )


def test_a_partial_chip_match_is_labelled_as_the_cli_labels_it(
    client: TestClient, db_url: str
) -> None:
    """Finding: the overview's spec peak was a whole 96-core EPYC from a partial name match."""
    with Store.open(db_url) as store, store.transaction() as session:
        found = match_chip("cpu:AMD EPYC")
        assert found is not None and found.how == "partial"
        store_spec_peaks(session, found.chip, "cpu:AMD EPYC", found.how)
    html = client.get("/ui/").text
    card = html.split('data-kind="cpu:AMD EPYC"')[1].split("</article>")[0]
    assert "closest spec-sheet match: AMD EPYC 9654 (Genoa)" in card
    assert "whole chip (96 cores; no allotment recorded)" in card
