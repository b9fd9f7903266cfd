"""An estimate's noise: its total's interval, its error's, and the figures of a noisy host."""

from __future__ import annotations

import math
from typing import Any

import pytest
from sqlalchemy import select

from operator_db.db.ingest import ingest_specs
from operator_db.db.models import FullModelRun, Measurement, Model, OperatorConfig
from operator_db.db.queries import get_or_create_device_kind
from operator_db.db.store import Store
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.noise import operators_noise, total_interval
from operator_db.specs import parse_spec
from operator_db.stats import Interval
from tests.helpers import linear_op, relu_op, result_row, spec_dict

Z95 = 1.959963984540054
KIND = "fake:FakeGPU"


def row(value: float, low: float | None, high: float | None, count: int = 1, **kw: Any) -> Any:
    return {
        "key": kw.get("key", "k"),
        "count": count,
        "time_per_call_s": value,
        "time_low_per_call_s": low,
        "time_high_per_call_s": high,
        "time_ci_level": kw.get("level", 0.95),
        "time_s": count * value,
        "source": kw.get("source", "measured"),
        "timing": kw.get("timing", "eager"),
    }


def test_operators_alone_add_in_quadrature() -> None:
    rows = [
        row(1.0, 1.0 - 3 * Z95 / 2, 1.0 + 3 * Z95 / 2, count=2),  # ±3σ on the row, count 2
        row(4.0, 4.0 - 4 * Z95, 4.0 + 4 * Z95),
    ]
    noise = operators_noise(rows, None, None)
    assert noise is not None and noise.exact_rows == 0 and not noise.replay
    assert noise.operators.value == 6.0
    assert (noise.operators.low, noise.operators.high) == pytest.approx((6 - 5 * Z95, 6 + 5 * Z95))


def test_replayed_operators_take_the_replay_s_bootstrap() -> None:
    rows = [
        row(1.0, 0.9, 1.1, timing="replay"),
        row(2.0, 1.9, 2.1, timing="replay"),
        row(1.0, None, None),  # no interval: exact, counted
    ]
    total = Interval(3.0, 2.97, 3.06, 0.95, "bootstrap").as_dict()
    noise = operators_noise(rows, total, None)
    assert noise is not None and noise.replay and noise.exact_rows == 1
    assert (noise.operators.low, noise.operators.high) == pytest.approx((3.97, 4.06))
    wrong = {**total, "value": 5.0}  # not the rows' sum: each row's own interval instead
    other = operators_noise(rows, wrong, None)
    assert other is not None and not other.replay
    assert other.operators.high - other.operators.value == pytest.approx(math.hypot(0.1, 0.1))


def test_predicted_operators_move_together() -> None:
    z90 = 1.6448536269514722
    rows = [
        row(1.0, 1.0, 1.0),  # measured exactly
        row(1.0, 1.0 - z90, 1.0 + z90, source="predicted", level=None),
        row(1.0, 1.0 - z90, 1.0 + z90, source="predicted", level=None),
    ]
    noise = operators_noise(rows, None, 0.9)
    assert noise is not None
    # two predicted rows with σ = 1 each, summed linearly: σ = 2, at 95 %
    assert noise.operators.high == pytest.approx(3.0 + 2 * Z95)


def test_total_shifts_on_a_cpu_and_scales_on_a_gpu() -> None:
    ops = Interval(10.0, 9.0, 12.0, 0.95, "t")
    cpu = total_interval(ops, 10.0, 11.0, True)  # 1 s between operators added
    assert (cpu.value, cpu.low, cpu.high) == (11.0, 10.0, 13.0)
    gpu = total_interval(ops, 10.0, 20.0, False)  # host-bound pipeline twice as long
    assert (gpu.low, gpu.high) == (18.0, 24.0)


def _store(store: Store, *, noisy: bool = False) -> None:
    spec = spec_dict("toy", [linear_op(), relu_op([4, 32], count=2)])
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(spec, "toy.yaml")])
        kind = get_or_create_device_kind(session, KIND)
        ids = {op: i for op, i in session.execute(select(OperatorConfig.op, OperatorConfig.id))}
        model_id = session.scalars(select(Model.id)).one()
        flags = ["host_noisy"] if noisy else []
        session.add(
            Measurement(
                config_id=ids["torch.nn.Linear"],
                device_kind_id=kind.id,
                **result_row(time_median_s=1e-3, time_low_s=0.98e-3, time_high_s=1.02e-3),
                time_ci_level=0.96,
                flags=flags,
            )
        )
        session.add(
            Measurement(
                config_id=ids["torch.nn.ReLU"],
                device_kind_id=kind.id,
                **result_row(time_median_s=2e-4),  # stored without an interval
            )
        )
        session.add(
            FullModelRun(
                model_id=model_id,
                device_kind_id=kind.id,
                **result_row(time_median_s=1.5e-3, time_low_s=1.45e-3, time_high_s=1.6e-3),
                time_ci_level=0.96,
            )
        )


def test_the_estimate_carries_its_error_s_interval(store: Store) -> None:
    _store(store)
    with store.transaction() as session:
        est = estimate_model(session, "toy", KIND)
    assert est.noise is not None and est.noise.exact_rows == 1
    total = est.time_interval
    assert total is not None and total.value == pytest.approx(1.4e-3)
    assert total.low < 1.4e-3 < total.high
    err = est.time_error_interval
    assert err is not None and err.value == pytest.approx(1.4 / 1.5 - 1)
    assert err.low < err.value < err.high and err.holds(0.0) is (err.low <= 0 <= err.high)
    summary = est.summary()
    assert summary["time_error_interval"]["value"] == pytest.approx(err.value)
    assert summary["within_noise"] == err.holds(0.0)
    assert summary["figures_without_interval"] == 1
    assert not any("noisy host" in w for w in est.warnings)


def test_the_estimate_names_figures_of_a_noisy_host(store: Store) -> None:
    _store(store, noisy=True)
    with store.transaction() as session:
        est = estimate_model(session, "toy", KIND)
    [warning] = [w for w in est.warnings if "noisy host" in w]
    assert "1 configurations (torch.nn.Linear" in warning
