"""What the estimate endpoint costs the database: the same statements whatever the model's size,
reading only the columns the estimate needs."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, select

from api.app import create_app
from operator_db.config import Settings
from operator_db.db import queries
from operator_db.db.ingest import ingest_specs
from operator_db.db.models import FullModelRun, Measurement, Model, OperatorConfig
from operator_db.db.store import Store
from operator_db.specs import parse_spec
from tests.helpers import linear_op, result_row, spec_dict

KIND = "NVIDIA H100 80GB HBM3"
SIZES = {"small": 3, "large": 600}
"""Configurations per model: the large one needs more than one ``IN (...)`` list of 500."""
NEVER_READ = (
    "measurements.raw",
    "measurements.provenance",
    "full_model_runs.raw",
    "full_model_runs.provenance",
    "operator_configs.args",
    "operator_configs.call",
    "operator_configs.outputs",
    "model_operators.locations",
)
"""Columns an estimate has no use for (raw samples, provenance, how to rebuild an operator)."""


def _store_models(db_url: str) -> None:
    """Models 'small' and 'large' of distinct Linear layers, each measured twice, and run once."""
    with Store.open(db_url) as store, store.transaction() as session:
        specs = [
            parse_spec(spec_dict(name, [linear_op(inp=i + 1, out=8) for i in range(n)]), name)
            for name, n in SIZES.items()
        ]
        ingest_specs(session, specs)
        kind = queries.get_or_create_device_kind(session, KIND, "gpu")
        for config_id in session.scalars(select(OperatorConfig.id)):
            for time_s in (2e-6, 1e-6):
                session.add(
                    Measurement(
                        config_id=config_id,
                        device_kind_id=kind.id,
                        **result_row(time_median_s=time_s, raw={"block_s": [time_s] * 20}),
                    )
                )
        for model_id in session.scalars(select(Model.id)):
            session.add(FullModelRun(model_id=model_id, device_kind_id=kind.id, **result_row()))


def test_the_estimate_reads_what_it_needs_in_the_same_statements_whatever_the_size(
    db_url: str,
) -> None:
    _store_models(db_url)
    with TestClient(create_app(Settings(database_url=db_url))) as client:
        engine = client.app.state.store.engine  # type: ignore[attr-defined]
        statements: dict[str, list[str]] = {}

        def record(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
            if statement.lstrip().upper().startswith("SELECT"):
                current.append(" ".join(statement.split()))

        event.listen(engine, "before_cursor_execute", record)
        try:
            for name, size in SIZES.items():
                current = statements[name] = []
                answer = client.get(f"/models/{name}/estimate", params={"device_kind": KIND})
                assert answer.status_code == 200, answer.text
                body = answer.json()
                assert (body["configurations_total"], body["coverage"]) == (size, 1.0)
                assert body["time_s"] == pytest.approx(size * 1e-6)  # each: the newer result
        finally:
            event.remove(engine, "before_cursor_execute", record)
    # The model, the kind, its peaks (an attained L2 roof stored among them), the
    # configurations, their newest results, the model's run: 6 statements for 3 configurations
    # as for 600.
    assert len(statements["small"]) == len(statements["large"]) == 6
    read = " ".join(statements["large"])
    assert [column for column in NEVER_READ if column in read] == []
