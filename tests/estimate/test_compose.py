"""Composition on hand-computed cases: Σ count × per-call cost, coverage, roofline, error."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from sqlalchemy import select

from operator_db.db.ingest import ingest_specs
from operator_db.db.models import FullModelRun, Measurement, Model, OperatorConfig, utcnow
from operator_db.db.queries import get_or_create_device_kind
from operator_db.db.store import Store
from operator_db.errors import NotFoundError
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.roofline.bounds import Peaks
from operator_db.specs import parse_spec
from tests.helpers import linear_op, relu_op, result_row, spec_dict

KIND = "fake:FakeGPU"
OPAQUE = {"op": "my.Custom", "form": "opaque", "inputs": [{"shape": [4, 32]}], "count": 1}


def setup(store: Store, *, measure_relu: bool = True) -> None:
    """Model 'toy': Linear(16→32) once, ReLU on 4x32 twice, one opaque; measured by hand."""
    spec = spec_dict("toy", [linear_op(), relu_op([4, 32], count=2), OPAQUE])
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(spec, "toy.yaml")])
        kind = get_or_create_device_kind(session, KIND)
        ids = {op: i for op, i in session.execute(select(OperatorConfig.op, OperatorConfig.id))}
        model_id = session.scalars(select(Model.id)).one()
        old = utcnow() - timedelta(hours=1)
        # An older, slower Linear measurement: the newest one is used.
        session.add(
            Measurement(
                config_id=ids["torch.nn.Linear"],
                device_kind_id=kind.id,
                **result_row(time_median_s=9e-3, created_at=old),
            )
        )
        session.add(
            Measurement(
                config_id=ids["torch.nn.Linear"],
                device_kind_id=kind.id,
                **result_row(
                    time_median_s=1e-3, energy_per_call_j=0.1, dynamic_energy_per_call_j=0.06
                ),
            )
        )
        session.add(
            Measurement(
                config_id=ids["torch.nn.Linear"],
                device_kind_id=kind.id,
                **result_row(timing="graph", time_median_s=0.8e-3),
            )
        )
        if measure_relu:
            session.add(
                Measurement(
                    config_id=ids["torch.nn.ReLU"],
                    device_kind_id=kind.id,
                    **result_row(
                        time_median_s=2e-4, energy_per_call_j=0.02, dynamic_energy_per_call_j=0.01
                    ),
                )
            )
        session.add(
            FullModelRun(
                model_id=model_id,
                device_kind_id=kind.id,
                **result_row(
                    time_median_s=1.5e-3, energy_per_call_j=0.15, dynamic_energy_per_call_j=0.08
                ),
            )
        )


def test_sum_of_count_times_cost(store: Store) -> None:
    setup(store)
    with store.transaction() as session:
        est = estimate_model(session, "toy", KIND)
    assert est.time_s == pytest.approx(1e-3 + 2 * 2e-4)
    assert est.energy_j == pytest.approx(0.1 + 2 * 0.02)
    assert est.full_run_time_s == pytest.approx(1.5e-3)
    assert est.time_error == pytest.approx((1.4e-3 - 1.5e-3) / 1.5e-3)
    assert est.energy_error == pytest.approx((0.14 - 0.15) / 0.15)
    # Every measurable call is measured; the opaque one never is: 3 of 4 calls.
    assert est.coverage == 0.75 and est.unmeasured == [] and est.opaque == 1
    assert est.warnings == [
        "coverage 75.0% of calls measured: the operators' sum leaves out the rest",
        "1 opaque configurations (1 calls: my.Custom) cannot be measured and are left out of "
        "the operators' sum",
    ]
    assert list(est.configs["op"]) == ["torch.nn.Linear", "torch.nn.ReLU", "my.Custom"]
    assert list(est.configs["time_share"].round(6))[:2] == [
        round(1e-3 / 1.4e-3, 6),
        round(4e-4 / 1.4e-3, 6),
    ]
    by_op = est.by_op.set_index("op")
    assert by_op.loc["torch.nn.ReLU", "calls"] == 2
    assert by_op.loc["torch.nn.ReLU", "time_s"] == pytest.approx(4e-4)
    assert by_op.loc["torch.nn.Linear", "flops"] == 4096
    assert by_op.loc["torch.nn.ReLU", "flops"] == 2 * 128


def test_dynamic_energy_and_graph_timing(store: Store) -> None:
    setup(store)
    with store.transaction() as session:
        est = estimate_model(
            session, "toy", KIND, EstimateOptions(timing="graph", energy="dynamic")
        )
    assert est.time_s == pytest.approx(0.8e-3 + 2 * 2e-4)
    assert list(est.configs["timing"])[:2] == ["graph", "eager"]
    assert est.energy_j == pytest.approx(0.06 + 2 * 0.01)
    assert est.full_run_energy_j == pytest.approx(0.08)


def test_coverage_and_roofline(store: Store) -> None:
    setup(store, measure_relu=False)
    peaks = Peaks(flops_per_s=1e9, bytes_per_s=1e8)
    with store.transaction() as session:
        est = estimate_model(session, "toy", KIND, EstimateOptions(peaks=peaks))
    assert est.time_s == pytest.approx(1e-3)
    # By count: Linear ×1 measured, ReLU ×2 not, the opaque call never.
    assert est.coverage == pytest.approx(1 / 4)
    assert len(est.unmeasured) == 1
    linear_roof = max(4096 / 1e9, 4 * (64 + 512 + 32 + 128) / 1e8)
    relu_roof = max(128 / 1e9, 8 * 128 / 1e8)
    assert est.roofline_time_s == pytest.approx(linear_roof + 2 * relu_roof)
    # The opaque configuration has no FLOPs or bytes in this spec: no roofline time to weigh.
    assert est.coverage_roofline == pytest.approx(linear_roof / (linear_roof + 2 * relu_roof))
    assert est.warnings[:2] == [
        "coverage 25.0% of calls, 59.0% of roofline-bound time measured: the operators' sum "
        "leaves out the rest",
        "1 configurations not measured yet: the estimate is partial",
    ]
    by_op = est.by_op.set_index("op")
    assert by_op.loc["torch.nn.Linear", "energy_j"] == pytest.approx(0.1)
    assert math.isnan(by_op.loc["torch.nn.ReLU", "energy_j"])  # unmeasured: unknown, not 0 J


def test_unknown_model_or_kind(store: Store) -> None:
    setup(store)
    with store.transaction() as session, pytest.raises(NotFoundError, match="no device kind"):
        estimate_model(session, "toy", "NVIDIA H100")
    with store.transaction() as session, pytest.raises(NotFoundError, match="no model named"):
        estimate_model(session, "nope", KIND)


def test_median_of_all_stored_results(store: Store) -> None:
    setup(store)
    with store.transaction() as session:
        est = estimate_model(session, "toy", KIND, EstimateOptions(aggregate="median"))
    # Linear: the median of 9 ms (older) and 1 ms (newer); ReLU: its only result.
    assert est.time_s == pytest.approx(5e-3 + 2 * 2e-4)
    # The older Linear result has no energy: no median energy for it, so no energy estimate.
    assert est.energy_j is None


def _between_setup(
    store: Store,
    kind_name: str,
    *,
    hollow: float | None,
    measure_function: bool = True,
    host: dict[str, float] | None = None,
    hollow_host: float | None = None,
    replay: dict[str, float] | None = None,
) -> None:
    """Model 'glue': Linear once (1 ms), torch.relu as a function 3 times (0.1 ms each)."""
    relu_fn = {
        "op": "torch.relu",
        "form": "function",
        "inputs": [{"shape": [4, 32], "dtype": "float32"}],
        "call": {"args": [{"tensor": 0}]},
        "outputs": [{"shape": [4, 32], "dtype": "float32"}],
        "count": 3,
        "flops": 128,
        "flop_rule": "elementwise",
        "bytes": 1024,
    }
    spec = spec_dict("glue", [linear_op(), relu_fn])
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(spec, "glue.yaml")])
        kind = get_or_create_device_kind(session, kind_name)
        ids = {op: i for op, i in session.execute(select(OperatorConfig.op, OperatorConfig.id))}
        times = {"torch.nn.Linear": 1e-3, "torch.relu": 1e-4}
        for op, t in times.items():
            if op == "torch.relu" and not measure_function:
                continue
            row = Measurement(
                config_id=ids[op], device_kind_id=kind.id, **result_row(time_median_s=t)
            )
            row.host_time_per_call_s = (host or {}).get(op)
            session.add(row)
        run = FullModelRun(
            model_id=session.scalars(select(Model.id)).one(),
            device_kind_id=kind.id,
            **result_row(time_median_s=1.6e-3),
        )
        run.hollow_time_s = hollow
        run.hollow_host_time_s = hollow_host
        if replay is not None:
            run.replay = {"per_call_s": {str(ids[op]): t for op, t in replay.items()}}
        session.add(run)


def test_time_between_operators_adds_on_a_cpu(store: Store) -> None:
    _between_setup(store, "cpu:Test", hollow=0.5e-3)
    with store.transaction() as session:
        est = estimate_model(session, "glue", "cpu:Test")
    assert est.time_s == pytest.approx(1.3e-3)  # the operators alone
    assert est.between_ops_s == pytest.approx(0.5e-3 - 3 * 1e-4)  # hollow − functional ops
    assert est.adds_between and est.total_time_s == pytest.approx(1.5e-3)
    assert est.time_error == pytest.approx((1.5e-3 - 1.6e-3) / 1.6e-3)
    assert est.operators_time_error == pytest.approx((1.3e-3 - 1.6e-3) / 1.6e-3)
    summary = est.summary()
    assert summary["total_time_s"] == pytest.approx(1.5e-3)
    assert summary["between_ops_s"] == pytest.approx(0.2e-3)


def test_time_between_operators_is_reported_not_added_on_a_gpu(store: Store) -> None:
    _between_setup(store, "NVIDIA Test GPU", hollow=0.5e-3)
    with store.transaction() as session:
        est = estimate_model(session, "glue", "NVIDIA Test GPU")
    assert est.between_ops_s == pytest.approx(0.2e-3) and not est.adds_between
    assert est.total_time_s == est.time_s == pytest.approx(1.3e-3)
    assert any("overlaps the GPU's work" in note for note in est.notes)


@pytest.mark.parametrize(
    ("hollow", "measure_function", "between", "total"),
    [
        (None, True, None, 1.3e-3),  # no hollow run stored
        (0.5e-3, False, None, 1.0e-3),  # a functional op not measured: cannot subtract it
        (0.2e-3, True, -0.1e-3, 1.3e-3),  # noise made it negative: reported, counts as 0
    ],
)
def test_time_between_operators_unknown_or_negative(
    store: Store, hollow: float | None, measure_function: bool, between: float | None, total: float
) -> None:
    _between_setup(store, "cpu:Test", hollow=hollow, measure_function=measure_function)
    with store.transaction() as session:
        est = estimate_model(session, "glue", "cpu:Test")
    assert est.between_ops_s == (None if between is None else pytest.approx(between))
    assert est.total_time_s == pytest.approx(total)


@pytest.mark.parametrize(
    ("host", "hollow_host", "stage", "total", "bound_by"),
    [
        # The device's 1.3 ms of operators outlast the host's 0.4 ms + 20 µs of issuing.
        ({"torch.nn.Linear": 20e-6, "torch.relu": 5e-6}, 0.4e-3, 0.42e-3, 1.3e-3, "device"),
        # A launch-bound model: the host needs 2.05 ms to issue what the device does in 1.3 ms.
        ({"torch.nn.Linear": 50e-6, "torch.relu": 5e-6}, 2.0e-3, 2.05e-3, 2.05e-3, "host"),
        # No issue time for the module: no pipeline, the operators as before.
        ({"torch.relu": 5e-6}, 2.0e-3, None, 1.3e-3, None),
        # No issue time for the hollow run (results from before revision 0004).
        ({"torch.nn.Linear": 50e-6}, None, None, 1.3e-3, None),
    ],
)
def test_a_gpu_model_is_estimated_as_a_two_stage_pipeline(
    store: Store,
    host: dict[str, float],
    hollow_host: float | None,
    stage: float | None,
    total: float,
    bound_by: str | None,
) -> None:
    _between_setup(store, "NVIDIA Test GPU", hollow=0.5e-3, host=host, hollow_host=hollow_host)
    with store.transaction() as session:
        est = estimate_model(session, "glue", "NVIDIA Test GPU")
    assert est.time_s == pytest.approx(1.3e-3)  # the device stage: the operators
    assert est.host_time_s == (None if stage is None else pytest.approx(stage))
    assert est.total_time_s == pytest.approx(total) and est.bound_by == bound_by
    assert est.summary()["bound_by"] == bound_by
    assert any("GPU pipeline" in note for note in est.notes) == (stage is not None)


def test_estimates_say_which_cache_mode_they_compose(store: Store) -> None:
    """Cold-cache results are kept apart: a warm estimate ignores them, a cold one uses them."""
    setup(store)
    with store.transaction() as session:
        kind = get_or_create_device_kind(session, KIND)
        ids = {op: i for op, i in session.execute(select(OperatorConfig.op, OperatorConfig.id))}
        for op, t in (("torch.nn.Linear", 3e-3), ("torch.nn.ReLU", 1e-3)):
            session.add(
                Measurement(
                    config_id=ids[op],
                    device_kind_id=kind.id,
                    **result_row(time_median_s=t, cache_mode="cold"),
                )
            )
    with store.transaction() as session:
        warm = estimate_model(session, "toy", KIND)
        cold = estimate_model(session, "toy", KIND, EstimateOptions(cache_mode="cold"))
    assert warm.cache_mode == "warm" and warm.time_s == pytest.approx(1e-3 + 2 * 2e-4)
    assert cold.cache_mode == "cold" and cold.time_s == pytest.approx(3e-3 + 2 * 1e-3)
    assert cold.full_run_time_s is None  # the model was measured warm only
    assert cold.summary()["cache_mode"] == "cold"
    assert any("cold caches" in note for note in cold.notes)


def test_a_cpu_model_composes_its_operators_as_timed_in_the_replay_of_its_calls(
    store: Store,
) -> None:
    """Where the model's run timed the operators in a replay of its calls, those times are
    composed — the functional ones subtracted from the hollow run too — and ``alone`` ignores
    them; a configuration the replay did not time keeps its time looped alone."""
    _between_setup(store, "cpu:Test", hollow=0.5e-3, replay={"torch.nn.Linear": 1.2e-3})
    with store.transaction() as session:
        alone = estimate_model(session, "glue", "cpu:Test", EstimateOptions(context="alone"))
        est = estimate_model(session, "glue", "cpu:Test")
    assert alone.context == "alone" and alone.time_s == pytest.approx(1.3e-3)
    assert est.context == "replay" and est.summary()["context"] == "replay"
    assert [r["timing"] for r in est.config_rows] == ["replay", "eager"]
    assert est.time_s == pytest.approx(1.2e-3 + 3 * 1e-4)
    assert est.total_time_s == pytest.approx(1.5e-3 + 0.2e-3)
    assert "in context: 1 of 2 configurations timed in a replay" in " ".join(est.notes)


def test_the_replay_of_functional_operators_is_what_the_hollow_run_loses(store: Store) -> None:
    """The hollow run runs the functional operators inside the model: what it loses to them is
    their time in context, the replay's, not their time looped alone."""
    _between_setup(
        store,
        "cpu:Test",
        hollow=0.5e-3,
        replay={"torch.nn.Linear": 1.1e-3, "torch.relu": 1.5e-4},
    )
    with store.transaction() as session:
        est = estimate_model(session, "glue", "cpu:Test")
        median = estimate_model(session, "glue", "cpu:Test", EstimateOptions(aggregate="median"))
    assert est.between_ops_s == pytest.approx(0.5e-3 - 3 * 1.5e-4)
    assert est.total_time_s == pytest.approx(1.1e-3 + 0.5e-3)
    # With one stored run, the median of the replays is that run's.
    assert median.time_s == pytest.approx(est.time_s)
