"""What the API refuses at the door, on both backends: each bad spec or job is a 4xx problem
document, and nothing is stored."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from urllib.parse import quote

import pytest
import yaml
from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.app import create_app
from operator_db.config import Settings
from operator_db.db import queries
from operator_db.db.queries.devices import kind_name_pattern
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
        settings = Settings(
            database_url=db_url,
            api_token=SecretStr(TOKEN),
            max_tensor_numel=limit,
            max_tensor_bytes=2**37,  # 2**34 float32 elements: 64 GiB
        )
        with TestClient(create_app(settings)) as c:
            response = c.post("/specs", params={"name": "big.yaml"}, content=text, headers=AUTH)
            assert response.status_code == status, response.text


PRINTABLE = "names hold printable characters only"


@pytest.mark.parametrize(
    ("kind", "detail"),
    [
        ("", "String should have at least 1 character"),
        ("x" * 10_000, "String should have at most 200 characters"),
        ("   ", "a device kind's name must not be empty"),
        ("GPU\x00", f"device kind 'GPU\\x00' holds a control character U+0000: {PRINTABLE}"),
        ("GPU\x85", f"device kind 'GPU\\x85' holds a control character U+0085: {PRINTABLE}"),
        (
            "GPU\u202eX",
            "device kind 'GPU\\u202eX' holds a format character U+202E (RIGHT-TO-LEFT OVERRIDE): "
            + PRINTABLE,
        ),
        (
            "A\u200dB",
            "device kind 'A\\u200dB' holds a format character U+200D (ZERO WIDTH JOINER): "
            + PRINTABLE,
        ),
        ("A/B", "device kind 'A/B' holds '/', which a URL's path cannot carry in a name"),
        (" GPU", "device kind ' GPU' begins or ends with white space"),
    ],
)
def test_bad_device_kinds_are_refused(
    client: TestClient, db_url: str, kind: str, detail: str
) -> None:
    # The schema states the library's rule (queries.check_device_kind_name) as its pattern, and
    # the body's validation applies it: one line saying which character is at fault.
    with Store.open(db_url) as store:
        before = snapshot(store.engine)
    response = client.post("/models/mlp-small-b8/jobs", json={"device_kind": kind}, headers=AUTH)
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == f"body.device_kind: {detail}"
    pattern = re.compile(kind_name_pattern())
    assert len(kind) > 200 or pattern.match(kind) is None  # the schema says so too
    with Store.open(db_url) as store:
        assert snapshot(store.engine) == before


def test_kind_names_the_schema_allows_are_accepted(client: TestClient) -> None:
    pattern = re.compile(kind_name_pattern())
    for kind in ("NVIDIA H100 80GB HBM3", "cpu:Intel(R) Xeon(R) CPU @ 2.20GHz", "Büro ™ A\xa0B"):
        assert pattern.match(kind)
        body = {"device_kind": kind}
        response = client.post("/models/mlp-small-b8/jobs", json=body, headers=AUTH)
        assert response.status_code == 201, response.text
        assert client.get(f"/device-kinds/{quote(kind, safe='')}").json()["name"] == kind


def test_unknown_kind_lists_ten_known_ones(client: TestClient, db_url: str) -> None:
    with Store.open(db_url) as store, store.transaction() as session:
        for i in range(13):
            queries.get_or_create_device_kind(session, f"fake:K{i:02d}")
    detail = client.get("/device-kinds/nope").json()["detail"]
    shown = ", ".join(f"fake:K{i:02d}" for i in range(10))
    assert detail == f"no device kind 'nope'; known: {shown} and 3 more"


def test_kind_names_that_pass_for_known_kinds_are_refused(client: TestClient) -> None:
    """Tesla Т4 (Cyrillic) and NVIDIA H1OO were accepted beside the real ones."""
    for real, fake in (("Tesla T4", "Tesla \u04224"), ("NVIDIA H100", "NVIDIA H1OO")):
        body = {"device_kind": real}
        assert client.post("/models/mlp-small-b8/jobs", json=body, headers=AUTH).is_success
        refused = client.post("/models/mlp-small-b8/jobs", json={"device_kind": fake}, headers=AUTH)
        assert refused.status_code == 409, refused.text  # the name is well formed: it clashes
        assert f"looks like the known {real!r}" in refused.json()["detail"]
