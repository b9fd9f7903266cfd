"""An estimate's energy with its interval, and its error against the run's energy trials."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import select

from operator_db.db.ingest import ingest_specs
from operator_db.db.models import FullModelRun, Measurement, Model, OperatorConfig
from operator_db.db.queries import get_or_create_device_kind
from operator_db.db.store import Store
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.noise import energy_noise
from operator_db.specs import parse_spec
from operator_db.stats import Interval
from tests.helpers import linear_op, relu_op, result_row, spec_dict

KIND = "fake:FakeGPU"


def _row(per_call: float, low: float | None, high: float | None, count: int) -> dict[str, object]:
    return {
        "count": count,
        "energy_per_call_j": per_call,
        "energy_low_per_call_j": low,
        "energy_high_per_call_j": high,
        "energy_ci_level": 0.95,
        "energy_j": count * per_call,
    }


def test_configurations_energy_adds_in_quadrature_a_figure_without_one_exactly() -> None:
    rows = [_row(1.0, 0.9, 1.1, 2), _row(0.5, None, None, 1), {"count": 3, "energy_j": None}]
    iv = energy_noise(rows, None)
    assert iv is not None and iv.value == pytest.approx(2.5)
    # One term of ±0.2 J (count 2 × ±0.1 J); the figure without an interval adds no width.
    assert (iv.low, iv.high) == (pytest.approx(2.3), pytest.approx(2.7))
    static = Interval(1.0, 0.9, 1.1, 0.95, "idle × time")
    with_static = energy_noise(rows, static)
    assert with_static is not None and with_static.value == pytest.approx(3.5)
    assert with_static.high - 3.5 == pytest.approx(math.sqrt(0.2**2 + 0.1**2))
    assert energy_noise([{"count": 1, "energy_j": None}], static) is None


def test_the_estimate_s_energy_error_has_an_interval(store: Store) -> None:
    spec = spec_dict("toy", [linear_op(), relu_op([4, 32], count=2)])
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(spec, "toy.yaml")])
        kind = get_or_create_device_kind(session, KIND)
        ids = {op: i for op, i in session.execute(select(OperatorConfig.op, OperatorConfig.id))}
        model_id = session.scalars(select(Model.id)).one()
        energy = {
            "energy_per_call_j": 1e-3,
            "energy_low_j": 0.95e-3,
            "energy_high_j": 1.05e-3,
            "energy_ci_level": 0.95,
        }
        for op in ("torch.nn.Linear", "torch.nn.ReLU"):
            session.add(
                Measurement(config_id=ids[op], device_kind_id=kind.id, **result_row(), **energy)
            )
        session.add(
            FullModelRun(
                model_id=model_id,
                device_kind_id=kind.id,
                **result_row(time_median_s=3e-3),
                energy_per_call_j=3.2e-3,
                energy_low_j=3.1e-3,
                energy_high_j=3.3e-3,
                energy_ci_level=0.96,
            )
        )
    with store.transaction() as session:
        est = estimate_model(session, "toy", KIND)
    mine = est.energy_interval
    assert mine is not None and mine.value == pytest.approx(3e-3)  # 1 + 2 × 1 mJ
    assert mine.high - mine.value == pytest.approx(math.sqrt(0.05**2 + 0.1**2) * 1e-3)
    run = est.full_run_energy_interval
    assert run is not None and (run.low, run.high, run.level) == (3.1e-3, 3.3e-3, 0.96)
    error = est.energy_error_interval
    assert error is not None and error.value == pytest.approx(3.0 / 3.2 - 1)
    assert error.low < error.value < error.high
    summary = est.summary()
    assert summary["energy_error_interval"]["value"] == pytest.approx(error.value)
    assert summary["energy_within_noise"] == error.holds(0.0)
    assert summary["full_run_energy_interval"]["low"] == pytest.approx(3.1e-3)
