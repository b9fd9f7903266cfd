"""Imported GPUs and data sources seen through the API, on both backends.

The NeuSight excerpt (tests/fixtures/neusight: a T4 and an L4) is imported, with a model of its
configurations (one of them also measured here, on the T4) and a whole-model run imported on the
T4 (``tests.ui.seed.seed_neusight``): the kinds give their spec sheet and the sources of their
results, ``/data-sources`` the data set's provenance and counts, every result and estimate says
which figures are imported.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from api.routes import sources
from operator_db.db import queries
from operator_db.db.models import Measurement
from operator_db.db.store import Store
from tests.api.common import api_client
from tests.ui.seed import NS_MODEL, NS_RUN_S, model_of_configs, seed_neusight

T4 = "Tesla T4"
L4 = "NVIDIA L4"
T4_ROWS = 16 * 3
L4_ROWS = 4
VERSION = "6945927d9afcca2b9daf021f8395e53edc5b4eef"


@pytest.fixture
def own_key(db_url: str) -> str:
    with Store.open(db_url) as store, store.transaction() as session:
        return seed_neusight(session)


@pytest.fixture
def client(db_url: str, own_key: str) -> Iterator[TestClient]:
    with api_client(db_url) as c:
        yield c


def test_a_data_set_is_listed_with_its_provenance_and_counts(client: TestClient) -> None:
    page = client.get("/data-sources").json()
    assert (page["total"], page["limit"], page["offset"]) == (1, 100, 0)
    (source,) = page["items"]
    assert source["name"] == "neusight" and source["version"] == VERSION
    assert source["license"] == "MIT" and source["url"].startswith("https://github.com/")
    assert "5 fastest of 25" in source["method"] and "ASPLOS 2025" in source["citation"]
    assert source["info"]["torch"] == "2.1.0" and source["created_at"].endswith("Z")
    assert (source["results"], source["model_runs"]) == (T4_ROWS + L4_ROWS, 1)
    assert source["device_kinds"] == [
        {"device_kind": L4, "results": L4_ROWS, "model_runs": 0},
        {"device_kind": T4, "results": T4_ROWS, "model_runs": 1},
    ]
    assert client.get("/data-sources", params={"offset": 1}).json()["items"] == []
    assert client.get("/data-sources", params={"limit": 0}).status_code == 422


def test_no_data_set_no_source(db_url: str) -> None:
    with api_client(db_url) as c:
        assert c.get("/data-sources").json() == {"items": [], "total": 0, "limit": 100, "offset": 0}
        assert c.get("/device-kinds").json() == []


def test_an_imported_gpu_has_its_spec_sheet_and_sources(client: TestClient) -> None:
    kinds = {k["name"]: k for k in client.get("/device-kinds").json()}
    assert set(kinds) == {L4, T4}
    t4 = kinds[T4]
    spec = t4["spec"]
    assert (spec["sms"], spec["cores_per_sm"], spec["boost_clock_mhz"]) == (40, 64, 1590)
    assert spec["memory_bytes"] == 16 * 2**30 and spec["l2_cache_bytes"] == 4 * 2**20
    assert (spec["compute_capability"], spec["board_power_w"], spec["memory_type"]) == (
        "7.5",
        70.0,
        "GDDR",
    )
    assert spec["peak_flops_per_s"]["float32"] == pytest.approx(8.1e12)
    assert spec["memory_bandwidth_bytes_per_s"] == pytest.approx(320e9)
    assert "T4" in spec["source"]
    # Own first (one result measured here), then the data set with its provenance.
    own, imported = t4["sources"]
    assert own == {
        "source": "measured",
        "imported": False,
        "results": 1,
        "model_runs": 0,
        "title": None,
        "version": None,
        "license": None,
        "url": None,
        "method": None,
        "device": None,
        "corrected": None,
        "corrections": {},
    }
    assert imported["source"] == "neusight" and imported["imported"] is True
    assert (imported["results"], imported["model_runs"]) == (T4_ROWS, 1)
    assert imported["version"] == VERSION and imported["license"] == "MIT"
    assert imported["title"].startswith("NeuSight") and "CUDA events" in imported["method"]
    assert imported["device"]["Device"] == T4
    # The L4: the data set's own view of it, and what was corrected (with where from).
    (l4_source,) = kinds[L4]["sources"]
    assert l4_source["device"]["Num_Sm"] == 60 and l4_source["corrected"]["Num_Sm"] == 58
    assert "7,424" in l4_source["corrections"]["Num_Sm"]
    assert kinds[L4]["spec"]["sms"] == 58
    # One kind: the same, with hosts and peaks.
    detail = client.get(f"/device-kinds/{L4}").json()
    assert detail["sources"] == kinds[L4]["sources"] and detail["spec"] == kinds[L4]["spec"]
    assert detail["hosts"] == [] and {p["source"] for p in detail["peaks"]} == {"spec"}
    assert client.get(f"/device-kinds/{T4}").json()["sources"] == t4["sources"]


def test_a_kind_without_a_chip_has_no_spec(db_url: str) -> None:
    with Store.open(db_url) as store, store.transaction() as session:
        queries.get_or_create_device_kind(session, "fake:Nowhere")
    with api_client(db_url) as c:
        (kind,) = c.get("/device-kinds").json()
        assert kind["spec"] is None and kind["sources"] == []


def test_models_say_which_kinds_they_have_figures_on(client: TestClient) -> None:
    (model,) = client.get("/models").json()["items"]
    assert model["name"] == NS_MODEL
    by_kind = {k["device_kind"]: k for k in model["device_kinds"]}
    assert by_kind[L4] == {
        "device_kind": L4,
        "configs_with_results": L4_ROWS,
        "configs_imported": L4_ROWS,
        "model_runs": {},
    }
    t4 = by_kind[T4]
    assert t4["configs_with_results"] == model["configs"] - L4_ROWS
    assert t4["configs_imported"] == t4["configs_with_results"] - 1  # one measured here too
    assert t4["model_runs"] == {"neusight": 1}
    assert client.get(f"/models/{NS_MODEL}").json()["device_kinds"] == model["device_kinds"]


def _own_result(session: Session, kind: str, key: str) -> None:
    config = queries.get_config(session, key)
    session.add(
        Measurement(
            config_id=config.id,
            device_kind_id=queries.get_device_kind(session, kind).id,
            dtype="float32",
            calls_per_block=10,
            blocks=10,
            time_median_s=1e-5,
            time_mean_s=1e-5,
            time_iqr_s=0.0,
            time_cv=0.0,
        )
    )


def test_kept_counts_follow_new_results(
    client: TestClient, db_url: str, own_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server keeps the counts and adds the results stored since: always the exact figures."""

    def own_on(kind: str) -> int:
        kinds = {k["name"]: k for k in client.get("/device-kinds").json()}
        own = [s for s in kinds[kind]["sources"] if s["source"] == "measured"]
        return own[0]["results"] if own else 0

    assert own_on(T4) == 1 and own_on(L4) == 0
    for added, total in ((1, 1), (3, 4)):
        with Store.open(db_url) as store, store.transaction() as session:
            for _ in range(added):
                _own_result(session, L4, own_key)
        assert own_on(L4) == total and own_on(T4) == 1  # counted since the kept count
    with Store.open(db_url) as store, store.transaction(read_only=True) as session:
        exact = queries.source_counts(session)
        assert sources.result_counts(session) == exact
    monkeypatch.setattr(sources, "RECOUNT_AFTER", 0)  # past it: all counted again
    with Store.open(db_url) as store, store.transaction() as session:
        _own_result(session, T4, own_key)
    assert own_on(T4) == 2
    assert client.get("/data-sources").json()["items"][0]["results"] == T4_ROWS + L4_ROWS


