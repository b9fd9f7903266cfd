"""The newest (or median) result per target, kind and timing, and how the database finds it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, select

from operator_db.db import queries
from operator_db.db.ingest import ingest_specs
from operator_db.db.models import FullModelRun, Measurement, Model, OperatorConfig, utcnow
from operator_db.db.store import Store
from operator_db.specs import parse_spec
from tests.helpers import linear_op, relu_op, result_row, spec_dict

KIND = "fake:FakeGPU"


def _setup(store: Store) -> tuple[int, int, int, int]:
    """Model 'toy' (Linear, ReLU) with several results of the Linear; return the ids.

    Linear, warm, eager: 4, 3, 2 ms an hour, 40 and 20 minutes ago, then two results of 1.5 ms and
    1 ms stored at the same instant, 10 minutes ago (the later one wins). Also one graph result,
    and a cold one newer than all of them.
    """
    spec = spec_dict("toy", [linear_op(), relu_op([4, 32], count=2)])
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(spec, "toy.yaml")])
        kind = queries.get_or_create_device_kind(session, KIND)
        ids = {op: i for op, i in session.execute(select(OperatorConfig.op, OperatorConfig.id))}
        linear, relu = ids["torch.nn.Linear"], ids["torch.nn.ReLU"]
        model_id = session.scalars(select(Model.id)).one()
        now = utcnow()
        tie = now - timedelta(minutes=10)
        rows: list[tuple[int, dict[str, Any]]] = [
            (linear, result_row(time_median_s=4e-3, created_at=now - timedelta(hours=1))),
            (linear, result_row(time_median_s=3e-3, created_at=now - timedelta(minutes=40))),
            (linear, result_row(time_median_s=2e-3, created_at=now - timedelta(minutes=20))),
            (linear, result_row(time_median_s=1.5e-3, created_at=tie)),
            (linear, result_row(time_median_s=1e-3, created_at=tie, flags=["noisy"])),
            (linear, result_row(timing="graph", time_median_s=0.5e-3)),
            (linear, result_row(cache_mode="cold", time_median_s=9e-3, created_at=now)),
            (relu, result_row(time_median_s=2e-4)),
        ]
        for config_id, row in rows:
            session.add(Measurement(config_id=config_id, device_kind_id=kind.id, **row))
            session.flush()  # ids in this order
        session.add(FullModelRun(model_id=model_id, device_kind_id=kind.id, **result_row()))
    return linear, relu, kind.id, model_id


def test_the_newest_result_with_the_number_of_results(store: Store) -> None:
    linear, relu, kind, model_id = _setup(store)
    with store.transaction(read_only=True) as session:
        figures = queries.config_figures(session, [linear, relu], [kind])
        of_model = queries.model_config_figures(session, model_id, [kind])
        cold = queries.config_figures(session, [linear], [kind], cache_mode="cold")
        graph_only = queries.config_figures(session, [linear], [kind], timing="graph")
        runs = queries.model_figures(session, None, [kind])
    assert of_model == figures
    assert set(figures) == {(linear, kind, "eager"), (linear, kind, "graph"), (relu, kind, "eager")}
    newest = figures[(linear, kind, "eager")]
    assert (newest.time_median_s, newest.samples, newest.flags) == (1e-3, 5, ["noisy"])
    assert figures[(linear, kind, "graph")].samples == 1
    assert cold[(linear, kind, "eager")].time_median_s == 9e-3
    assert list(graph_only) == [(linear, kind, "graph")]
    assert runs[(model_id, kind, "eager")].samples == 1


def test_the_median_of_every_result(store: Store) -> None:
    linear, _, kind, _ = _setup(store)
    with store.transaction(read_only=True) as session:
        figures = queries.config_figures(session, [linear], [kind], aggregate="median")
    median = figures[(linear, kind, "eager")]
    assert (median.time_median_s, median.samples) == (2e-3, 5)
    assert median.flags == ["noisy"]


def test_no_targets_or_no_kinds_read_nothing(store: Store) -> None:
    linear, _, kind, _ = _setup(store)
    with store.transaction(read_only=True) as session:
        assert queries.config_figures(session, [], [kind]) == {}
        assert queries.config_figures(session, [linear], []) == {}


def test_the_newest_result_is_found_in_the_lookup_index_alone(store: Store, backend: str) -> None:
    """SQLite's plan: the grouping reads the covering index, never the table's rows."""
    if backend != "sqlite":
        pytest.skip("the plan checked is SQLite's")
    _, _, kind, model_id = _setup(store)
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        seen.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        with store.transaction(read_only=True) as session:
            queries.model_config_figures(session, model_id, [kind])
            [(statement, parameters)] = [s for s in seen if s[0].startswith("SELECT")]
            connection = session.connection()
            plan = connection.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    details = [row[3] for row in plan]
    grouping = [d for d in details if "ix_measurements_lookup" in d]
    assert any("COVERING INDEX ix_measurements_lookup" in d for d in grouping), details
    assert not any(d.startswith("SCAN measurements") for d in details), details
