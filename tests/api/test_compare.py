"""``GET /models/{name}/compare``: one model on every device kind, on both backends.

On the NeuSight excerpt (``tests.ui.seed.seed_neusight``: a model of its configurations with
imported figures on the T4 and the L4, one also measured here) and without a cross-device model:
only the kinds measured are listed. The comparison is kept per process until a new result.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

import operator_db.predict.across.compare as compare_module
from api.routes import models
from operator_db.db import queries
from operator_db.db.models import Measurement
from operator_db.db.store import Store
from tests.api.common import api_client
from tests.ui.seed import NS_MODEL, seed_neusight

T4 = "Tesla T4"


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with Store.open(db_url) as store, store.transaction() as session:
        seed_neusight(session)
    with api_client(db_url, ["mlp-small-b8"]) as c:
        yield c


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The models ``compare`` is called for (the route imports it when it needs it)."""
    made: list[str] = []
    real = compare_module.compare

    def counted(session: Any, model_name: str, **options: Any) -> Any:
        made.append(model_name)
        return real(session, model_name, **options)

    monkeypatch.setattr(compare_module, "compare", counted)
    return made


def test_a_measured_kind_is_listed_with_the_estimate_it_comes_from(client: TestClient) -> None:
    response = client.get(f"/models/{NS_MODEL}/compare")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == NS_MODEL
    # No cross-device model stored: the kinds measured only; the L4 has too few of its calls,
    # and is listed as left out, with why.
    [row] = body["rows"]
    [left] = body["left_out"]
    assert left["device_kind"] == "NVIDIA L4"
    assert "of its calls (a comparison needs 50%) and no whole-model run" in left["why"]
    assert set(row) == {
        "device_kind",
        "how",
        "time_s",
        "low_s",
        "high_s",
        "energy_j",
        "bound_by",
        "coverage",
        "source",
        "full_run_s",
        "level",
        "rank_s",
        "run_error",
        "run_error_low",
        "run_error_high",
        "run_verdict",
        "run_error_text",
        "flips_with",
    }
    # Most of its figures are the data set's (one is also measured here): imported, and said.
    assert (row["device_kind"], row["how"]) == (T4, "imported")
    assert (row["low_s"], row["high_s"], row["level"]) == (None, None, None)
    assert row["source"] == "own measurements, imported: neusight"
    estimate = client.get(
        f"/models/{NS_MODEL}/estimate", params={"device_kind": T4, "aggregate": "median"}
    ).json()
    assert row["time_s"] == pytest.approx(estimate["total_time_s"])
    assert row["coverage"] == pytest.approx(estimate["coverage"])
    assert row["full_run_s"] == pytest.approx(estimate["full_run_time_s"])
    # One answer to "bound by" on the roofline: the estimate's, here and on the pages.
    assert row["bound_by"] == estimate["roofline_bound"]
    # The run ranks the kind; the error against it is the estimate's own.
    assert row["rank_s"] == pytest.approx(row["full_run_s"])
    assert row["run_error"] == pytest.approx(estimate["time_error"])
    assert row["flips_with"] == []
    if estimate["time_error_interval"] is None:
        assert row["run_verdict"] == "no interval"
        assert "no interval: imported as one figure" in row["run_error_text"]
    else:
        assert row["run_error_low"] == pytest.approx(estimate["time_error_interval"]["low"])


def test_a_model_without_results_has_no_rows(client: TestClient) -> None:
    assert client.get("/models/mlp-small-b8/compare").json() == {
        "model": "mlp-small-b8",
        "rows": [],
        "left_out": [],
    }


def test_an_unknown_model_is_a_404_problem_document(client: TestClient) -> None:
    response = client.get("/models/no-such-model/compare")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert (body["status"], body["error"], body["title"]) == (404, "NotFoundError", "Not Found")
    assert "no-such-model" in body["detail"]
    assert body["instance"] == "/models/no-such-model/compare"


def test_the_comparison_is_kept_until_a_new_result(
    client: TestClient, db_url: str, calls: list[str]
) -> None:
    first = client.get(f"/models/{NS_MODEL}/compare").json()
    assert client.get(f"/models/{NS_MODEL}/compare").json() == first
    assert calls == [NS_MODEL]  # the second answer was the kept one
    client.get("/models/mlp-small-b8/compare")
    assert calls == [NS_MODEL, "mlp-small-b8"]  # kept per model
    # A new result (the newest id moves): made again, with the new figure in it.
    with Store.open(db_url) as store, store.transaction() as session:
        newest = session.get(Measurement, queries.newest_result_id(session))
        assert newest is not None
        session.add(
            Measurement(
                config_id=newest.config_id,
                device_kind_id=queries.get_device_kind(session, T4).id,
                dtype="float32",
                calls_per_block=100,
                blocks=20,
                time_median_s=1.0,
                time_mean_s=1.0,
                time_iqr_s=0.0,
                time_cv=0.0,
                provenance={"torch": "test"},
            )
        )
    again = client.get(f"/models/{NS_MODEL}/compare").json()
    assert calls == [NS_MODEL, "mlp-small-b8", NS_MODEL]
    assert again["rows"][0]["time_s"] > first["rows"][0]["time_s"]


def test_the_kept_comparisons_are_bounded(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, calls: list[str]
) -> None:
    monkeypatch.setattr(models, "COMPARE_KEPT", 1)
    for name in (NS_MODEL, "mlp-small-b8", NS_MODEL):
        assert client.get(f"/models/{name}/compare").status_code == 200
    assert len(models._compared) == 1
    assert calls == [NS_MODEL, "mlp-small-b8", NS_MODEL]  # the first was let go


def test_the_openapi_document_describes_the_comparison(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    operation = schema["paths"]["/models/{name}/compare"]["get"]
    assert operation["operationId"] == "get_comparison"
    assert "404" in operation["responses"]
    rows = schema["components"]["schemas"]["CompareRowOut"]["properties"]
    assert rows["how"]["enum"] == [
        "measured",
        "imported",
        "measured run",
        "imported run",
        "predicted",
    ]
    assert {"time_s", "low_s", "high_s", "level", "source"} <= set(rows)
