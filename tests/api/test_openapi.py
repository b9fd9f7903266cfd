"""The OpenAPI document and what schemathesis found: security, links, Allow, NUL, times."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from operator_db.config import Settings
from tests.api.common import AUTH, api_client


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with api_client(db_url, ["mlp-small-b8"]) as c:
        yield c


def _operations(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        op["operationId"]: {**op, "method": method}
        for path in schema["paths"].values()
        for method, op in path.items()
    }


def test_reads_say_the_token_is_optional_unless_reads_are_protected(db_url: str) -> None:
    for protect, read_security in ((False, [{}, {"HTTPBearer": []}]), (True, [{"HTTPBearer": []}])):
        settings = Settings(database_url=db_url, api_protect_reads=protect)
        ops = _operations(create_app(settings).openapi())
        assert ops["list_models"]["security"] == read_security
        assert ops["upload_spec"]["security"] == [{"HTTPBearer": []}]  # writes always
        assert "security" not in ops["health"]


def test_operations_are_named_after_their_routes_and_linked(client: TestClient) -> None:
    ops = _operations(client.get("/openapi.json").json())
    assert {"list_models", "get_model", "get_estimate", "cancel_job", "upload_spec"} <= set(ops)
    links = ops["upload_spec"]["responses"]["201"]["links"]
    assert links["get_model"] == {
        "operationId": "get_model",
        "parameters": {"name": "$response.body#/model"},
    }
    for op in ops.values():  # every link names an operation that exists
        for response in op["responses"].values():
            for link in response.get("links", {}).values():
                assert link["operationId"] in ops


def test_the_upload_body_is_described_by_the_spec_schema(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    media = schema["paths"]["/specs"]["post"]["requestBody"]["content"]["application/yaml"]
    assert media["schema"] == {"$ref": "#/components/schemas/Spec"}
    spec = schema["components"]["schemas"]["Spec"]
    assert spec["properties"]["spec_version"]["enum"] == [1, 2, 3]
    assert {"OperatorSpec", "TensorSpec", "ModelInfo"} <= set(schema["components"]["schemas"])


def test_405_lists_every_method_of_the_path(client: TestClient) -> None:
    response = client.put("/models/mlp-small-b8")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, DELETE"
    assert response.headers["content-type"] == "application/problem+json"
    assert client.get("/specs").headers["allow"] == "POST"


@pytest.mark.parametrize(
    "url", ["/models/a%00b", "/models?search=a%00", "/jobs?device_kind=x%00", "/device-kinds/%00"]
)
def test_a_nul_in_the_url_is_422_on_every_backend(client: TestClient, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 422, response.text
    assert "NUL" in response.json()["detail"]


def test_enqueue_refuses_booleans_for_numbers_and_control_characters(client: TestClient) -> None:
    url = "/models/mlp-small-b8/jobs"
    for body in (
        {"device_kind": "x", "priority": True},
        {"device_kind": "x", "coverage": True},
        {"device_kind": "x", "interleaved": 0},
        {"device_kind": "a\x00b"},
        {"device_kind": "x", "unknown": 1},
    ):
        assert client.post(url, json=body, headers=AUTH).status_code == 422, body
    assert client.get("/jobs").json()["total"] == 0
    ok = client.post(url, json={"device_kind": "x", "priority": 3.0}, headers=AUTH)
    assert ok.status_code == 201  # 3.0 is an integer in JSON Schema


def test_times_carry_their_utc_offset(client: TestClient) -> None:
    client.post("/models/mlp-small-b8/jobs", json={"device_kind": "x"}, headers=AUTH)
    job = client.get("/jobs").json()["items"][0]
    assert job["created_at"].endswith(("Z", "+00:00")), job["created_at"]
