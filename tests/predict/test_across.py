"""The cross-device model: families, spec sheets, fitting, zero- and few-shot, store and CLI."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import select

from operator_db.db import queries
from operator_db.db.ingest import ingest_specs
from operator_db.db.models import Measurement, OperatorConfig
from operator_db.db.store import Store
from operator_db.predict.across.features import config_frame, family_of, roofline_s
from operator_db.predict.across.fewshot import design
from operator_db.predict.across.train import Across, Fold, fit_across, fold_intervals
from operator_db.predict.devices import distances, gpu_facts, nearest
from operator_db.specs import parse_spec
from tests.helpers import linear_op, relu_op, result_row, run_cli, spec_dict

TRAIN = ("Tesla P4", "Tesla T4", "Tesla V100-PCIE-32GB", "NVIDIA A100-PCIE-40GB")
TARGET = "NVIDIA L4"
EFFICIENCY = {
    "Tesla P4": 2.6,
    "Tesla T4": 2.2,
    "Tesla V100-PCIE-32GB": 1.5,
    "NVIDIA A100-PCIE-40GB": 1.3,
    "NVIDIA L4": 2.0,
}
"""Each GPU's time / roofline bound in the synthetic law (a T4-like L4)."""
OVERHEAD_S = 0.0
"""No launch overhead: the law is a multiple of the roofline, kept by moving it by the roofline."""


class _Cfg:
    """A configuration as the features read it."""

    def __init__(self, op: dict[str, Any], key: str) -> None:
        self.key = key
        self.op = op["op"]
        self.form = op["form"]
        self.mode = "inference"
        self.dtype = op.get("dtype")
        self.args = op.get("args", {})
        self.inputs = op["inputs"]
        self.outputs = op.get("outputs", [])
        self.flops = op["flops"]
        self.flops_backward = None
        self.bytes = op["bytes"]
        self.params = op.get("params", 0)
        self.flop_rule = op.get("flop_rule")


def _ops(rng: random.Random, n: int = 110) -> list[dict[str, Any]]:
    widths = [2**e for e in range(5, 13)]
    seen: set[tuple[int, ...]] = set()
    ops: list[dict[str, Any]] = []
    while len(seen) < n:
        batch, a, b = rng.choice([1, 8, 64, 512]), rng.choice(widths), rng.choice(widths)
        if (batch, a, b) not in seen:
            seen.add((batch, a, b))
            ops.append(linear_op(a, b, batch))
    relus: set[tuple[int, int]] = set()
    while len(relus) < 100:  # of 13 × 8 shapes
        shape = (2 ** rng.randrange(13), rng.choice(widths))
        if shape not in relus:
            relus.add(shape)
            ops.append(relu_op(list(shape)))
    return ops


def _law(frame: pd.DataFrame, rng: random.Random) -> np.ndarray:
    facts = {k: gpu_facts(k) for k in set(frame["kind"])}
    roof = roofline_s(frame, facts)  # type: ignore[arg-type]
    eff = frame["kind"].map(EFFICIENCY).to_numpy()
    shape = np.where(frame["family"] == "linear", 1 + 0.3 * np.tanh(frame["ln_flops"] - 18), 1)
    noise = np.exp([rng.gauss(0, 0.02) for _ in range(len(frame))])
    return np.asarray(roof * eff * shape * noise + OVERHEAD_S)


CUMSUM: dict[str, Any] = {
    "op": "torch.cumsum",
    "form": "function",
    "inputs": [{"shape": [64, 4096], "dtype": "float32"}],
    "outputs": [{"shape": [64, 4096], "dtype": "float32"}],
    "flops": 64 * 4096,
    "bytes": 8 * 64 * 4096,
    "flop_rule": "scan",
}
"""An operator of no family: moved from the nearest GPU that measured it."""


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    rng = random.Random(0)
    configs = [_Cfg(op, f"k{i}") for i, op in enumerate(_ops(rng))]
    configs.append(_Cfg(CUMSUM, "cumsum"))
    base = config_frame(configs)
    parts = [base.assign(kind=k) for k in (*TRAIN, TARGET)]
    out = pd.concat(parts, ignore_index=True)
    out["time_s"] = _law(out, rng)
    return out


