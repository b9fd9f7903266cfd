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
from tests.api.common import AUTH, TOKEN, api_client
from tests.helpers import EXAMPLE_SPECS, snapshot, spec_dict


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with api_client(db_url) as c:
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
        "warnings": [],
    }
    again = client.post("/specs", params={"name": "x.yaml"}, content=text, headers=AUTH)
    assert again.json()["status"] == "unchanged"
    models = client.get("/models").json()["items"]
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
    # 401 with a challenge: the caller has not said who it is (RFC 9110 §15.5.2).
    assert (missing.status_code, wrong.status_code) == (401, 401)
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert missing.headers["content-type"] == "application/problem+json"
    assert missing.json() == {
        "type": "about:blank",
        "title": "Unauthorized",
        "status": 401,
        "error": "AuthenticationError",
        "detail": "writes need the header 'Authorization: Bearer <token>'",
        "instance": "/specs",
    }
    assert wrong.json()["detail"] == "the bearer token is not valid"
    assert snapshot(engine) == before
    engine.dispose()


def test_invalid_spec_is_422_with_path(client: TestClient) -> None:
    data = spec_dict()
    data["operators"][0]["inputs"][0]["shape"][0] = -4
    response = client.post(
        "/specs", params={"name": "bad.yaml"}, content=yaml.safe_dump(data), headers=AUTH
    )
    assert response.status_code == 422
    body = response.json()
    assert (body["error"], body["status"], body["title"]) == (
        "SpecError",
        422,
        "Unprocessable Entity",
    )
    assert body["detail"] == "bad.yaml: operators[0].inputs[0].shape[0]: must be positive, got -4"
    assert client.get("/models").json()["items"] == []


def test_unknown_model_is_404(client: TestClient) -> None:
    response = client.get("/models/nope")
    assert response.status_code == 404
    assert response.json()["detail"] == "no model named 'nope'; the database holds no model yet"


def test_writes_disabled_without_configured_token(db_url: str) -> None:
    with TestClient(create_app(Settings(database_url=db_url))) as c:
        response = c.post("/specs", content="x: 1", headers=AUTH)
    assert response.status_code == 403
    assert response.json()["detail"] == (
        "writes are disabled: the server has no write token (OPDB_API_TOKEN) set"
    )


def test_protected_reads(db_url: str) -> None:
    settings = Settings(database_url=db_url, api_token=SecretStr(TOKEN), api_protect_reads=True)
    with TestClient(create_app(settings)) as c:
        assert c.get("/models").status_code == 401
        assert c.get("/models", headers=AUTH).json()["items"] == []


def test_body_over_the_limit(db_url: str) -> None:
    settings = Settings(database_url=db_url, api_token=SecretStr(TOKEN), max_spec_bytes=100)
    with TestClient(create_app(settings)) as c:
        response = c.post("/specs", params={"name": "big.yaml"}, content="#" * 101, headers=AUTH)
    assert response.status_code == 413
    assert response.json()["detail"] == "POST /specs takes at most 100 bytes; this body has 101"


def test_enqueue_estimate_and_jobs(client: TestClient) -> None:
    text = (EXAMPLE_SPECS / "mlp-small-b8.yaml").read_text()
    assert client.post("/specs", content=text, headers=AUTH).status_code == 201
    body = {"device_kind": "fake:FakeGPU"}
    assert client.post("/models/mlp-small-b8/jobs", json=body).status_code == 401
    queued = client.post("/models/mlp-small-b8/jobs", json=body, headers=AUTH)
    assert queued.status_code == 201
    assert queued.json()["queued_configs"] == 4 and queued.json()["queued_model_run"] is True
    assert client.get("/jobs/counts").json() == {"queued": 5}
    est = client.get("/models/mlp-small-b8/estimate", params={"device_kind": "fake:FakeGPU"})
    assert est.status_code == 200
    data = est.json()
    assert (data["time_s"], data["coverage"], data["unmeasured"]) == (None, 0.0, 4)
    assert data["total_time_s"] is None and "no operator" in data["no_estimate"]  # never 0 s
    assert len(data["configurations"]) == 4
    assert data["context"] == "alone"  # nothing measured, nothing replayed
    alone = client.get(
        "/models/mlp-small-b8/estimate",
        params={"device_kind": "fake:FakeGPU", "context": "alone"},
    )
    assert alone.status_code == 200 and alone.json()["context"] == "alone"
    unknown = client.get("/models/mlp-small-b8/estimate", params={"device_kind": "nope"})
    assert unknown.status_code == 404