def test_a_page_of_models_counts_as_each_model_alone(client: TestClient, db_url: str) -> None:
    """Many models are counted one kind at a time, a few in one statement: the same figures."""
    with Store.open(db_url) as store, store.transaction() as session:
        ids = [c.id for c in queries.list_configs(session, limit=1000)[0]]
        for n in range(5):
            model_of_configs(session, f"part-{n}", ids[n * 7 : n * 7 + 9])
    listed = client.get("/models").json()["items"]
    assert len(listed) == 6
    for model in listed:
        alone = client.get(f"/models/{model['name']}").json()["device_kinds"]
        assert model["device_kinds"] == alone, model["name"]
    assert {k["device_kind"] for m in listed for k in m["device_kinds"]} == {L4, T4}


def test_each_result_names_its_source(client: TestClient, own_key: str) -> None:
    results = client.get(f"/configurations/{own_key}/measurements").json()["items"]
    assert {r["source"] for r in results} == {"measured", "neusight"}
    own = next(r for r in results if r["source"] == "measured")
    assert own["source_file"] is None and own["source_line"] is None
    imported = next(r for r in results if r["source"] == "neusight")
    assert imported["source_file"].endswith("p2.1.0/Tesla T4.csv.gz")
    assert imported["source_line"] == 2 and imported["job_id"] is None


def test_an_estimate_counts_its_figures_sources(client: TestClient) -> None:
    estimate = client.get(f"/models/{NS_MODEL}/estimate", params={"device_kind": T4}).json()
    configs = estimate["configurations_total"]
    assert estimate["sources"] == {"measured": 1, "neusight": configs - L4_ROWS - 1}
    assert estimate["full_run_source"] == "neusight"
    assert estimate["full_run_time_s"] == pytest.approx(NS_RUN_S)
    rows = estimate["configurations"]
    assert {r["source"] for r in rows} == {"measured", "neusight", None}
    assert sum(r["source"] is None for r in rows) == L4_ROWS  # no figure on the T4
    assert any("imported" in n and "neusight" in n for n in estimate["notes"])
    on_l4 = client.get(f"/models/{NS_MODEL}/estimate", params={"device_kind": L4}).json()
    assert on_l4["sources"] == {"neusight": L4_ROWS} and on_l4["full_run_source"] is None


def test_the_openapi_document_describes_the_sources(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    estimate = schemas["EstimateOut"]["properties"]
    for field in ("sources", "full_run_source", "configurations"):
        assert "imported" in estimate[field]["description"], field
    assert "sources" in schemas["EstimateOut"]["required"]
    assert {"spec", "sources"} <= set(schemas["DeviceKindOut"]["properties"])
    spec = schemas["ChipSpecOut"]["properties"]
    assert {"l2_cache_bytes", "compute_capability", "board_power_w", "memory_type"} <= set(spec)
    assert "W" in spec["board_power_w"]["description"]
    assert {"source", "source_file", "source_line"} <= set(schemas["MeasurementOut"]["properties"])
    assert "device_kinds" in schemas["ModelSummaryOut"]["properties"]
    paths = client.get("/openapi.json").json()["paths"]
    assert paths["/data-sources"]["get"]["operationId"] == "list_data_sources"
