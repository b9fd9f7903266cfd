"""The REST API on both backends: health, spec upload with its token, models, errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml
from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.app import create_app
from operator_db.config import Settings
from operator_db.db.migrate import head_revision
from tests.helpers import EXAMPLE_SPECS, snapshot, spec_dict

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    settings = Settings(database_url=db_url, api_token=SecretStr(TOKEN))
    with TestClient(create_app(settings)) as c:
        yield c


def test_health(client: TestClient) -> None:
    body = client.get("/health").json()
    assert body["status"] == "ok" and body["revision"] == head_revision()


def test_upload_then_read(client: TestClient) -> None:
    text = (EXAMPLE_SPECS / "mlp-small-b8.yaml").read_text()
    first = client.post("/specs", params={"name": "mlp-small-b8.yaml"}, content=text, headers=AUTH)
    assert first.status_code == 201
    assert first.json() == {
        "source": "mlp-small-b8.yaml",
        "model": "mlp-small-b8",
        "status": "new",
        "operators": 4,
        "new_configs": 4,
        "known_configs": 0,
        "disagreeing_configs": 0,
    }
    again = client.post("/specs", params={"name": "x.yaml"}, content=text, headers=AUTH)
    assert again.json()["status"] == "unchanged"
    models = client.get("/models").json()
    assert [(m["name"], m["configs"], m["calls"], m["flops"]) for m in models] == [
        ("mlp-small-b8", 4, 5, 3211264 + 2 * 2048 + 1048576 + 40960)
    ]
    detail = client.get("/models/mlp-small-b8").json()
    assert [op["op"] for op in detail["operators"]] == [
        "torch.nn.Linear",
        "torch.nn.ReLU",
        "torch.nn.Linear",
        "torch.nn.Linear",
    ]
    assert detail["operators"][1]["locations"] == ["1", "3"]


def test_write_needs_token(client: TestClient, db_url: str) -> None:
    from operator_db.db.engine import make_engine

    engine = make_engine(db_url)
    before = snapshot(engine)
    text = yaml.safe_dump(spec_dict())
    missing = client.post("/specs", content=text)
    wrong = client.post("/specs", content=text, headers={"Authorization": "Bearer nope"})
    assert (missing.status_code, wrong.status_code) == (403, 403)
    assert missing.json() == {
        "error": "PermissionDeniedError",
        "detail": "writes need the header 'Authorization: Bearer <token>'",
    }
    assert snapshot(engine) == before
    engine.dispose()


def test_invalid_spec_is_422_with_path(client: TestClient) -> None:
    data = spec_dict()
    data["operators"][0]["inputs"][0]["shape"][0] = -4
    response = client.post(
        "/specs", params={"name": "bad.yaml"}, content=yaml.safe_dump(data), headers=AUTH
    )
    assert response.status_code == 422
    assert response.json() == {
        "error": "SpecError",
        "detail": "bad.yaml: operators[0].inputs[0].shape[0]: must be positive, got -4",
    }
    assert client.get("/models").json() == []


def test_unknown_model_is_404(client: TestClient) -> None:
    response = client.get("/models/nope")
    assert response.status_code == 404
    assert response.json()["detail"] == "no model named 'nope'; the database holds no model yet"


def test_writes_disabled_without_configured_token(db_url: str) -> None:
    with TestClient(create_app(Settings(database_url=db_url))) as c:
        response = c.post("/specs", content="x: 1", headers=AUTH)
    assert response.status_code == 403
    assert response.json()["detail"] == (
        "writes are disabled: the server has no OPDB_API_TOKEN set"
    )


def test_protected_reads(db_url: str) -> None:
    settings = Settings(database_url=db_url, api_token=SecretStr(TOKEN), api_protect_reads=True)
    with TestClient(create_app(settings)) as c:
        assert c.get("/models").status_code == 403
        assert c.get("/models", headers=AUTH).json() == []


def test_body_over_the_limit(db_url: str) -> None:
    settings = Settings(database_url=db_url, api_token=SecretStr(TOKEN), max_spec_bytes=100)
    with TestClient(create_app(settings)) as c:
        response = c.post("/specs", params={"name": "big.yaml"}, content="#" * 101, headers=AUTH)
    assert response.status_code == 422
    assert response.json()["detail"] == "big.yaml: body over the limit of 100 bytes"


def test_enqueue_estimate_and_jobs(client: TestClient) -> None:
    text = (EXAMPLE_SPECS / "mlp-small-b8.yaml").read_text()
    assert client.post("/specs", content=text, headers=AUTH).status_code == 201
    body = {"device_kind": "fake:FakeGPU"}
    assert client.post("/models/mlp-small-b8/jobs", json=body).status_code == 403
    queued = client.post("/models/mlp-small-b8/jobs", json=body, headers=AUTH)
    assert queued.status_code == 201
    assert queued.json()["queued_configs"] == 4 and queued.json()["queued_model_run"] is True
    assert client.get("/jobs").json() == {"queued": 5}
    est = client.get("/models/mlp-small-b8/estimate", params={"device_kind": "fake:FakeGPU"})
    assert est.status_code == 200
    data = est.json()
    assert (data["time_s"], data["coverage"], data["unmeasured"]) == (0.0, 0.0, 4)
    assert len(data["configurations"]) == 4
    unknown = client.get("/models/mlp-small-b8/estimate", params={"device_kind": "nope"})
    assert unknown.status_code == 404


def test_enqueue_interleaved(client: TestClient) -> None:
    text = (EXAMPLE_SPECS / "mlp-small-b8.yaml").read_text()
    assert client.post("/specs", content=text, headers=AUTH).status_code == 201
    body = {"device_kind": "fake:FakeGPU", "interleaved": True}
    queued = client.post("/models/mlp-small-b8/jobs", json=body, headers=AUTH)
    assert queued.status_code == 201
    assert queued.json()["queued_configs"] == 4 and queued.json()["queued_model_run"] is True
    assert client.get("/jobs").json() == {"queued": 1}  # one job measures all of it
    est = client.get("/models/mlp-small-b8/estimate", params={"device_kind": "fake:FakeGPU"})
    data = est.json()
    assert data["between_ops_s"] is None and data["total_time_s"] == data["time_s"] == 0.0