def test_enqueue_interleaved(client: TestClient) -> None:
    text = (EXAMPLE_SPECS / "mlp-small-b8.yaml").read_text()
    assert client.post("/specs", content=text, headers=AUTH).status_code == 201
    body = {"device_kind": "fake:FakeGPU", "interleaved": True}
    queued = client.post("/models/mlp-small-b8/jobs", json=body, headers=AUTH)
    assert queued.status_code == 201
    assert queued.json()["queued_configs"] == 4 and queued.json()["queued_model_run"] is True
    assert client.get("/jobs/counts").json() == {"queued": 1}  # one job measures all of it
    est = client.get("/models/mlp-small-b8/estimate", params={"device_kind": "fake:FakeGPU"})
    data = est.json()
    assert data["between_ops_s"] is None and data["total_time_s"] is data["time_s"] is None
    assert data["no_estimate"]  # nothing measured yet: no estimate, and why (not 0 s)


def test_every_error_is_a_problem_document(client: TestClient) -> None:
    """Unknown paths, wrong methods, bad parameters and bodies: problem+json, never plain text."""
    cases = [
        (client.get("/nope"), 404),
        (client.delete("/health"), 405),
        (client.get("/models/x/estimate"), 422),  # device_kind missing
        (client.get("/models/x/estimate", params={"device_kind": "k", "timing": "fast"}), 422),
        (client.get("/models/x/estimate", params={"device_kind": "k", "context": "x"}), 422),
        (
            client.post(
                "/models/x/jobs", json={"device_kind": "k", "priority": 2**63}, headers=AUTH
            ),
            422,
        ),
        (client.post("/models/x/jobs", json={"device_kind": "k" * 1000}, headers=AUTH), 422),
        (client.post("/models/x/jobs", json={"device_kind": "k" * 100_000}, headers=AUTH), 413),
        (client.post("/models/x/jobs", content=b"{not json", headers=AUTH), 422),
    ]
    for response, status in cases:
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/problem+json"
        body = response.json()
        assert body["status"] == status and body["detail"] and "\n" not in body["detail"]


def test_non_ascii_and_odd_tokens_are_401_not_500(client: TestClient) -> None:
    text = yaml.safe_dump(spec_dict())
    for header in ("Bearer s3crét", "Bearer ", "Basic dXNlcjpwYXNz", "s3cret"):
        response = client.post("/specs", content=text, headers={"Authorization": header.encode()})
        assert response.status_code == 401, (header, response.text)
        assert response.headers["content-type"] == "application/problem+json"
    assert client.get("/models").json()["items"] == []  # nothing was stored


def test_an_unexpected_error_is_a_500_problem_and_the_server_goes_on(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from operator_db.db import queries

    def boom(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("a bug\nwith a second line")

    monkeypatch.setattr(queries, "model_summaries", boom)
    response = client.get("/models")
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["error"] == "InternalError" and "a bug" not in response.text
    assert client.get("/health").status_code == 200


def test_several_tokens_with_rights(db_url: str) -> None:
    settings = Settings(
        database_url=db_url,
        api_write_tokens=[SecretStr("w1"), SecretStr("w2")],
        api_read_tokens=[SecretStr("r1")],
        api_protect_reads=True,
    )
    text = (EXAMPLE_SPECS / "mlp-small-b8.yaml").read_text()
    with TestClient(create_app(settings)) as c:
        read = {"Authorization": "Bearer r1"}
        assert c.get("/models", headers=read).status_code == 200
        denied = c.post("/specs", content=text, headers=read)
        assert denied.status_code == 403 and denied.json()["detail"] == (
            "this token may read, not write"
        )
        assert (
            c.post("/specs", content=text, headers={"Authorization": "Bearer w2"}).status_code
            == 201
        )
        assert c.get("/models", headers={"Authorization": "Bearer w1"}).status_code == 200
        assert c.get("/models").status_code == 401


def test_openapi_declares_problems_bearer_auth_and_the_yaml_body(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert "Problem" in schema["components"]["schemas"]
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for code in ("401", "404", "422", "500", "503"):
                content = operation["responses"][code]["content"]
                assert list(content) == ["application/problem+json"], (path, method, code)
    upload = schema["paths"]["/specs"]["post"]
    assert "application/yaml" in upload["requestBody"]["content"]
    assert upload["security"] == [{"HTTPBearer": []}]


def test_reads_do_not_wait_for_a_writer_on_sqlite(client: TestClient, db_url: str) -> None:
    """A read takes no write lock: a writer holding SQLite's lock does not stall /models."""
    if not db_url.startswith("sqlite"):
        pytest.skip("the write lock is SQLite's")
    import sqlite3
    import time

    path = db_url.removeprefix("sqlite:///")
    writer = sqlite3.connect(path, timeout=0.1)
    writer.execute("BEGIN IMMEDIATE")
    try:
        start = time.perf_counter()
        assert client.get("/models").status_code == 200
        assert client.get("/jobs").status_code == 200
        assert time.perf_counter() - start < 1.0
    finally:
        writer.rollback()
        writer.close()
