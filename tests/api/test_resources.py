"""Every resource of the API on both backends: lists and pages, details, deletes, plots, jobs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.common import AUTH, api_client
from tests.helpers import measure_everything

H100 = "NVIDIA H100 80GB HBM3"
SPECS = ("mlp-small-b8", "mlp-deep-b8")


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with api_client(db_url, SPECS) as c:
        yield c


def test_models_are_listed_a_page_at_a_time_with_filters(client: TestClient) -> None:
    everything = client.get("/models").json()
    assert [m["name"] for m in everything["items"]] == ["mlp-deep-b8", "mlp-small-b8"]
    assert (everything["total"], everything["limit"], everything["offset"]) == (2, 100, 0)
    second = client.get("/models", params={"limit": 1, "offset": 1}).json()
    assert [m["name"] for m in second["items"]] == ["mlp-small-b8"] and second["total"] == 2
    found = client.get("/models", params={"search": "small"}).json()
    assert [m["name"] for m in found["items"]] == ["mlp-small-b8"] and found["total"] == 1
    assert client.get("/models", params={"search": "%"}).json()["total"] == 0  # no wildcards
    assert client.get("/models", params={"mode": "training"}).json()["total"] == 0
    for bad in ({"limit": 0}, {"limit": 10**6}, {"offset": -1}, {"mode": "x"}):
        assert client.get("/models", params=bad).status_code == 422


def test_a_models_operators_come_a_page_at_a_time(client: TestClient) -> None:
    detail = client.get("/models/mlp-deep-b8").json()
    total = detail["configs"]
    assert len(detail["operators"]) == total  # small: all of them in the detail
    page = client.get("/models/mlp-deep-b8/operators", params={"limit": 2, "offset": 1}).json()
    assert page["total"] == total and len(page["items"]) == 2
    assert [op["key"] for op in page["items"]] == [op["key"] for op in detail["operators"][1:3]]
    assert client.get("/models/nope/operators").status_code == 404


def test_deleting_a_model_keeps_its_configurations(client: TestClient) -> None:
    key = client.get("/models/mlp-small-b8").json()["operators"][0]["key"]
    assert client.post(
        "/models/mlp-small-b8/jobs", json={"device_kind": H100}, headers=AUTH
    ).is_success
    assert client.delete("/models/mlp-small-b8").status_code == 401
    assert client.delete("/models/mlp-small-b8", headers=AUTH).status_code == 204
    assert client.get("/models/mlp-small-b8").status_code == 404
    assert client.delete("/models/mlp-small-b8", headers=AUTH).status_code == 404
    assert client.get(f"/configurations/{key}").status_code == 200  # shared: it stays
    jobs = client.get("/jobs", params={"status": "queued"}).json()
    assert all(j["model"] != "mlp-small-b8" for j in jobs["items"])


def test_the_estimate_pages_its_configurations_costliest_first(
    client: TestClient, db_url: str
) -> None:
    measure_everything(db_url, H100)
    params: dict[str, Any] = {"device_kind": H100}
    full = client.get("/models/mlp-deep-b8/estimate", params=params).json()
    total = full["configurations_total"]
    assert len(full["configurations"]) == total and full["coverage"] == 1.0
    times = [c["time_s"] for c in full["configurations"]]
    assert times == sorted(times, reverse=True)
    page = client.get("/models/mlp-deep-b8/estimate", params={**params, "limit": 1}).json()
    assert len(page["configurations"]) == 1 and page["configurations_total"] == total
    assert page["time_s"] == full["time_s"]  # the figures are the model's, not the page's
    median = client.get("/models/mlp-deep-b8/estimate", params={**params, "aggregate": "median"})
    assert median.json()["time_s"] == pytest.approx(full["time_s"])


def test_the_roofline_plot_as_png_and_svg(client: TestClient, db_url: str) -> None:
    measure_everything(db_url, H100)
    png = client.get("/models/mlp-deep-b8/roofline", params={"device_kind": H100})
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert png.content.startswith(b"\x89PNG")
    svg = client.get("/models/mlp-deep-b8/roofline", params={"device_kind": H100, "format": "svg"})
    assert svg.headers["content-type"] == "image/svg+xml" and b"<svg" in svg.content[:500]
    measure_everything(db_url, "fake:NoPeaks")
    none = client.get("/models/mlp-deep-b8/roofline", params={"device_kind": "fake:NoPeaks"})
    assert none.status_code == 404 and "no peaks known" in none.json()["detail"]


def test_configurations_filter_page_and_their_measurements(client: TestClient, db_url: str) -> None:
    everything = client.get("/configurations").json()
    linear = client.get("/configurations", params={"op": "torch.nn.Linear"}).json()
    assert 0 < linear["total"] < everything["total"]
    assert all(c["op"] == "torch.nn.Linear" for c in linear["items"])
    small = client.get("/configurations", params={"model": "mlp-small-b8"}).json()
    assert small["total"] == client.get("/models/mlp-small-b8").json()["configs"]
    first = small["items"][0]
    shape = "x".join(map(str, first["inputs"][0]["shape"]))
    by_shape = client.get("/configurations", params={"input_shape": shape}).json()
    assert first["key"] in [c["key"] for c in by_shape["items"]]
    assert client.get("/configurations", params={"input_shape": "8xabc"}).status_code == 422
    assert client.get(f"/configurations/{first['key']}").json()["op"] == first["op"]
    assert client.get("/configurations/" + "0" * 64).status_code == 404
    measure_everything(db_url, H100)
    results = client.get(f"/configurations/{first['key']}/measurements").json()
    assert results["total"] == 1
    [row] = results["items"]
    assert (row["device_kind"], row["time_median_s"], row["cache_mode"]) == (H100, 1e-3, "warm")
    assert "raw" not in row and "provenance" not in row
    other = client.get(
        f"/configurations/{first['key']}/measurements", params={"device_kind": "cpu:x"}
    ).json()
    assert other["total"] == 0


def test_jobs_list_detail_cancel_and_counts(client: TestClient) -> None:
    queued = client.post("/models/mlp-small-b8/jobs", json={"device_kind": H100}, headers=AUTH)
    assert queued.status_code == 201
    jobs = client.get("/jobs").json()
    assert jobs["total"] == queued.json()["queued_configs"] + 1
    ids = [j["id"] for j in jobs["items"]]
    assert ids == sorted(ids, reverse=True)  # newest first
    model_job = client.get("/jobs", params={"model": "mlp-small-b8"}).json()["items"]
    assert [j["target"] for j in model_job] == ["model"]
    job_id = model_job[0]["id"]
    assert client.get(f"/jobs/{job_id}").json()["device_kind"] == H100
    assert client.post(f"/jobs/{job_id}/cancel").status_code == 401
    cancelled = client.post(f"/jobs/{job_id}/cancel", headers=AUTH)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    again = client.post(f"/jobs/{job_id}/cancel", headers=AUTH)
    assert again.status_code == 409 and again.json()["error"] == "ConflictError"
    counts = client.get("/jobs/counts").json()
    assert counts == {"queued": jobs["total"] - 1, "cancelled": 1}
    assert client.get("/jobs", params={"status": "cancelled"}).json()["total"] == 1
    assert client.get("/jobs/999999").status_code == 404
    assert client.get("/jobs/0").status_code == 422
    assert client.get("/jobs", params={"device_kind": "nope"}).status_code == 404


def test_device_kinds_hosts_and_peaks(client: TestClient, db_url: str) -> None:
    measure_everything(db_url, H100)
    kinds = client.get("/device-kinds").json()
    assert [(k["name"], k["type"]) for k in kinds] == [(H100, "gpu")]
    detail = client.get(f"/device-kinds/{H100}").json()
    assert [h["hostname"] for h in detail["hosts"]] == [f"host-of-{H100}"]
    assert detail["peaks"] == []  # none stored: the spec table is used, not copied
    assert [h["device_kind"] for h in client.get("/hosts").json()] == [H100]
    assert client.get("/device-kinds/nope").status_code == 404


def test_health_is_503_when_the_database_fails_or_lags(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from operator_db.db import migrate

    assert client.get("/health").status_code == 200
    monkeypatch.setattr(migrate, "head_revision", lambda: "9999")
    behind = client.get("/health")
    assert behind.status_code == 503 and "expects 9999" in behind.json()["detail"]

    def down(_engine: object) -> str:
        raise ConnectionError("refused")

    monkeypatch.setattr(migrate, "current_revision", down)
    dead = client.get("/health")
    assert dead.status_code == 503 and dead.json()["error"] == "DatabaseError"
    assert dead.headers["retry-after"] == "2"  # it said nothing of when to come back
    assert client.get("/openapi.json").status_code == 200  # the server stays up


def test_health_shows_no_database_url(client: TestClient, db_url: str) -> None:
    """It showed the database's URL (host, path, user) to anyone, protected reads or not."""
    from operator_db.db import migrate

    answer = client.get("/health").json()
    assert answer["database"] in ("sqlite", "postgresql")
    where = db_url.split("///")[-1].split("@")[-1]
    assert where not in client.get("/health").text

    def down(_engine: object) -> str:
        raise ConnectionError(f"refused by {db_url}")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(migrate, "current_revision", down)
        dead = client.get("/health")
    assert dead.status_code == 503 and where not in dead.text


def test_health_is_cheap_and_thread_safe(client: TestClient) -> None:
    """13 of 2,000 at concurrency 40 were 500s: each parsed the migrations (9.7 ms) in threads."""
    from concurrent.futures import ThreadPoolExecutor

    from operator_db.db import migrate

    with ThreadPoolExecutor(16) as pool:
        heads = set(pool.map(lambda _: migrate.head_revision(), range(400)))
    assert len(heads) == 1
    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda _: client.get("/health").status_code, range(80)))
    assert codes == [200] * 80


def test_prometheus_metrics(client: TestClient) -> None:
    assert client.post("/models/mlp-small-b8/jobs", json={"device_kind": H100}, headers=AUTH)
    client.get("/models/nope")
    text = client.get("/metrics").text
    assert 'opdb_http_requests_total{method="GET",route="/models/{name}",status="404"} 1.0' in text
    assert f'opdb_jobs{{kind="{H100}",status="queued"}}' in text
    assert "opdb_http_request_duration_seconds_bucket" in text
