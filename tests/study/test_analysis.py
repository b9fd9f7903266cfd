"""Studies on a hand-seeded database: model table, batch, correlation, forward:backward."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import select

from operator_db.db.ingest import ingest_specs
from operator_db.db.models import FullModelRun, Measurement, Model, OperatorConfig, utcnow
from operator_db.db.queries import get_or_create_device_kind
from operator_db.db.store import Store
from operator_db.errors import NotFoundError
from operator_db.estimate.compose import estimate_model
from operator_db.specs import parse_spec
from operator_db.study import analysis
from tests.helpers import linear_op, relu_op, result_row, spec_dict

CPU = "cpu:Test CPU"
GPU = "NVIDIA Test GPU"
REF = "module:operator_db.examples:mlp"


def mlp_spec(batch: int) -> dict[str, Any]:
    """One member of the 'mlp' family: Linear(16→32) once, ReLU twice, at ``batch``."""
    spec = spec_dict(f"mlp-b{batch}", [linear_op(batch=batch), relu_op([batch, 32], count=2)])
    spec["model"]["batch_size"] = batch
    spec["model"]["inputs"][0]["shape"] = [batch, 16]
    return spec


def train_spec() -> dict[str, Any]:
    """A training model on the batch-4 shapes: its configurations' twins are mlp-b4's."""
    linear = linear_op() | {"flops_backward": 2 * 4096}
    relu = relu_op([4, 32], count=2) | {"flops_backward": 128}
    spec = spec_dict("toy-train", [linear, relu], mode="training")
    spec["model"]["batch_size"] = 4
    return spec


def seed(store: Store) -> None:
    """Three inference batch sizes of one family and one training model, measured by hand.

    Full runs (latency per call): mlp-b1 CPU 1 ms / GPU 0.2 ms, mlp-b4 CPU 2 ms / GPU 0.25 ms,
    mlp-b8 CPU 4 ms, toy-train CPU 5 ms. Operators of mlp-b4 and toy-train measured on the CPU,
    the training Linear also on the GPU (without its forward twin there).
    """
    specs = [mlp_spec(1), mlp_spec(4), mlp_spec(8), train_spec()]
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(s, f"{s['model']['name']}.yaml") for s in specs])
        cpu = get_or_create_device_kind(session, CPU)
        gpu = get_or_create_device_kind(session, GPU)
        models = {name: id_ for name, id_ in session.execute(select(Model.name, Model.id))}
        configs = {
            (op, mode, cfg_inputs[0]["shape"][0]): id_
            for op, mode, cfg_inputs, id_ in session.execute(
                select(
                    OperatorConfig.op, OperatorConfig.mode, OperatorConfig.inputs, OperatorConfig.id
                )
            )
        }
        old = utcnow() - timedelta(hours=1)

        def run(model: str, kind: int, time_s: float, **extra: Any) -> None:
            session.add(
                FullModelRun(
                    model_id=models[model],
                    device_kind_id=kind,
                    **result_row(time_median_s=time_s, **extra),
                )
            )

        def measure(key: tuple[str, str, int], kind: int, time_s: float) -> None:
            session.add(
                Measurement(
                    config_id=configs[key], device_kind_id=kind, **result_row(time_median_s=time_s)
                )
            )

        run("mlp-b1", cpu.id, 9e-3, created_at=old)  # older: the newest run is used
        run("mlp-b1", cpu.id, 1e-3)
        run("mlp-b1", cpu.id, 0.5e-3, timing="graph")  # not eager: left out
        run("mlp-b1", gpu.id, 2e-4)
        run("mlp-b4", cpu.id, 2e-3, energy_per_call_j=0.2)
        run("mlp-b4", gpu.id, 2.5e-4)
        run("mlp-b8", cpu.id, 4e-3)
        run("toy-train", cpu.id, 5e-3)
        measure(("torch.nn.Linear", "inference", 4), cpu.id, 1.2e-3)
        measure(("torch.nn.ReLU", "inference", 4), cpu.id, 3e-4)
        measure(("torch.nn.Linear", "training", 4), cpu.id, 3.6e-3)
        measure(("torch.nn.ReLU", "training", 4), cpu.id, 7e-4)
        measure(("torch.nn.Linear", "training", 4), gpu.id, 5e-4)


def row(frame: pd.DataFrame, **where: Any) -> pd.Series:
    mask = np.ones(len(frame), dtype=bool)
    for name, value in where.items():
        mask &= (frame[name] == value).to_numpy()
    selected = frame[mask]
    assert len(selected) == 1, selected
    return selected.iloc[0]


# --- Spearman on hand-computed cases (no database) --------------------------------------------


def test_spearman_monotone_and_reversed() -> None:
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert analysis.spearman(x, [v**3 for v in x]) == pytest.approx(1.0)
    assert analysis.spearman(x, [-math.exp(v) for v in x]) == pytest.approx(-1.0)


def test_spearman_textbook_and_ties() -> None:
    # No ties: 1 − 6Σd² / (n(n² − 1)) with d = (−1, 1, −1, 1, 0): 1 − 24/120.
    assert analysis.spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    # Ties: ranks x = (1, 2.5, 2.5, 4), y = (1, 3, 2, 4); r = 4.5 / sqrt(4.5 × 5) = 3/√10.
    assert analysis.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(3 / math.sqrt(10))


def test_spearman_missing_and_undefined() -> None:
    # The pair with a missing value is dropped, then the rest is ranked afresh.
    assert analysis.spearman([1, 2, 3, None], [1, 2, 3, -100]) == pytest.approx(1.0)
    assert math.isnan(analysis.spearman([1, 2, 3], [5, 5, 5]))  # constant: undefined
    assert math.isnan(analysis.spearman([1.0], [2.0]))


def test_spearman_matrix_pairwise() -> None:
    frame = pd.DataFrame(
        {
            "a": [1, 2, 3, 4, 5],
            "b": [50, 40, 30, 20, 10],
            "c": [1.0, None, 2.0, None, 3.0],
            "d": [7, 7, 7, 7, 7],
        }
    )
    rho, pairs = analysis.spearman_matrix(frame)
    assert rho.loc["a", "b"] == pytest.approx(-1.0)
    assert rho.loc["a", "c"] == pytest.approx(1.0) and pairs.loc["a", "c"] == 3
    assert rho.loc["b", "c"] == pytest.approx(-1.0)
    assert math.isnan(rho.loc["a", "d"]) and math.isnan(rho.loc["d", "d"])
    assert list(np.diag(rho.to_numpy()))[:3] == [1.0, 1.0, 1.0]
    assert pairs.loc["a", "a"] == 5 and pairs.loc["c", "c"] == 3
    rho4, _ = analysis.spearman_matrix(frame, ["a", "c"], min_periods=4)
    assert math.isnan(rho4.loc["a", "c"]) and rho4.loc["a", "a"] == 1.0


def test_spearman_matrix_agrees_with_pandas() -> None:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.integers(0, 6, size=(40, 4)).astype(float), columns=list("wxyz"))
    frame.iloc[rng.integers(0, 40, 12), rng.integers(0, 4, 12)] = np.nan
    rho, _ = analysis.spearman_matrix(frame)
    expected = frame.corr(method="spearman", min_periods=3)
    pd.testing.assert_frame_equal(rho, expected, check_exact=False, atol=1e-12)


def test_spearman_matrix_agrees_with_scipy() -> None:
    """Fixed data with ties and missing values: each pair against scipy on its complete rows."""
    from scipy import stats  # a dev dependency: the reference implementation

    nan = math.nan
    frame = pd.DataFrame(
        {
            "cpu": [3.1, 1.2, 2.2, 2.2, 9.0, 4.4, nan, 0.7, 5.5, 5.5, 8.1, 1.2],
            "gpu": [0.4, 0.1, nan, 0.3, 1.9, 0.6, 0.8, 0.05, 0.7, 0.9, nan, 0.1],
            "flops": [4e9, 1e9, 2e9, 2e9, 2e10, 4e9, 8e9, 5e8, 1e10, 1e10, 1.6e10, 1e9],
            "params": [25e6, 11e6, 5e6, 5e6, 86e6, 25e6, 60e6, 3e6, 22e6, 22e6, 7e6, nan],
        }
    )
    rho, pairs = analysis.spearman_matrix(frame)
    for a in frame.columns:
        for b in frame.columns:
            both = frame[[a, b]].dropna() if a != b else frame[[a]].dropna()
            assert pairs.loc[a, b] == len(both)
            expected = 1.0 if a == b else float(stats.spearmanr(both[a], both[b]).statistic)
            assert rho.loc[a, b] == pytest.approx(expected, abs=1e-12), (a, b)
    # Ties are average ranks in both: cpu has two ties, flops and params three each.
    assert rho.loc["cpu", "flops"] == pytest.approx(
        float(stats.spearmanr(*frame[["cpu", "flops"]].dropna().T.to_numpy()).statistic)
    )


# --- studies on the database ------------------------------------------------------------------


def test_model_table_figures(store: Store) -> None:
    seed(store)
    with store.transaction(read_only=True) as session:
        table = analysis.model_table(session)
        composed = estimate_model(session, "mlp-b4", CPU).time_s
    assert list(table.columns) == analysis.MODEL_COLUMNS
    assert len(table) == 6
    b1 = row(table, model="mlp-b1", device_kind=CPU)
    assert b1["latency_s"] == pytest.approx(1e-3)  # newest eager run, not the older or graph one
    assert b1["throughput_per_s"] == pytest.approx(1000.0)
    assert b1["device_type"] == "cpu" and b1["reference"] == REF
    assert b1["family"] == f"{REF} · B×16"
    b4 = row(table, model="mlp-b4", device_kind=CPU)
    assert b4["throughput_per_s"] == pytest.approx(2000.0)
    assert b4["energy_per_call_j"] == pytest.approx(0.2)
    assert b4["energy_per_sample_j"] == pytest.approx(0.05)
    assert b4["flops"] == 4096 + 2 * 128 and b4["step_flops"] == 4352
    assert b4["params"] == 16 * 32 + 32
    assert b4["achieved_flops_per_s"] == pytest.approx(4352 / 2e-3)
    assert b4["estimate_s"] == pytest.approx(1.2e-3 + 2 * 3e-4) == pytest.approx(composed)
    assert b4["coverage"] == 1.0 and b4["estimate_error"] == pytest.approx(-0.1)
    assert row(table, model="mlp-b4", device_kind=GPU)["device_type"] == "gpu"
    b8 = row(table, model="mlp-b8", device_kind=CPU)
    assert math.isnan(b8["estimate_s"]) and b8["coverage"] == 0.0
    assert math.isnan(b8["energy_per_call_j"]) and math.isnan(b8["flops_backward"])
    train = row(table, model="toy-train", device_kind=CPU)
    assert train["flops_backward"] == 8192 + 2 * 128
    assert train["step_flops"] == 4352 + 8448
    assert train["family"] == f"{REF} · B×16 · training"
    assert train["estimate_s"] == pytest.approx(3.6e-3 + 2 * 7e-4)


def test_model_table_counts_shared_modules_once(store: Store) -> None:
    shared = linear_op(count=3)  # one module (one location) called three times
    twins = linear_op(inp=8, count=2) | {"locations": ["a", "b"]}  # two modules, same shape
    spec = spec_dict("shared", [shared, twins])
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(spec, "shared.yaml")])
        kind = get_or_create_device_kind(session, CPU)
        model_id = session.scalars(select(Model.id)).one()
        session.add(FullModelRun(model_id=model_id, device_kind_id=kind.id, **result_row()))
    with store.transaction(read_only=True) as session:
        table = analysis.model_table(session)
    assert table.loc[0, "params"] == (16 * 32 + 32) + 2 * (8 * 32 + 32)
    assert table.loc[0, "flops"] == 3 * 4096 + 2 * 2 * 4 * 8 * 32
    assert pd.isna(table.loc[0, "batch_size"]) and math.isnan(table.loc[0, "throughput_per_s"])
    assert table.loc[0, "family"] == f"{REF} · B×16"


def test_batch_study(store: Store) -> None:
    seed(store)
    with store.transaction(read_only=True) as session:
        batch = analysis.batch_study(session)
    assert list(batch.columns) == analysis.BATCH_COLUMNS
    assert set(batch["family"]) == {f"{REF} · B×16"} and set(batch["family_name"]) == {"mlp"}
    cpu = batch[batch["device_kind"] == CPU]
    assert list(cpu["batch_size"]) == [1, 4, 8]  # toy-train is a family of one batch size: out
    assert list(cpu["throughput_per_s"]) == pytest.approx([1000.0, 2000.0, 2000.0])
    assert list(cpu["throughput_gain"]) == pytest.approx([1.0, 2.0, 2.0])
    assert list(cpu["latency_per_sample_s"]) == pytest.approx([1e-3, 0.5e-3, 0.5e-3])
    gpu = batch[batch["device_kind"] == GPU]
    assert list(gpu["model"]) == ["mlp-b1", "mlp-b4"]
    assert list(gpu["throughput_gain"]) == pytest.approx([1.0, 4 / 2.5e-4 / (1 / 2e-4)])


def test_family_names() -> None:
    frame = pd.DataFrame(
        {
            "family": ["A", "A", "B", "B", "C", "D", "D"],
            "model": ["resnet50-b1", "resnet50-b8", "bert_bs1", "bert_bs32", "x", "y-1", "z"],
        }
    )
    assert analysis.family_names(frame) == {"A": "resnet50", "B": "bert", "C": "x", "D": "D"}
    clash = pd.DataFrame({"family": ["A", "B"], "model": ["net-b1", "net-b2"]})
    assert analysis.family_names(clash) == {"A": "A", "B": "B"}


def test_latency_vs_complexity(store: Store) -> None:
    seed(store)
    with store.transaction(read_only=True) as session:
        points = analysis.latency_vs_complexity(session, device_kinds=[CPU])
    assert list(points.columns) == analysis.COMPLEXITY_COLUMNS
    assert list(points["model"]) == ["mlp-b1", "mlp-b4", "mlp-b8", "toy-train"]
    assert list(points["step_flops"]) == [1024 + 64, 4352, 8192 + 512, 12800]
    assert list(points["latency_s"]) == pytest.approx([1e-3, 2e-3, 4e-3, 5e-3])


def test_correlation_study(store: Store) -> None:
    seed(store)
    with store.transaction(read_only=True) as session:
        corr = analysis.correlation_study(session)
        cpu_only = analysis.correlation_study(session, device_kinds=[CPU])
    assert (corr.cpu_kind, corr.gpu_kind) == (CPU, GPU)
    assert list(corr.data["model"]) == ["mlp-b1", "mlp-b4", "mlp-b8", "toy-train"]
    assert list(corr.data["gpu_latency_s"].fillna(-1)) == pytest.approx([2e-4, 2.5e-4, -1, -1])
    m, n = corr.matrix, corr.pairs
    assert list(m.columns) == analysis.CORRELATION_COLUMNS
    assert (
        m.loc["cpu_latency_s", "flops"] == pytest.approx(1.0)
        and n.loc["cpu_latency_s", "flops"] == 4
    )
    assert n.loc["cpu_latency_s", "gpu_latency_s"] == 2  # too few pairs: undefined
    assert math.isnan(m.loc["cpu_latency_s", "gpu_latency_s"])
    assert math.isnan(m.loc["params", "flops"])  # every model has 544 parameters: constant
    assert list(cpu_only.matrix.columns) == ["cpu_latency_s", "flops", "params"]
    assert "no GPU measurements: GPU latency column omitted" in cpu_only.notes


def test_forward_backward(store: Store) -> None:
    seed(store)
    with store.transaction(read_only=True) as session:
        fb = analysis.forward_backward(session)
    configs = fb.configs
    assert list(configs.columns) == analysis.FB_CONFIG_COLUMNS
    linear_cpu = row(configs, op="torch.nn.Linear", device_kind=CPU)
    assert linear_cpu["inputs"] == "4x16" and linear_cpu["flops_ratio"] == pytest.approx(2.0)
    assert linear_cpu["time_forward_s"] == pytest.approx(1.2e-3)
    assert linear_cpu["time_backward_s"] == pytest.approx(2.4e-3)
    assert linear_cpu["time_ratio"] == pytest.approx(2.0) and linear_cpu["status"] == "ok"
    relu_cpu = row(configs, op="torch.nn.ReLU", device_kind=CPU)
    assert relu_cpu["time_ratio"] == pytest.approx(4e-4 / 3e-4)
    linear_gpu = row(configs, op="torch.nn.Linear", device_kind=GPU)
    assert linear_gpu["status"] == "forward not measured"
    assert math.isnan(linear_gpu["time_ratio"])
    models = fb.models
    cpu = row(models, model="toy-train", device_kind=CPU)
    assert cpu["flops_forward"] == 4352 and cpu["flops_backward"] == 8448
    assert cpu["flops_ratio"] == pytest.approx(8448 / 4352) and cpu["flops_coverage"] == 1.0
    assert cpu["time_training_s"] == pytest.approx(3.6e-3 + 2 * 7e-4)
    assert cpu["time_forward_s"] == pytest.approx(1.2e-3 + 2 * 3e-4)
    assert cpu["time_ratio"] == pytest.approx(3.2e-3 / 1.8e-3)
    assert cpu["time_coverage"] == 1.0
    gpu = row(models, model="toy-train", device_kind=GPU)
    assert math.isnan(gpu["time_ratio"]) and gpu["time_coverage"] == 0.0
    assert fb.notes == ["configuration rows without both times: forward not measured ×1"]


def test_forward_backward_without_twin(store: Store) -> None:
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(train_spec(), "t.yaml")])
        kind = get_or_create_device_kind(session, CPU)
        linear = session.scalars(
            select(OperatorConfig.id).where(OperatorConfig.op == "torch.nn.Linear")
        ).one()
        session.add(Measurement(config_id=linear, device_kind_id=kind.id, **result_row()))
    with store.transaction(read_only=True) as session:
        fb = analysis.forward_backward(session)
    assert list(zip(fb.configs["op"], fb.configs["status"], strict=True)) == [
        ("torch.nn.Linear", "no inference twin"),
        ("torch.nn.ReLU", "no inference twin"),
    ]
    assert fb.configs["device_kind"].tolist()[0] == CPU and pd.isna(fb.configs["device_kind"][1])
    assert fb.models["flops_ratio"].tolist() == pytest.approx([8448 / 4352])


def test_empty_database_and_unknown_kind(store: Store) -> None:
    with store.transaction(read_only=True) as session:
        assert analysis.model_table(session).empty
        assert analysis.batch_study(session).empty
        assert analysis.latency_vs_complexity(session).empty
        corr = analysis.correlation_study(session)
        assert corr.matrix.empty and corr.notes
        fb = analysis.forward_backward(session)
        assert fb.models.empty and fb.notes[0].startswith("no training model")
        with pytest.raises(NotFoundError, match="no device kind"):
            analysis.model_table(session, device_kinds=["NVIDIA Nope"])
