"""NeuSight's whole-model labels as runs, their traces as results (fixtures/neusight/label)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from sqlalchemy import func, select
from torch import nn

from operator_db.datasets.neusight.compose import composition_table, composition_text
from operator_db.datasets.neusight.labels import parse_label, spec_name
from operator_db.datasets.neusight.reader import NeuSight
from operator_db.datasets.neusight.runs import import_runs, shipped_specs_dir
from operator_db.datasets.neusight.trace import match_nodes, read_trace
from operator_db.db.models import DataSource, DeviceKind, FullModelRun, Measurement, Model
from operator_db.db.models import OperatorConfig as Config
from operator_db.db.store import Store
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.harvest import harvest
from operator_db.specs import TensorSpec, load_spec, operator_key

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "neusight"
RUN = "label/Tesla_T4/bert_large-inf-512-8.json.gz"
TRACE = "label/Tesla_T4/bert_large-inf-512-8.csv.gz"
SPEC = "neusight-bert-large-inf-512-8"
MAPPED = 35
"""Nodes of the excerpt's trace that are configurations of the spec."""


def _rows(store: Store) -> tuple[int, int]:
    with store.transaction(read_only=True) as session:
        runs = session.scalar(select(func.count()).select_from(FullModelRun))
        results = session.scalar(select(func.count()).select_from(Measurement))
    return int(runs or 0), int(results or 0)


def test_a_run_is_imported_once_and_a_second_import_adds_nothing(store: Store) -> None:
    data = NeuSight(FIXTURE)
    with store.transaction() as session:
        report = import_runs(session, data)
    assert [(r.label, r.model) for r in report.runs] == [(RUN, SPEC)]
    by_file = {c.file: (c.read, c.imported, c.duplicate, c.skipped) for c in report.files}
    assert by_file[RUN] == (1, 1, 0, 0)
    assert by_file[TRACE] == (79, MAPPED, 0, 0)
    assert [r.status for r in report.specs] == ["new"] and not report.bad
    assert _rows(store) == (1, MAPPED)
    with store.transaction(read_only=True) as session:
        run = session.scalars(select(FullModelRun)).one()
        model = session.get(Model, run.model_id)
        kind = session.get(DeviceKind, run.device_kind_id)
        source = session.get(DataSource, run.source_id)
        assert model is not None and kind is not None and source is not None
        assert (model.name, kind.name, source.name) == (SPEC, "Tesla T4", "neusight")
    assert run.time_median_s == pytest.approx(694.4645385742188e-3)
    assert (run.timing, run.cache_mode, run.energy_per_call_j) == ("eager", "warm", None)
    assert run.energy_unavailable == "not in the data set" and run.host_id is None
    assert run.provenance["file"] == RUN and run.provenance["num_layer"] == 24
    assert run.provenance["fw_ms"] == pytest.approx(694.4645385742188)
    assert run.provenance["trace"]["mapped"] == MAPPED
    trace = report.runs[0].trace
    assert trace is not None and trace.coverage == pytest.approx(0.9588, abs=1e-3)
    assert "call_function <built-in function add>" in trace.unmapped_forms  # the mask add

    with store.transaction() as session:
        again = import_runs(session, data)
    by_file = {c.file: (c.read, c.imported, c.duplicate, c.skipped) for c in again.files}
    assert by_file[RUN] == (1, 0, 1, 0) and by_file[TRACE] == (79, 0, MAPPED, 0)
    assert [r.status for r in again.specs] == ["unchanged"]
    assert _rows(store) == (1, MAPPED)


def test_a_node_result_says_where_it_comes_from(store: Store) -> None:
    with store.transaction() as session:
        import_runs(session, NeuSight(FIXTURE))
        rows = session.scalars(select(Measurement)).all()
    by_node = {r.provenance["node"]: r for r in rows}
    dense = by_node["bert_encoder_layer_0_intermediate_dense"]
    assert dense.provenance["file"] == TRACE and dense.provenance["match"] == "same call"
    assert dense.provenance["line"] == 69 and dense.provenance["bw_ms"] == 0
    assert dense.time_median_s == pytest.approx(dense.provenance["fw_ms"] / 1000)
    assert by_node["truediv"].provenance["match"] == "div-by-constant"
    assert by_node["bert_encoder_layer_0_attention_self_dropout"].provenance["match"] == "dropout"