@pytest.fixture(scope="module")
def across(frame: pd.DataFrame) -> Across:
    facts = {k: gpu_facts(k) for k in TRAIN}
    return fit_across(frame[frame["kind"] != TARGET], facts, keep_folds=True)  # type: ignore[arg-type]


def test_families() -> None:
    assert family_of("torch.bmm", "bmm") == "bmm"
    assert family_of("torch.nn.Linear", "matmul") == "linear"
    assert family_of("torch.nn.functional.linear", None) == "linear"
    assert family_of("torch.nn.Conv2d", "convolution") == "conv"
    assert family_of("torch.nn.LayerNorm", "layer_norm") == "layernorm"
    assert family_of("torch.nn.Softmax", "softmax") == "softmax"
    assert family_of("torch.add", "elementwise") == "elementwise"
    assert family_of("torch.nn.Embedding", "none") == "other"


def test_gemm_shape_of_linear_and_bmm() -> None:
    lin = _Cfg(linear_op(64, 32, 8), "a")
    bmm = _Cfg(
        {
            "op": "torch.bmm",
            "form": "function",
            "inputs": [{"shape": [4, 16, 64]}, {"shape": [4, 64, 8]}],
            "outputs": [{"shape": [4, 16, 8]}],
            "flops": 2 * 4 * 16 * 64 * 8,
            "bytes": 100,
            "flop_rule": "bmm",
        },
        "b",
    )
    rows = config_frame([lin, bmm]).set_index("key")
    assert rows.loc["a", ["B", "M", "N", "K"]].tolist() == [1, 8, 64, 32]
    assert rows.loc["b", ["B", "M", "N", "K"]].tolist() == [4, 16, 64, 8]


def test_spec_sheets_and_nearest_gpu() -> None:
    facts = [gpu_facts(k) for k in TRAIN]
    assert all(f is not None for f in facts)
    l4 = gpu_facts(TARGET)
    assert l4 is not None and l4.sms == 58 and l4.compute_capability == 8.9
    assert nearest(l4, facts) == "Tesla T4"  # type: ignore[arg-type]
    a100 = gpu_facts("NVIDIA A100 80GB PCIe")
    assert a100 is not None and nearest(a100, facts) == "NVIDIA A100-PCIE-40GB"  # type: ignore[arg-type]
    assert min(distances(a100, facts).values()) >= 0  # type: ignore[arg-type]
    assert gpu_facts("cpu:AMD EPYC 9654") is None
    assert gpu_facts("no such GPU") is None


def test_design_is_spread_and_deterministic(frame: pd.DataFrame) -> None:
    pool = frame[(frame["kind"] == TRAIN[0]) & (frame["family"] == "linear")].reset_index()
    first, again = design(pool, "linear", 8), design(pool, "linear", 8)
    assert first == again and len(set(first)) == 8
    lnf = pool.loc[first, "ln_flops"]
    assert lnf.max() - lnf.min() > 0.5 * (pool["ln_flops"].max() - pool["ln_flops"].min())
    assert design(pool, "linear", 0) == []


def _err(pred: pd.DataFrame, rows: pd.DataFrame) -> float:
    return float(np.median(np.abs(pred["time_s"].to_numpy(float) / rows["time_s"] - 1)))


def test_zero_shot_few_shot_and_own(across: Across, frame: pd.DataFrame) -> None:
    assert set(across.families) == {"linear", "elementwise"}
    target = gpu_facts(TARGET)
    assert target is not None
    rows = frame[(frame["kind"] == TARGET) & (frame["family"] != "other")].drop(columns=["kind"])
    zero = across.predict(rows, target)
    assert set(zero["mode"]) == {"zero-shot"} and set(zero["source"]) == {"Tesla T4"}
    assert _err(zero, rows) < 0.25  # the law's L4 is 10 % off its nearest GPU's efficiency
    assert (zero["low"] <= zero["time_s"]).all() and (zero["time_s"] <= zero["high"]).all()
    measured = rows[rows["key"].isin([k for ks in across.calibration.values() for k in ks])]
    few = across.predict(rows, target, measured)
    assert set(few["mode"]) == {"few-shot"}
    assert _err(few, rows) < _err(zero, rows)
    t4 = gpu_facts("Tesla T4")
    assert t4 is not None
    mine = frame[(frame["kind"] == "Tesla T4") & (frame["family"] != "other")]
    own = across.predict(mine.drop(columns=["kind"]), t4)
    assert set(own["mode"]) == {"own"}


