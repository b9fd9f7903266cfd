"""An estimate filled with plain predicted figures: no predictor, hand-computed results."""

from __future__ import annotations

import pytest

from operator_db.db.store import Store
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.estimate.predicted import Predicted, PredictedCost
from tests.estimate.test_compose import KIND, setup

SOURCE = {"version": 3, "device_kind": KIND, "trained_at": None, "level": 0.9}


def keys(store: Store) -> dict[str, str]:
    with store.transaction() as session:
        return {r["op"]: r["key"] for r in estimate_model(session, "toy", KIND).config_rows}


def test_unmeasured_configurations_take_the_figures_handed_in(store: Store) -> None:
    setup(store, measure_relu=False)  # Linear measured (1 ms, 0.1 J); ReLU ×2 not; one opaque
    key = keys(store)
    relu, linear, opaque = key["torch.nn.ReLU"], key["torch.nn.Linear"], key["my.Custom"]
    predicted = Predicted(
        time={
            relu: PredictedCost(3e-4, 2e-4, 5e-4),
            linear: PredictedCost(9.0, 9.0, 9.0),  # measured: the measurement stays
            opaque: PredictedCost(9.0, 9.0, 9.0),  # opaque: never filled
        },
        energy={relu: PredictedCost(0.03, 0.02, 0.05)},
        source=SOURCE,
    )
    with store.transaction() as session:
        est = estimate_model(session, "toy", KIND, EstimateOptions(predicted=predicted))
    rows = {r["op"]: r for r in est.config_rows}
    assert [rows[op]["source"] for op in ("torch.nn.Linear", "torch.nn.ReLU", "my.Custom")] == [
        "measured",
        "predicted",
        None,
    ]
    assert rows["torch.nn.ReLU"]["time_low_per_call_s"] == 2e-4
    assert est.time_s == pytest.approx(1e-3 + 2 * 3e-4)
    assert est.predicted == 1 and est.coverage == 0.25 and est.coverage_predicted == 0.5
    assert est.predicted_time_s == pytest.approx(6e-4)
    assert (est.time_low_s, est.time_high_s) == (
        pytest.approx(1e-3 + 2 * 2e-4),
        pytest.approx(1e-3 + 2 * 5e-4),
    )
    assert est.energy_j == pytest.approx(0.1 + 2 * 0.03)
    assert est.predictor == SOURCE
    assert est.warnings[0] == (
        f"1 configurations are predicted by the {KIND} predictor v3, not measured: its interval "
        "says how far to trust it"
    )
    assert not any("ReLU" in w for w in est.warnings[1:])  # not a coverage gap any more
    assert any("opaque" in w for w in est.warnings[1:])


def test_nothing_predicted_leaves_the_measured_figures(store: Store) -> None:
    setup(store, measure_relu=False)
    with store.transaction() as session:
        plain = estimate_model(session, "toy", KIND)
        est = estimate_model(
            session, "toy", KIND, EstimateOptions(predicted=Predicted(time={}, source=SOURCE))
        )
    assert est.time_s == plain.time_s and est.predicted == 0
    assert est.warnings == plain.warnings and est.predictor == SOURCE