class Call(nn.Module):
    """A module whose forward is one call, with the modules it uses as children."""

    def __init__(self, fn: Callable[..., Any], **children: nn.Module) -> None:
        super().__init__()
        self.fn = fn
        for name, child in children.items():
            self.add_module(name, child)

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(self, *xs)  # type: ignore[no-any-return]


def _t(*shape: int) -> TensorSpec:
    return TensorSpec(shape=list(shape))


def _key(module: nn.Module, *inputs: TensorSpec) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = harvest(module, list(inputs)).spec
    [op] = [op for op in spec.operators if op.flops]
    return operator_key(op, "inference")


CALLS: dict[str, tuple[nn.Module, list[TensorSpec]]] = {
    # node name in the trace → a module making the same call, as the spec's model makes it
    "bert_encoder_layer_0_intermediate_dense": (
        Call(lambda s, x: s.m(x), m=nn.Linear(1024, 4096)),
        [_t(8, 512, 1024)],
    ),
    "bert_encoder_layer_0_output_layer_norm": (
        Call(lambda s, x: s.m(x), m=nn.LayerNorm(1024, eps=1e-12)),
        [_t(8, 512, 1024)],
    ),
    "add_9": (Call(lambda _, x, y: x + y), [_t(8, 512, 1024), _t(8, 512, 1024)]),
    "softmax": (
        Call(lambda _, x: nn.functional.softmax(x, dim=-1)),
        [_t(8, 16, 512, 512)],
    ),
    "gelu": (Call(lambda _, x: nn.functional.gelu(x)), [_t(8, 512, 4096)]),
    # transformers 5 scales the scores by x * 0.125 where the traced 4.x divided by 8.0
    "truediv": (Call(lambda _, x: x * 0.125), [_t(8, 16, 512, 512)]),
}


@pytest.mark.parametrize("node", sorted(CALLS))
def test_a_node_maps_to_the_configuration_the_harvester_gives(store: Store, node: str) -> None:
    with store.transaction() as session:
        import_runs(session, NeuSight(FIXTURE))
        rows = session.execute(
            select(Measurement.provenance, Config.key).join(
                Config, Config.id == Measurement.config_id
            )
        ).all()
    keys = {provenance["node"]: key for provenance, key in rows}
    module, inputs = CALLS[node]
    assert keys[node] == _key(module, *inputs)