def test_predicting_many_kinds_at_once_gives_each_kind_s_figures(
    across: Across, frame: pd.DataFrame
) -> None:
    rows = frame[frame["kind"] == TARGET].drop(columns=["kind"])
    names = (TARGET, "NVIDIA H100 80GB HBM3", "Tesla T4", "NVIDIA A100 80GB PCIe")
    targets = [gpu_facts(n) for n in names]
    assert all(t is not None for t in targets)
    measured = {"NVIDIA A100 80GB PCIe": rows[rows["key"].isin(across.calibration["linear"])]}
    many = across.predict_many(rows, targets, measured)  # type: ignore[arg-type]
    for t in targets:
        assert t is not None
        one = across.predict(rows, t, measured.get(t.name))
        pd.testing.assert_frame_equal(many[t.name], one, check_dtype=False)
    assert set(many["Tesla T4"]["mode"].dropna()) == {"own", "moved"}
    assert "few-shot" in set(many["NVIDIA A100 80GB PCIe"]["mode"])


def test_an_operator_of_no_family_is_moved_from_the_nearest_gpu(
    across: Across, frame: pd.DataFrame
) -> None:
    target = gpu_facts(TARGET)
    assert target is not None and across.transfer is not None
    rows = frame[(frame["kind"] == TARGET) & (frame["key"] == "cumsum")].drop(columns=["kind"])
    moved = across.predict(rows, target)
    assert moved["mode"].tolist() == ["moved"] and moved["source"].tolist() == ["Tesla T4"]
    t4 = frame[(frame["kind"] == "Tesla T4") & (frame["key"] == "cumsum")]["time_s"].iloc[0]
    ratio = float(moved["time_s"].iloc[0]) / t4
    assert 0.3 < ratio < 1.5  # the L4's roofline is faster than the T4's
    lo, hi = across.transfer.interval
    assert lo <= 0 <= hi


def test_intervals_come_from_held_out_gpus(across: Across) -> None:
    for model in across.families.values():
        lo, hi = model.zero_interval
        assert math.isfinite(lo) and math.isfinite(hi) and lo < 0 < hi
        flo, fhi = model.few_interval
        assert math.isfinite(flo) and flo < fhi
    assert {f.kind for f in across.folds} == set(TRAIN)
    for fold in across.folds:
        assert fold.kind not in fold.model.offsets and fold.kind not in fold.model.profiles


def test_fold_intervals_leave_the_scored_gpu_out() -> None:
    def fold(kind: str, residual: float) -> Fold:
        scored = pd.DataFrame({"time_s": [math.e] * 20, "zero": [1.0 - residual] * 20})
        scored["few"] = scored["zero"]
        return Fold(kind, "linear", None, "X", scored)  # type: ignore[arg-type]

    folds = [fold("A", 0.1), fold("B", -0.2), fold("C", 0.3)]
    (zlo, zhi), (flo, fhi) = fold_intervals(folds, 0.9)
    assert (zlo, zhi) == pytest.approx((-0.3, 0.3)) and flo < fhi  # a new GPU: off either way
    (zlo, zhi), _ = fold_intervals(folds, 0.9, without="C")  # C's own residuals widen nothing
    assert (zlo, zhi) == pytest.approx((-0.2, 0.2))


def test_a_family_on_one_gpu_is_not_fitted(frame: pd.DataFrame) -> None:
    facts = {k: gpu_facts(k) for k in TRAIN[:1]}
    assert fit_across(frame[frame["kind"] == TRAIN[0]], facts).families == {}  # type: ignore[arg-type]


def _fill(store: Store) -> None:
    """Store a law model and the law's results on the training GPUs (L4: nothing)."""
    rng = random.Random(1)
    ops = _ops(rng)
    spec = spec_dict("law-net", ops)
    with store.transaction() as session:
        ingest_specs(session, [parse_spec(spec, "law-net.yaml")])
        configs = list(session.scalars(select(OperatorConfig)))
        for name in TRAIN:
            kind = queries.get_or_create_device_kind(session, name, "gpu")
            base = config_frame(configs).assign(kind=name)
            times = _law(base, rng)
            ids = base["config_id"].to_numpy()
            for config_id, t in zip(ids, times, strict=True):
                session.add(
                    Measurement(
                        config_id=int(config_id),
                        device_kind_id=kind.id,
                        **result_row(time_median_s=float(t), time_mean_s=float(t)),
                    )
                )


