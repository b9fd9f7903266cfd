"""Per-configuration bytes, layer-type shares and their sources, the run matrix, fwd:bwd of runs."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from sqlalchemy import select

from operator_db.db import queries
from operator_db.db.models import FullModelRun, Job, Model
from operator_db.db.queries import get_or_create_device_kind
from operator_db.db.store import Store
from operator_db.errors import NotFoundError
from operator_db.study import analysis
from operator_db.study.analysis import costs
from tests.helpers import result_row
from tests.study.study_data import CPU, FAILED, GPU, seed_study
from tests.study.test_analysis import row, seed

# --- bytes of one call (no database) ----------------------------------------------------------


def t(shape: list[int], dtype: str = "float32") -> dict[str, object]:
    return {"shape": shape, "dtype": dtype}


def test_bytes_of_a_call() -> None:
    # Linear(16→32) on 4×16: inputs 256 B, outputs 512 B, weight and bias 2176 B.
    ins, outs = [t([4, 16])], [t([4, 32])]
    nbytes = 4 * (64 + 16 * 32 + 32 + 128)
    assert costs.activation_bytes(outs, nbytes) == 512
    assert costs.state_bytes(ins, outs, nbytes) == 2176
    # gradient of the output read (512) + saved input read (256) + weights read (2176)
    # + gradient of the input written (256) + gradients of the weights written (2176)
    assert costs.backward_bytes(ins, outs, nbytes) == 512 + 2 * 256 + 2 * 2176
    # Integer token ids are read but get no gradient; a bfloat16 output is 2 bytes an element.
    ids, emb = [t([2, 8], "int64")], [t([2, 8, 4], "bfloat16")]
    assert costs.backward_bytes(ids, emb, 128 + 128 + 100) == 128 + 128 + 2 * 100
    # A view moves nothing and writes no activation.
    assert costs.activation_bytes(outs, 0) == 0 and costs.backward_bytes(ins, outs, 0) == 0
    assert costs.state_bytes(ins, outs, None) == 0


def test_op_type_names() -> None:
    assert analysis.op_type("torch.nn.Conv2d") == "Conv2d"
    assert analysis.op_type("torch.nn.functional.softmax") == "F.softmax"
    assert analysis.op_type("torch.add") == "torch.add"
    assert analysis.op_type("torch.Tensor.add_") == "Tensor.add_"


# --- the complexity table and the run matrix --------------------------------------------------

CPU_SEED = "cpu:Test CPU"


def test_complexity_table(store: Store) -> None:
    seed(store)
    with store.transaction(read_only=True) as session:
        table = analysis.complexity_table(session)
        with pytest.raises(NotFoundError, match="no model named 'nope'"):
            analysis.complexity_table(session, models=["mlp-b1", "nope"])
    assert list(table.columns) == analysis.COMPLEXITY_TABLE_COLUMNS
    assert list(table["model"]) == ["mlp-b1", "mlp-b4", "mlp-b8", "toy-train"]
    assert set(table["family_name"]) == {"mlp"}  # the training spec joins its base family
    b4 = row(table, model="mlp-b4")
    # Linear 4×16 → 4×32 (512 B written) and ReLU twice on 4×32 (512 B each).
    assert b4["activation_bytes"] == 3 * 512
    linear_bytes = 4 * (64 + 512 + 32 + 128)
    assert b4["bytes_forward"] == linear_bytes + 2 * 8 * 128 and b4["bytes_backward"] == 0
    assert b4["intensity"] == pytest.approx(4352 / b4["step_bytes"])
    train = row(table, model="toy-train")
    relu_bwd = 512 + 2 * 512  # gradient of the output read; input read, its gradient written
    linear_bwd = 512 + 2 * 256 + 2 * 2176
    assert train["bytes_backward"] == linear_bwd + 2 * relu_bwd
    assert train["step_bytes"] == train["bytes_forward"] + train["bytes_backward"]
    assert train["step_flops"] == 4352 + 8448


def test_the_harvests_own_parameter_count_wins(store: Store) -> None:
    # Σ over the configurations misses a traced custom leaf's weights (inputs of its calls).
    seed(store)
    with store.transaction(read_only=True) as session:
        summed = row(analysis.complexity_table(session), model="mlp-b4")["params"]
    with store.transaction() as session:
        model = queries.get_model(session, "mlp-b4")
        model.provenance = {**model.provenance, "params": 123_456}
    with store.transaction(read_only=True) as session:
        table = analysis.complexity_table(session)
    assert row(table, model="mlp-b4")["params"] == 123_456 != summed
    assert row(table, model="mlp-b1")["params"] == summed  # older specs: the sum, as before


def test_run_matrix(store: Store) -> None:
    seed(store)
    with store.transaction() as session:
        ids = {name: id_ for name, id_ in session.execute(select(Model.name, Model.id))}
        gpu = get_or_create_device_kind(session, "NVIDIA Test GPU")
        fake = get_or_create_device_kind(session, "fake:Matrix", "fake")
        # mlp-b8 on the GPU: a failed job, then a newer queued one (the newest counts);
        # toy-train on the GPU: failed; mlp-b1 on the fake kind: cancelled.
        session.add_all(
            [
                Job(target="model", model_id=ids["mlp-b8"], device_kind_id=gpu.id,
                    status="failed", last_error="old"),
                Job(target="model", model_id=ids["toy-train"], device_kind_id=gpu.id,
                    status="failed", last_error="out of memory"),
                Job(target="model", model_id=ids["mlp-b1"], device_kind_id=fake.id,
                    status="cancelled"),
            ]
        )  # fmt: skip
        session.flush()
        session.add(
            Job(target="model", model_id=ids["mlp-b8"], device_kind_id=gpu.id, status="queued")
        )
    with store.transaction(read_only=True) as session:
        runs = analysis.run_matrix(session)
        only = analysis.run_matrix(session, models=["toy-train"], device_kinds=[CPU_SEED])
    assert list(runs.columns) == analysis.RUN_COLUMNS
    assert len(runs) == 4 * 3  # every model on every kind
    status = {(r.model, r.device_kind): r.status for r in runs.itertuples()}
    assert status[("mlp-b1", CPU_SEED)] == "measured"
    assert status[("mlp-b8", "NVIDIA Test GPU")] == "queued"
    assert status[("toy-train", "NVIDIA Test GPU")] == "failed"
    assert status[("mlp-b1", "fake:Matrix")] == "cancelled"
    assert status[("mlp-b4", "fake:Matrix")] == "not measured"
    failed = row(runs, model="toy-train", device_kind="NVIDIA Test GPU")
    assert failed["error"] == "out of memory" and math.isnan(failed["latency_s"])
    assert row(runs, model="mlp-b4", device_kind=CPU_SEED)["latency_s"] == pytest.approx(2e-3)
    assert set(runs["family_name"]) == {"mlp"}
    assert list(only["model"]) == ["toy-train"] and list(only["status"]) == ["measured"]


def test_forward_backward_of_runs(store: Store) -> None:
    seed(store)
    with store.transaction() as session:
        ids = {name: id_ for name, id_ in session.execute(select(Model.name, Model.id))}
        gpu = get_or_create_device_kind(session, "NVIDIA Test GPU")
        session.add(
            FullModelRun(model_id=ids["toy-train"], device_kind_id=gpu.id,
                         **result_row(time_median_s=1e-3))
        )  # fmt: skip
    with store.transaction(read_only=True) as session:
        table = analysis.model_table(session)
    fb = analysis.run_forward_backward(table)
    assert list(fb.pairs.columns) == analysis.RUN_FB_COLUMNS
    # toy-train (batch 4, base family mlp) pairs with mlp-b4 on each kind.
    cpu = row(fb.pairs, device_kind=CPU_SEED)
    assert (cpu["training_model"], cpu["inference_model"]) == ("toy-train", "mlp-b4")
    assert cpu["time_backward_s"] == pytest.approx(5e-3 - 2e-3)
    assert cpu["time_ratio"] == pytest.approx(3e-3 / 2e-3)
    assert cpu["flops_ratio"] == pytest.approx(8448 / 4352)
    assert row(fb.pairs, device_kind="NVIDIA Test GPU")["time_ratio"] == pytest.approx(
        (1e-3 - 2.5e-4) / 2.5e-4
    )
    assert fb.notes == []
    # Without the twin's runs the training run is named in a note, and nothing is paired.
    alone = analysis.run_forward_backward(table[table["model"] != "mlp-b4"])
    assert alone.pairs.empty
    assert alone.notes[0].startswith("training runs without a measured inference twin")
    assert f"toy-train on {CPU_SEED}" in alone.notes[0]
    none = analysis.run_forward_backward(table[table["mode"] == "inference"])
    assert none.pairs.empty and "no training spec has a full-model run" in none.notes[0]


# --- layer shares -----------------------------------------------------------------------------


def test_layer_shares_sum_to_one_and_name_their_source(store: Store) -> None:
    names = seed_study(store, families=4)
    with store.transaction(read_only=True) as session:
        on_gpu = analysis.layer_study(session, device_kinds=[GPU], models=names)
        on_cpu = analysis.layer_study(session, device_kinds=[CPU], models=names)
        one = analysis.layer_study(session, device_kinds=[GPU], models=["cnn0-b8"])
    shares = on_gpu.shares
    assert list(shares.columns) == analysis.SHARE_COLUMNS
    assert on_gpu.device_kind == GPU  # the kind with per-operator times
    assert sorted(shares["family_name"].unique()) == ["cnn0", "cnn1", "tf0", "tf1"]
    # Every pie: six per family, each summing to 100 %.
    sums = shares.groupby(["family_name", "pass", "quantity"])["share"].sum()
    assert len(sums) == 4 * 6
    assert sums.to_numpy() == pytest.approx([1.0] * len(sums))
    assert (shares["share"] > 0).all()
    # The batch is the largest with a training spec; forward from inference, backward training.
    cnn0 = shares[shares["family_name"] == "cnn0"]
    assert set(cnn0["batch_size"]) == {32}
    assert set(cnn0.loc[cnn0["pass"] == "forward", "model"]) == {"cnn0-b32"}
    assert set(cnn0.loc[cnn0["pass"] == "backward", "model"]) == {"cnn0-train-b32"}

    def source(frame: pd.DataFrame, family: str, pass_: str, quantity: str) -> str:
        pie = frame[
            (frame["family_name"] == family)
            & (frame["pass"] == pass_)
            & (frame["quantity"] == quantity)
        ]
        assert pie["source"].nunique() == 1
        return str(pie["source"].iloc[0])

    # Family index 0 (cnn0, tf0) has per-operator times on the GPU: measured.
    assert source(shares, "cnn0", "forward", "latency") == f"measured on {GPU}"
    assert source(shares, "tf0", "backward", "latency") == f"measured on {GPU}"
    # cnn1 has none: the roofline bound at the H100's spec peaks (from the shipped table).
    assert source(shares, "cnn1", "forward", "latency") == f"roofline bound on {GPU}"
    assert any(
        n.startswith("cnn1 forward latency: per-operator times cover 0%") for n in on_gpu.notes
    )
    assert source(shares, "cnn1", "forward", "flops") == "spec FLOPs"
    assert source(shares, "cnn1", "backward", "memory") == "estimated from shapes"
    # No per-operator times and no peaks on the CPU kind: the latency pie is the FLOPs pie.
    cpu = on_cpu.shares
    assert source(cpu, "cnn0", "forward", "latency") == "FLOPs share"
    flops = cpu[(cpu["family_name"] == "cnn0") & (cpu["quantity"] == "flops")]
    latency = cpu[(cpu["family_name"] == "cnn0") & (cpu["quantity"] == "latency")]
    assert list(latency["share"]) == pytest.approx(list(flops["share"]))
    # Measured forward latency of cnn0: count × per-call over its configurations, per type.
    measured = shares[
        (shares["family_name"] == "cnn0")
        & (shares["pass"] == "forward")
        & (shares["quantity"] == "latency")
    ]
    with store.transaction(read_only=True) as session:
        costs_frame = analysis.layer_costs(
            session,
            queries.list_models(session, names=["cnn0-b32"]),
            get_or_create_device_kind(session, GPU),
        )
    by_type = costs_frame.groupby(costs_frame["op"].map(analysis.op_type))["time_forward_s"].sum()
    expected = by_type / by_type.sum()
    got = dict(zip(measured["op_type"], measured["share"], strict=True))
    kept = set(got) - {"other"}
    assert len(kept) >= 4
    for op in kept:
        assert got[op] == pytest.approx(expected[op])
    assert got.get("other", 0.0) == pytest.approx(expected[~expected.index.isin(kept)].sum())
    # An inference model alone: forward pies only, and a note that it has no backward.
    assert set(one.shares["pass"]) == {"forward"}
    assert "cnn0: no training spec, no backward pies" in one.notes


def test_small_types_merge_into_other() -> None:
    pies = {
        ("forward", "flops"): analysis.layers.Pie({"a": 97.0, "b": 1.0, "c": 2.0}, "spec FLOPs"),
        ("forward", "memory"): analysis.layers.Pie({"a": 50.0, "b": 49.0, "c": 1.0}, "x"),
    }
    # b reaches 2 % in the memory pie, c in the FLOPs pie: both kept; d never does.
    assert analysis.layers.merge_small(pies) == {"a", "b", "c"}
    pies[("forward", "flops")].values["d"] = 0.5
    assert "d" not in analysis.layers.merge_small(pies)


def test_layer_study_of_nothing(store: Store) -> None:
    with store.transaction(read_only=True) as session:
        empty = analysis.layer_study(session)
    assert empty.shares.empty and empty.notes == ["no model in the study: no layer shares"]


def test_failed_job_in_the_study(store: Store) -> None:
    names = seed_study(store, families=2)
    with store.transaction(read_only=True) as session:
        runs = analysis.run_matrix(session, models=names)
    failed = runs[runs["status"] == "failed"]
    assert list(failed["model"]) == ["tf0-b32"] and list(failed["error"]) == [FAILED]
    assert (runs.loc[runs["device_kind"] == GPU, "status"] == "measured").all()