def test_a_scalar_on_the_left_maps_to_the_method_the_harvester_records() -> None:
    """``0.5 * x`` in fx is operator.mul(0.5, x); the harvester records x.mul(0.5)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = harvest(Call(lambda _, x: 0.5 * x), [_t(4, 64, 80)]).spec
    cells = {"_kwargs": "{}", "meta": "{}", "contiguous": "True", "latency": "0.1"}
    frame = pd.DataFrame(
        [
            {
                **cells,
                "op": "placeholder",
                "target": "x",
                "_args": "()",
                "output_shape": "(4, 64, 80)",
                "dtype": "torch.float32",
                "Name": "x",
            },
            {
                **cells,
                "op": "call_function",
                "target": "<built-in function mul>",
                "_args": "(0.5, x)",
                "output_shape": "(4, 64, 80)",
                "dtype": "torch.float32",
                "Name": "mul",
            },
        ]
    ).assign(fw_latency="0.1", bw_latency="0", acc_latency="0")
    nodes = read_trace(frame)
    assert not isinstance(nodes, str)
    keys = [operator_key(op, "inference") for op in spec.operators]
    found = match_nodes(nodes, spec.operators, keys, "inference")
    assert [(m.node.name, m.key, m.how) for m in found.matches] == [("mul", keys[0], "same call")]


def test_labels_without_a_spec_are_skipped_and_said(store: Store, tmp_path: Path) -> None:
    with store.transaction() as session:
        report = import_runs(session, NeuSight(FIXTURE), specs_dir=tmp_path)
    reasons = {b.file: b.reason for b in report.left_out}
    assert reasons[RUN] == f"no spec {SPEC}.yaml in {tmp_path}"
    assert "no config" in reasons["label/NVIDIA_L4/switch4-inf-512-1.json.gz"]
    assert "torch.compile" in reasons["label/NVIDIA_L4/bert_large-inf-512-8-fusion.json.gz"]
    assert report.total().skipped == 3 and report.total().imported == 0 and not report.bad
    assert not report.runs and _rows(store) == (0, 0)


def test_the_composition_check_sets_the_estimate_beside_the_run(store: Store) -> None:
    with store.transaction() as session:
        report = import_runs(session, NeuSight(FIXTURE))
    with store.transaction(read_only=True) as session:
        rows = composition_table(
            session,
            report.runs,
            lambda s, model, kind: estimate_model(
                s, model, kind, EstimateOptions(aggregate="median")
            ),
        )
    [row] = rows
    assert (row.device, row.model, row.mode, row.batch) == ("Tesla T4", SPEC, "inference", 8)
    assert row.measured_s == pytest.approx(0.6944645385742188)
    # Σ count × the mapped nodes' times: the traced layer's times 24 times over
    assert row.estimate_s == pytest.approx(0.7506, rel=1e-3)
    assert 0.7 < row.coverage < 0.8 and row.trace_coverage == pytest.approx(0.9588, abs=1e-3)
    assert "| Tesla T4 | bert-large-inf-512-8 | inference | 8 | 750.6 | 694.5 | +8.1 % |" in (
        composition_text(rows)
    )


def test_labels_name_their_run_and_spec() -> None:
    label = parse_label("label/NVIDIA_A100-PCIE-40GB/gpt3_27-train-2048-1.json.gz")
    assert label is not None and label.device == "NVIDIA A100-PCIE-40GB"
    assert (label.model, label.mode, label.seqlen, label.batch) == ("gpt3_27", "training", 2048, 1)
    assert label.trace == "label/NVIDIA_A100-PCIE-40GB/gpt3_27-train-2048-1.csv.gz"
    assert (
        label.spec_name
        == spec_name("gpt3_27", "training", 2048, 1)
        == ("neusight-gpt3-27-train-2048-1")
    )
    fused = parse_label("label/NVIDIA_L4/gpt2_large-inf-1024-4-fusion.json.gz")
    assert fused is not None and fused.skip_reason is not None
    assert parse_label("label/NVIDIA_L4/notes.json") is None


def test_the_shipped_specs_describe_the_labelled_runs() -> None:
    paths = sorted(shipped_specs_dir().glob("*.yaml"))
    assert len(paths) == 18
    for path in paths:
        spec = load_spec(path, max_bytes=16 * 1024 * 1024).spec
        assert spec.model.name == path.stem and spec.model.dtype == "float32"
        assert spec.model.overrides["attn_implementation"] == "eager"
        [tensor] = spec.model.inputs
        assert tensor.name == "input_ids" and tensor.value_range == (1, 2)  # ones
        labels = spec.provenance["neusight"]["labels"]  # type: ignore[index]
        for file in labels:  # type: ignore[union-attr]
            label = parse_label(str(file))
            assert label is not None and label.spec_name == spec.model.name
            assert tensor.shape == [label.batch, label.seqlen]


def test_estimates_and_the_report_name_imported_figures(store: Store) -> None:
    """An imported figure never passes for a measured one: the estimate counts its sources and
    notes them, and the report's estimates table says where figures and run come from."""
    from operator_db.estimate.compose import estimate_model
    from operator_db.report.estimates import estimate_table

    model, kind = "neusight-bert-large-inf-512-8", "Tesla T4"
    with store.transaction() as session:
        import_runs(session, NeuSight(FIXTURE))
        est = estimate_model(session, model, kind)
        table = estimate_table(session, [(model, kind)])
    assert set(est.sources) == {"neusight"} and est.full_run_source == "neusight"
    assert {r["source"] for r in est.config_rows} <= {"neusight", None}
    assert any(n.startswith("imported: ") and "neusight" in n for n in est.notes)
    assert any("full-model run was imported from the data set neusight" in n for n in est.notes)
    row = table.iloc[0]
    assert row["sources"] == f"neusight {est.sources['neusight']}"
    assert row["full_run_source"] == "neusight"
