"""A model measured whole only has no estimate: null with a reason, never 0 s and −100 %."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from operator_db.db.ingest import ingest_specs
from operator_db.db.models import FullModelRun, Model
from operator_db.db.queries import get_or_create_device_kind
from operator_db.db.store import Store
from operator_db.estimate.compose import estimate_model
from operator_db.specs.io import load_spec
from tests.helpers import EXAMPLE_SPECS, result_row, run_cli

KIND = "cpu:Whole"
MODEL = "mlp-small-b8"


def _whole_only(store: Store) -> None:
    """Store the example MLP and one whole-model run of it (2 ms), no operator measured."""
    with store.transaction() as session:
        ingest_specs(session, [load_spec(EXAMPLE_SPECS / f"{MODEL}.yaml", max_bytes=10**6)])
        kind = get_or_create_device_kind(session, KIND)
        model_id = session.scalars(select(Model.id).where(Model.name == MODEL)).one()
        session.add(
            FullModelRun(
                model_id=model_id, device_kind_id=kind.id, **result_row(time_median_s=2e-3)
            )
        )


def test_nothing_measured_is_no_estimate_with_its_reason(store: Store) -> None:
    _whole_only(store)
    with store.transaction(read_only=True) as session:
        est = estimate_model(session, MODEL, KIND)
    assert not est.composed
    assert est.time_error is None and est.energy_error is None
    summary = est.summary()
    assert summary["total_time_s"] is None and summary["time_s"] is None
    assert summary["time_error"] is None and summary["energy_j"] is None
    assert summary["full_run_time_s"] == 2e-3
    reason = summary["no_estimate"]
    assert reason is not None and "no operator" in reason and "whole-model run" in reason
    assert all(r["time_s"] is None and r["time_share"] is None for r in est.op_rows)


def test_the_cli_json_says_null_and_why(
    store: Store, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _whole_only(store)
    out = run_cli(capsys, "estimate", MODEL, "--device-kind", KIND, "--json", "--db", db_url)
    data = json.loads(out.out)
    assert data["total_time_s"] is None and data["time_error"] is None
    assert "no operator of mlp-small-b8" in data["no_estimate"]
    assert all(r["time_s"] is None for r in data["by_op"])
    table = run_cli(capsys, "estimate", MODEL, "--device-kind", KIND, "--db", db_url)
    assert "none: no operator" in table.out and "0.000 ms" not in table.out
