"""The roofline over HTTP where a configuration has no FLOPs or bytes: a plot without its point,
never a 500; nothing measured on the kind is a 404 problem document."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml
from fastapi.testclient import TestClient

from operator_db.db import queries
from operator_db.db.ingest import ingest_specs
from operator_db.db.store import Store
from operator_db.specs import parse_spec
from tests.api.common import AUTH, api_client
from tests.helpers import EXAMPLE_SPECS, measure_everything

H100 = "NVIDIA H100 80GB HBM3"


def bare_spec() -> str:
    """mlp-small-b8 as ``mlp-bare``, its ReLU without FLOPs or bytes (the schema allows it)."""
    data = yaml.safe_load((EXAMPLE_SPECS / "mlp-small-b8.yaml").read_text())
    data["model"]["name"] = "mlp-bare"
    relu = next(op for op in data["operators"] if op["op"] == "torch.nn.ReLU")
    for field in ("flops", "bytes", "flop_rule"):
        relu.pop(field, None)
    return yaml.safe_dump(data)


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    # Stored as given (an import, or a version before POST /specs counted FLOPs itself).
    with Store.open(db_url) as store, store.transaction() as session:
        ingest_specs(session, [parse_spec(yaml.safe_load(bare_spec()), "bare")])
    with api_client(db_url) as c:
        yield c


def test_nothing_measured_is_a_404_problem(client: TestClient, db_url: str) -> None:
    with Store.open(db_url) as store, store.transaction() as session:
        queries.get_or_create_device_kind(session, H100, "gpu")
    for fmt in ("png", "svg"):
        got = client.get("/models/mlp-bare/roofline", params={"device_kind": H100, "format": fmt})
        assert got.status_code == 404, got.text
        assert got.headers["content-type"] == "application/problem+json"
        assert got.json()["detail"].startswith(f"nothing measured on {H100}: no configuration of")


def test_a_spec_without_work_does_not_break_another_models_roofline(
    client: TestClient, db_url: str
) -> None:
    # The first spec to store the ReLU gave it no FLOPs; mlp-small-b8 shares it (same key).
    text = (EXAMPLE_SPECS / "mlp-small-b8.yaml").read_text()
    posted = client.post("/specs", params={"name": "s.yaml"}, content=text, headers=AUTH)
    assert posted.status_code == 201, posted.text
    body = posted.json()
    assert body["disagreeing_configs"] == 1
    [warning] = body["warnings"]  # the stored ReLU has none of the spec's FLOPs and bytes
    assert warning.startswith("s.yaml: operators[1] (torch.nn.ReLU on 8x256) is configuration ")
    assert "stored with other flops (stored none, spec 2048), flop_rule (stored none, spec " in (
        warning
    )
    assert warning.endswith("bytes (stored none, spec 16384); the stored values are kept")
    measure_everything(db_url, H100)
    for model in ("mlp-bare", "mlp-small-b8"):
        png = client.get(f"/models/{model}/roofline", params={"device_kind": H100})
        assert png.status_code == 200, png.text
        assert png.content.startswith(b"\x89PNG")
        svg = client.get(f"/models/{model}/roofline", params={"device_kind": H100, "format": "svg"})
        assert svg.status_code == 200, svg.text
        assert b"without FLOPs/bytes left out" in svg.content
    image = client.get("/ui/models/mlp-small-b8/roofline.svg", params={"device_kind": H100})
    assert image.status_code == 200, image.text  # the model page's image
    assert b"without FLOPs/bytes left out" in image.content
    page = client.get("/ui/models/mlp-small-b8", params={"device_kind": H100})
    assert page.status_code == 200, page.text
    estimate = client.get("/models/mlp-small-b8/estimate", params={"device_kind": H100})
    assert estimate.status_code == 200, estimate.text
