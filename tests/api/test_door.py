"""What the API refuses at the door, on both backends: each bad spec or job is a 4xx problem
document, and nothing is stored."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import yaml
from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.app import create_app
from operator_db.config import Settings
from operator_db.db import queries
from operator_db.db.queries.devices import KIND_NAME_PATTERN
from operator_db.db.store import Store
from tests.api.common import AUTH, TOKEN, api_client
from tests.door_cases import BAD_SPECS
from tests.helpers import relu_op, snapshot, spec_dict


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with api_client(db_url, ["mlp-small-b8"]) as c:
        yield c


@pytest.mark.parametrize("case", list(BAD_SPECS))
def test_bad_specs_are_422_and_store_nothing(client: TestClient, db_url: str, case: str) -> None:
    text, detail = BAD_SPECS[case]
    detail = f"bad.yaml: {detail}"
    with Store.open(db_url) as store:
        before = snapshot(store.engine)
    start = time.perf_counter()
    response = client.post("/specs", params={"name": "bad.yaml"}, content=text, headers=AUTH)
    assert time.perf_counter() - start < 5
    assert response.status_code == 422, response.text
    body = response.json()
    assert response.headers["content-type"] == "application/problem+json"
    assert body["error"] == "SpecError"
    assert body["detail"].startswith(detail), body["detail"]
    assert client.get("/models").json()["total"] == 1
    with Store.open(db_url) as store:
        assert snapshot(store.engine) == before


def test_the_tensor_limit_is_a_setting(db_url: str) -> None:
    text = yaml.safe_dump(spec_dict("big", [relu_op([2**17, 2**17])]))  # 2**34 elements
    for limit, status in ((2**33, 422), (2**34, 201)):
        settings = Settings(database_url=db_url, api_token=SecretStr(TOKEN), max_tensor_numel=limit)
        with TestClient(create_app(settings)) as c:
            response = c.post("/specs", params={"name": "big.yaml"}, content=text, headers=AUTH)
            assert response.status_code == status, response.text


PATTERN = f"body.device_kind: String should match pattern '{KIND_NAME_PATTERN}'"


@pytest.mark.parametrize(
    ("kind", "detail"),
    [
        ("", "body.device_kind: String should have at least 1 character"),
        ("x" * 100_000, "body.device_kind: String should have at most 200 characters"),
        ("   ", PATTERN),
        ("GPU\x00", PATTERN),
        ("GPU\x85", PATTERN),
    ],
)
def test_bad_device_kinds_are_refused(
    client: TestClient, db_url: str, kind: str, detail: str
) -> None:
    # The schema's pattern is the library's rule (queries.check_device_kind_name), so no
    # schema-valid name is refused after validation.
    with Store.open(db_url) as store:
        before = snapshot(store.engine)
    response = client.post("/models/mlp-small-b8/jobs", json={"device_kind": kind}, headers=AUTH)
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == detail
    with Store.open(db_url) as store:
        assert snapshot(store.engine) == before


def test_unknown_kind_lists_ten_known_ones(client: TestClient, db_url: str) -> None:
    with Store.open(db_url) as store, store.transaction() as session:
        for i in range(13):
            queries.get_or_create_device_kind(session, f"fake:K{i:02d}")
    detail = client.get("/device-kinds/nope").json()["detail"]
    shown = ", ".join(f"fake:K{i:02d}" for i in range(10))
    assert detail == f"no device kind 'nope'; known: {shown} and 3 more"