def test_train_store_estimate_compare_calibrate(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with Store.open(db_url) as store:
        _fill(store)
    out = run_cli(capsys, "predict", "across", "train", "--db", db_url)
    assert out.code == 0, out.err
    assert "cross-device model v1" in out.out and "linear" in out.out
    assert "zero-shot by" in out.out + out.err  # each family's chosen view, as it is fitted
    out = run_cli(
        capsys, "estimate", "law-net", "--device-kind", TARGET, "--predict", "--db", db_url
    )
    assert out.code == 0, out.err
    assert "cross-device model v1, zero-shot, from" in " ".join(out.out.split())
    out = run_cli(capsys, "estimate", "law-net", "--device-kind", TARGET, "--json", "--db", db_url)
    assert out.code == 0, out.err  # nothing measured there: predicted without being asked
    est = json.loads(out.out)
    assert est["predictor"]["method"] == "across devices" and est["coverage_predicted"] > 0.9
    views = est["predictor"]["views"]  # each family's chosen view, where a prediction is explained
    assert set(views) == {"linear", "elementwise"} and all(views.values()), views
    out = run_cli(
        capsys, "estimate", "law-net", "--device-kind", TARGET, "--predict", "--db", db_url
    )
    assert f"linear by {views['linear']}" in " ".join(out.out.split())
    out = run_cli(capsys, "compare", "law-net", "--db", db_url)
    assert out.code == 0, out.err
    assert TARGET in out.out and "Tesla T4" in out.out and "measured" in out.out
    assert "predicted zero-shot" in out.out
    out = run_cli(capsys, "predict", "across", "calibrate", "--store-only", "--db", db_url)
    assert out.code == 0, out.err
    with Store.open(db_url) as store, store.transaction() as session:
        model = queries.get_model(session, "opdb-calibration")
        count = len(queries.model_configs(session, model.id))
        row = queries.latest_cross_predictor(session, with_model=False)
    assert row is not None and row.version == 1 and set(row.kinds) == set(TRAIN)
    assert 0 < count <= 50


def test_without_a_model_it_says_how_to_train(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with Store.open(db_url) as store:
        _fill(store)
    out = run_cli(capsys, "predict", "across", "calibrate", "--store-only", "--db", db_url)
    assert out.code == 1 and "opdb predict across train" in out.err
    out = run_cli(capsys, "compare", "law-net", "--db", db_url)
    assert out.code == 0 and TARGET not in out.out


def test_each_element_type_is_predicted_by_its_own_model(
    frame: pd.DataFrame, across: Across
) -> None:
    """float16 rows go to the float16 model with the GPU's float16 peak, bfloat16 rows too
    (its stand-in), float32 rows to the float32 model, and a type without a model to none."""
    from dataclasses import replace

    def half(dtype: str) -> pd.DataFrame:
        ops = [op for op in _ops(random.Random(2)) if op["op"] == "torch.nn.Linear"]
        for op in ops:
            op["dtype"] = dtype
            for t in (*op["inputs"], *op.get("outputs", [])):
                t["dtype"] = dtype
        configs = [_Cfg(op, f"{dtype}-{i}") for i, op in enumerate(ops)]
        return config_frame(configs)

    rows16 = half("float16")
    assert set(rows16["dtype"]) == {"float16"} and set(frame["dtype"]) == {"float32"}
    train = [k for k in TRAIN if gpu_facts(k, "float16") is not None]  # the P4 has no fp16
    parts = [rows16.assign(kind=k) for k in (*train, TARGET)]
    data = pd.concat(parts, ignore_index=True)
    facts16 = {k: gpu_facts(k, "float16") for k in (*train, TARGET)}
    data["time_s"] = roofline_s(data, facts16) * data["kind"].map(EFFICIENCY).to_numpy()  # type: ignore[arg-type]
    train16 = {k: facts16[k] for k in train}
    across16 = fit_across(data[data["kind"] != TARGET], train16, dtype="float16")  # type: ignore[arg-type]
    both = replace(across, others={"float16": across16})
    target = gpu_facts(TARGET)
    assert target is not None
    fp32 = frame[frame["kind"] == TARGET].head(20)
    mine16 = data[data["kind"] == TARGET]
    rows16b = half("bfloat16").assign(kind=TARGET)
    odd = fp32.head(3).assign(dtype="float64")
    query = pd.concat([fp32, mine16, rows16b, odd], ignore_index=True)
    got = both.predict(query, target)
    n32, n16 = len(fp32), len(mine16)
    assert np.allclose(
        got["time_s"].iloc[:n32].astype(float), across.predict(fp32, target)["time_s"].astype(float)
    )
    alone = across16.predict(mine16, facts16[TARGET])["time_s"].to_numpy(float)  # type: ignore[arg-type]
    assert np.allclose(got["time_s"].iloc[n32 : n32 + n16].astype(float), alone)
    law = mine16["time_s"].to_numpy()
    assert np.median(np.abs(alone / law - 1)) < 0.25  # the float16 law, from its own model
    as_fp32 = across.predict(mine16.assign(dtype="float32"), target)["time_s"].to_numpy(float)
    assert not np.allclose(as_fp32, alone, rtol=0.05)  # the float32 model says otherwise
    bf16 = got["time_s"].iloc[n32 + n16 : n32 + 2 * n16].astype(float)
    assert bf16.notna().all()  # the float16 model, with the bfloat16 peak
    assert got["time_s"].iloc[-3:].isna().all()  # float64: no model
    many = both.predict_many(query, [target])[TARGET]
    assert np.allclose(many["time_s"].astype(float), got["time_s"].astype(float), equal_nan=True)


def test_training_learns_float16_apart_and_estimates_a_float16_model(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """float16 results on three GPUs give a float16 model beside the float32 one; a float16
    model on a GPU that measured nothing is then predicted by it."""
    rng = random.Random(3)
    train = [k for k in TRAIN if gpu_facts(k, "float16") is not None]
    ops = [op for op in _ops(rng) if op["op"] == "torch.nn.Linear"]
    for op in ops:
        op["dtype"] = "float16"
        for t in (*op["inputs"], *op["outputs"]):
            t["dtype"] = "float16"
        op["bytes"] //= 2
    with Store.open(db_url) as store:
        _fill(store)  # the float32 law model
        with store.transaction() as session:
            ingest_specs(session, [parse_spec(spec_dict("half-net", ops), "half-net.yaml")])
            model = queries.get_model(session, "half-net")
            configs = [mc.config for mc in queries.model_configs(session, model.id)]
            facts16 = {k: gpu_facts(k, "float16") for k in train}
            for name in train:
                kind = queries.get_or_create_device_kind(session, name, "gpu")
                base = config_frame(configs).assign(kind=name)
                assert set(base["dtype"]) == {"float16"}
                times = roofline_s(base, facts16) * EFFICIENCY[name]  # type: ignore[arg-type]
                for config_id, t in zip(base["config_id"], times, strict=True):
                    session.add(
                        Measurement(
                            config_id=int(config_id),
                            device_kind_id=kind.id,
                            **result_row(dtype="float16", time_median_s=float(t)),
                        )
                    )
    out = run_cli(capsys, "predict", "across", "train", "--db", db_url)
    assert out.code == 0, out.err
    with Store.open(db_url) as store, store.transaction() as session:
        row = queries.latest_cross_predictor(session, with_model=False)
    assert row is not None and "linear" in row.families and "linear (float16)" in row.families
    out = run_cli(capsys, "estimate", "half-net", "--device-kind", TARGET, "--json", "--db", db_url)
    assert out.code == 0, out.err
    est = json.loads(out.out)
    assert est["predictor"]["method"] == "across devices" and est["coverage_predicted"] > 0.9
    target16 = {TARGET: gpu_facts(TARGET, "float16")}
    law = float(roofline_s(config_frame(configs).assign(kind=TARGET), target16).sum())  # type: ignore[arg-type]
    assert abs(est["total_time_s"] / (law * EFFICIENCY[TARGET]) - 1) < 0.3  # the float16 law
    # the evaluation: float32's tables, then float16's block, each fold with its chosen view
    out = run_cli(capsys, "predict", "across", "evaluate", "--db", db_url)
    assert out.code == 0, out.err
    assert "Leave one GPU out:" in out.out and "Leave one GPU out (float16)" in out.out
    assert out.out.count("chosen view") == 3  # held-out GPUs, leave one out, float16
