"""`opdb predict`, `opdb estimate --predict` and the API's predictions, on the law's database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from operator_db.db.store import Store
from tests.api.common import api_client
from tests.helpers import run_cli
from tests.predict.db_data import KIND, fill


@pytest.fixture
def law_db(db_url: str) -> str:
    with Store.open(db_url) as store:
        fill(store)
    return db_url


def test_train_list_and_estimate(law_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    trained = run_cli(capsys, "predict", "train", "--db", law_db)
    assert trained.code == 0, trained.err
    assert f"predictor v1 of {KIND}" in trained.out and "torch.nn.Linear" in trained.out
    listed = run_cli(capsys, "predict", "list", "--db", law_db)
    assert listed.code == 0 and "torch.nn.ReLU" in listed.out
    shown = run_cli(capsys, "estimate", "net-e", "--predict", "--db", law_db)
    assert shown.code == 0, shown.err
    assert "of which predicted" in shown.out and "90% interval" in shown.out
    assert "~: predicted, not measured" in shown.out
    as_json = run_cli(capsys, "estimate", "net-e", "--predict", "--json", "--db", law_db)
    data = json.loads(as_json.out)
    assert data["predicted"] == len(data["configurations"]) and data["coverage_predicted"] == 1
    assert data["total_time_low_s"] <= data["total_time_s"] <= data["total_time_high_s"]
    assert {c["source"] for c in data["configurations"]} == {"predicted"}


def test_estimate_without_a_predictor_is_one_line(
    law_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(capsys, "estimate", "net-a", "--predict", "--db", law_db)
    assert result.code == 1
    assert "no predictor for" in result.err and "opdb predict train" in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_evaluate_prints_and_writes(
    law_db: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "configs.csv"
    result = run_cli(
        capsys, "predict", "evaluate", "--hold-out", "family", "--csv", str(out), "--db", law_db
    )
    assert result.code == 0, result.err
    assert "leave one family out" in result.out and "median |error| per configuration" in result.out
    assert out.read_text().startswith("group,key,op,measured_s,predicted_s,low_s,high_s")
    as_json = run_cli(capsys, "predict", "evaluate", "--json", "--model", "net-a", "--db", law_db)
    data = json.loads(as_json.out)
    assert data["models"][0]["model"] == "net-a" and data["groups"] == 1
    bad = run_cli(capsys, "predict", "evaluate", "--hold-out", "nothing", "--db", law_db)
    assert bad.code != 0


def test_the_api_predicts_and_lists(law_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    with api_client(law_db) as client:
        missing = client.get(
            "/models/net-e/estimate", params={"device_kind": KIND, "predict": "true"}
        )
        assert missing.status_code == 404
        assert missing.headers["content-type"].startswith("application/problem+json")
        assert "opdb predict train" in missing.json()["detail"]
        assert run_cli(capsys, "predict", "train", "--db", law_db).code == 0
        got = client.get("/models/net-e/estimate", params={"device_kind": KIND, "predict": "true"})
        assert got.status_code == 200, got.text
        body = got.json()
        assert body["predicted"] > 0 and body["predictor"]["version"] == 1
        assert body["time_low_s"] <= body["time_s"] <= body["time_high_s"]
        plain = client.get("/models/net-e/estimate", params={"device_kind": KIND}).json()
        assert plain["predicted"] == 0 and plain["time_low_s"] is None
        listed = client.get(f"/device-kinds/{KIND}/predictors")
        assert listed.status_code == 200
        rows = listed.json()
        assert {r["op"] for r in rows} >= {"*", "torch.nn.Linear"}
        assert all(r["interval_factor"] >= 1 for r in rows)
        assert client.get("/device-kinds/nope/predictors").status_code == 404


def test_the_report_shows_predictions(
    law_db: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    before = run_cli(capsys, "report", "-o", str(tmp_path / "a"), "--db", law_db)
    assert before.code == 0, before.err
    assert "No predictor is trained" in (tmp_path / "a" / "report.md").read_text()
    assert run_cli(capsys, "predict", "train", "--db", law_db).code == 0
    after = run_cli(capsys, "report", "-o", str(tmp_path / "b"), "--db", law_db)
    assert after.code == 0, after.err
    text = (tmp_path / "b" / "report.md").read_text()
    assert "## Predictions" in text and "v1 (" in text
    table = (tmp_path / "b" / "predictions.csv").read_text().splitlines()
    assert len(table) == 1 + 5  # the five models, not the sweep
    assert any(line.startswith("net-e,") for line in table)
    assert not any(line.startswith("sweep-law,") for line in table)
