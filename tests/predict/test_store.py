"""Predictors trained from the database, stored, loaded and mixed into estimates (both backends)."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.predictor_tables import Predictor as PredictorRow
from operator_db.db.store import Store
from operator_db.errors import InvalidInputError, NotFoundError
from operator_db.estimate.compose import Estimate, estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.predict.evaluate import evaluate
from operator_db.predict.mix import predicted_costs
from operator_db.predict.store import load_predictor, train
from tests.predict.db_data import KIND, fill


@pytest.fixture
def filled(store: Store) -> Store:
    fill(store)
    return store


def test_training_stores_a_version_per_run(filled: Store) -> None:
    with filled.transaction() as session:
        first = train(session, KIND)
    with filled.transaction() as session:
        second = train(session, KIND)
        rows = queries.list_predictors(session)
    assert (first.version, second.version) == (1, 2)
    assert first.data_hash == second.data_hash  # the same data: the same identity
    assert {r.version for r in rows} == {1, 2} and rows[0].version == 2
    assert {(r.target, r.op) for r in rows if r.version == 2} == set(second.models)
    assert first.samples == first.models[("time", "*")].samples > 50


def test_a_loaded_predictor_predicts_as_the_fitted_one(filled: Store) -> None:
    with filled.transaction() as session:
        fitted = train(session, KIND)
    with filled.transaction() as session:
        kind = queries.get_device_kind(session, KIND)
        loaded = load_predictor(session, kind)
        configs = queries.model_configs(session, queries.get_model(session, "net-e").id)
    assert loaded is not None and loaded.version == fitted.version
    cfgs = [mc.config for mc in configs]
    assert [p and p.value for p in loaded.predict(cfgs)] == [
        p and p.value for p in fitted.predict(cfgs)
    ]


def test_another_scikit_learn_asks_for_a_retrain(filled: Store) -> None:
    with filled.transaction() as session:
        train(session, KIND)
        session.execute(update(PredictorRow).values(library={"scikit-learn": "0.1"}))
    with filled.transaction() as session, pytest.raises(InvalidInputError, match="retrain"):
        load_predictor(session, queries.get_device_kind(session, KIND))


def mixed(session: Session, model: str) -> Estimate:
    """The estimate with unmeasured configurations predicted (opdb estimate --predict)."""
    return estimate_model(
        session, model, KIND, EstimateOptions(predicted=predicted_costs(session, model, KIND))
    )


def test_an_unmeasured_model_is_predicted_whole(filled: Store) -> None:
    with filled.transaction() as session:
        train(session, KIND)
    with filled.transaction() as session:
        plain = estimate_model(session, "net-e", KIND)
        est = estimate_model(
            session,
            "net-e",
            KIND,
            EstimateOptions(predicted=predicted_costs(session, "net-e", KIND)),
        )
    assert plain.time_s == 0 and plain.coverage == 0
    assert est.predicted == len(est.config_rows) and est.coverage_predicted == 1.0
    assert est.time_s == pytest.approx(est.predicted_time_s) and est.time_s > 0
    assert est.time_low_s is not None and est.time_high_s is not None
    assert est.time_low_s <= est.time_s <= est.time_high_s
    assert {r["source"] for r in est.config_rows} == {"predicted"}
    assert est.warnings[0].startswith("the whole model is predicted")
    assert est.predictor is not None and est.predictor["version"] == 1
    assert est.predictor["trained_at"].endswith("+00:00")
    assert est.energy_j is not None and est.energy_j > 0
    assert sum(r["time_share"] for r in est.config_rows) == pytest.approx(1.0)
    summary = est.as_dict()
    assert summary["predicted"] == est.predicted and summary["total_time_low_s"] <= est.total_time_s


def test_a_partly_measured_model_mixes_both(filled: Store) -> None:
    with filled.transaction() as session:
        train(session, KIND)
        model = queries.get_model(session, "net-a")
        measured = queries.model_config_figures(
            session, model.id, [queries.get_device_kind(session, KIND).id]
        )
        # Forget one configuration's results: it is then predicted, the rest measured.
        from operator_db.db.models import Measurement

        first = min(config_id for config_id, _, _ in measured)
        for m in session.scalars(select(Measurement).where(Measurement.config_id == first)):
            session.delete(m)
    with filled.transaction() as session:
        est = estimate_model(
            session,
            "net-a",
            KIND,
            EstimateOptions(predicted=predicted_costs(session, "net-a", KIND)),
        )
    sources = [r["source"] for r in est.config_rows]
    assert sources.count("predicted") == 1 and sources.count("measured") == len(sources) - 1
    assert 0 < est.coverage_predicted < 1 and est.coverage + est.coverage_predicted == 1.0
    assert 0 < est.predicted_time_s < est.time_s
    assert est.warnings[0].startswith("1 configurations are predicted")


def test_no_predictor_is_a_clear_error(filled: Store) -> None:
    with filled.transaction() as session, pytest.raises(NotFoundError, match="predict train"):
        mixed(session, "net-e")


def test_leave_one_model_out_recovers_the_law(filled: Store) -> None:
    with filled.transaction() as session:
        result = evaluate(session, KIND)
    summary = result.summary()
    assert summary["models"] == 4 and summary["groups"] == 4  # net-e has no run
    assert summary["config_median_error"] is not None and summary["config_median_error"] < 0.10
    assert summary["model_median_error"] is not None and summary["model_median_error"] < 0.10
    coverage = summary["interval_coverage"]
    assert isinstance(coverage, float) and coverage >= 0.7
    for m in result.models:  # the held-out model's configurations were never seen
        assert m.predicted_calls == 1.0


def test_nothing_to_hold_out_is_one_line(store: Store) -> None:
    fill(store, unmeasured=("net-a", "net-b", "net-c", "net-d", "net-e"))
    with store.transaction() as session, pytest.raises(InvalidInputError, match="hold out"):
        evaluate(session, KIND)


def test_holding_out_a_model_without_a_run_is_one_line(filled: Store) -> None:
    with filled.transaction() as session, pytest.raises(InvalidInputError, match="no full run"):
        evaluate(session, KIND, models=["net-e"])
    with filled.transaction() as session, pytest.raises(NotFoundError):
        evaluate(session, KIND, models=["nope"])
