"""Coverage counts opaque work, and time between operators that carries a model is a warning."""

from __future__ import annotations

import json
import math

import pytest
from sqlalchemy import select

from operator_db.db.ingest import ingest_specs
from operator_db.db.models import FullModelRun, Measurement, Model, OperatorConfig
from operator_db.db.queries import get_or_create_device_kind
from operator_db.db.store import Store
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.harvest import harvest
from operator_db.roofline.bounds import Peaks
from operator_db.specs import TensorSpec, parse_spec
from operator_db.study.analysis import model_table
from tests.helpers import result_row, run_cli

KIND = "cpu:Test"
PEAKS = Peaks(flops_per_s=1e11, bytes_per_s=1e10, source="test")
INPUT = TensorSpec(name="x", shape=[64, 256])


def _store_model(store: Store, *, custom_leaves: str, hollow_s: float) -> None:
    """Harvest MostlyCustom; measure each configuration that can be (fabricated rows: 10 µs a
    call), and the model: 1 ms whole, ``hollow_s`` with its recorded modules stubbed."""
    result = harvest(
        "module:tests.harvest.models:mostly_custom",
        [INPUT],
        name="mostly",
        custom_leaves=custom_leaves,  # type: ignore[arg-type]
    )
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(result.spec.model_dump(mode="json"), "mostly.yaml")])
        kind = get_or_create_device_kind(session, KIND)
        for config_id, form in session.execute(select(OperatorConfig.id, OperatorConfig.form)):
            if form != "opaque":
                session.add(
                    Measurement(
                        config_id=config_id,
                        device_kind_id=kind.id,
                        **result_row(time_median_s=10e-6),
                    )
                )
        run = FullModelRun(
            model_id=session.scalars(select(Model.id)).one(),
            device_kind_id=kind.id,
            **result_row(time_median_s=1e-3),
        )
        run.hollow_time_s = hollow_s
        session.add(run)


def test_an_opaque_module_doing_most_of_the_work_is_a_coverage_gap_and_a_warning(
    store: Store,
) -> None:
    # The opaque BigMatmul runs for real in the hollow run: 0.97 ms of the model's 1 ms.
    _store_model(store, custom_leaves="opaque", hollow_s=0.97e-3)
    with store.transaction() as session:
        est = estimate_model(session, "mostly", KIND, EstimateOptions(peaks=PEAKS))
    assert (est.opaque, est.unmeasured) == (1, [])
    assert est.coverage == pytest.approx(2 / 4)  # two Linear calls measured, two opaque ones not
    # BigMatmul's live-counted FLOPs (2 × 64·256·256 a call) make most of the roofline time.
    assert est.coverage_roofline is not None and est.coverage_roofline < 0.1
    assert est.time_s == pytest.approx(20e-6)
    assert est.between_ops_s == pytest.approx(0.97e-3)
    assert est.between_ops_share == pytest.approx(0.97e-3 / 0.99e-3)
    assert est.time_error == pytest.approx(-0.01)  # a good total, for the wrong reason
    assert est.warnings[0].startswith("coverage 50.0% of calls, ")
    assert est.warnings[1] == (
        "1 opaque configurations (2 calls: tests.harvest.models.BigMatmul) cannot be measured "
        "and are left out of the operators' sum"
    )
    assert est.warnings[2].startswith(
        "time between operators (hollow run) is 98.0% of the estimate, over 10% "
        "(OPDB_ESTIMATE_BETWEEN_OPS_WARN)"
    )
    summary = est.summary()
    assert summary["warnings"] == est.warnings and summary["between_ops_share"] > 0.9


def test_traced_the_same_model_is_whole(store: Store) -> None:
    # Traced, BigMatmul is two matmul calls that are measured; the hollow run keeps only them.
    _store_model(store, custom_leaves="trace", hollow_s=0.022e-3)
    with store.transaction() as session:
        est = estimate_model(session, "mostly", KIND, EstimateOptions(peaks=PEAKS))
    assert (est.opaque, est.coverage, est.coverage_roofline) == (0, 1.0, 1.0)
    assert est.between_ops_s == pytest.approx(0.022e-3 - 2 * 10e-6)  # 4.8 %: no warning
    assert est.warnings == []


@pytest.mark.parametrize(("limit", "warned"), [(0.5, True), (0.99, False)])
def test_the_between_operators_limit_is_a_setting(
    store: Store,
    db_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    limit: float,
    warned: bool,
) -> None:
    _store_model(store, custom_leaves="opaque", hollow_s=0.97e-3)
    monkeypatch.setenv("OPDB_ESTIMATE_BETWEEN_OPS_WARN", str(limit))
    table = run_cli(capsys, "estimate", "mostly", "--db", db_url)
    assert table.code == 0, table.err
    assert "warning: coverage 50.0% of calls" in table.out
    assert ("warning: time between operators (hollow run) is 98.0%" in table.out) == warned
    assert "0.970 ms, added (98.0% of the estimate)" in table.out
    data = json.loads(run_cli(capsys, "estimate", "mostly", "--json", "--db", db_url).out)
    assert len(data["warnings"]) == (3 if warned else 2)


def test_the_model_table_counts_opaque_calls_as_not_measured(store: Store) -> None:
    _store_model(store, custom_leaves="opaque", hollow_s=0.97e-3)
    with store.transaction(read_only=True) as session:
        row = model_table(session).iloc[0]
    assert row["coverage"] == pytest.approx(2 / 4)
    assert math.isnan(row["estimate_error"])  # given only at full coverage
