"""``opdb llm compare`` and ``GET /llms/{name}/compare``: the LLM on every kind, measured or
predicted by the cross-device model (here a stand-in that predicts every call at 10 µs)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

import operator_db.predict.across.store as across_store
from operator_db.db import queries
from operator_db.db.store import Store
from operator_db.estimate.predicted import Predicted, PredictedCost
from tests.api.common import api_client
from tests.helpers import run_cli
from tests.llm.common import measured_tiny

A100 = "NVIDIA A100-SXM4-80GB"
PER_CALL = PredictedCost(1e-5, 0.8e-5, 1.2e-5)


class _EveryKey(dict[str, PredictedCost]):
    def get(self, key: str, default: Any = None) -> PredictedCost:  # type: ignore[override]
        return PER_CALL


@pytest.fixture
def predictor(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cross-device model stand-in: the A100 placed, every call predicted at 10 µs."""

    def many(
        session: Any, model_name: str, kinds: Sequence[str], found: Any = None
    ) -> dict[str, Predicted]:
        source = {"method": "across devices", "version": 7, "level": 0.9}
        return {k: Predicted(time=_EveryKey(), source=source) for k in kinds}

    monkeypatch.setattr(across_store, "load", lambda session: (None, SimpleNamespace(version=7)))
    monkeypatch.setattr(across_store, "gpu_kinds", lambda session: {A100: None})
    monkeypatch.setattr(across_store, "predicted_costs_many", many)


def test_measured_and_predicted_kinds(
    capsys: pytest.CaptureFixture[str],
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    predictor: None,
) -> None:
    measured_tiny(capsys, db_url, monkeypatch)
    with Store.open(db_url) as store, store.transaction() as session:
        queries.get_or_create_device_kind(session, A100, "gpu")
    shown = run_cli(capsys, "llm", "compare", "tiny", "--json", "--db", db_url)
    assert shown.code == 0, shown.err
    rows = {r["device_kind"]: r for r in json.loads(shown.out)}
    assert set(rows) == {"fake:FakeGPU", A100}
    measured, predicted = rows["fake:FakeGPU"], rows[A100]
    assert measured["how"] == "measured" and measured["measured"]["runs"] >= 5
    assert predicted["how"] == "predicted" and predicted["measured"] is None
    assert predicted["source"] == "predicted by the cross-device model v7"
    # Every call at 10 µs: the prefill is its calls' count × 10 µs, with nothing between forwards.
    with Store.open(db_url) as store, store.transaction(read_only=True) as session:
        prefill = queries.get_model(session, "tiny-b2-prefill-p8")
        calls = sum(c.count for c in queries.model_configs(session, prefill.id))
    assert predicted["ttft_s"]["value"] == pytest.approx(calls * 1e-5)
    assert predicted["ttft_s"]["low"] < predicted["ttft_s"]["value"] < predicted["ttft_s"]["high"]
    assert any("not measured on this kind" in n for n in predicted["notes"])
    assert predicted["roofline"]["bound_tpot_s"] > 0  # the A100's spec-sheet bandwidth
    table = run_cli(capsys, "llm", "compare", "tiny", "--db", db_url)
    assert "tiny at batch 2, prompt 8, 4 new tokens" in table.out
    assert "predicted: the forwards alone" in table.out
    with api_client(db_url) as client:
        answer = client.get("/llms/tiny/compare")
        assert answer.status_code == 200, answer.text
        assert [r["device_kind"] for r in answer.json()] == [
            r["device_kind"] for r in rows.values()
        ]
        partial = client.get("/llms/tiny/compare", params={"new_tokens": 3})
        assert partial.status_code == 200 and partial.json()[0]["new_tokens"] == 3
