"""Vidur's fp16 profiles: each operator becomes the harvester's configuration; `opdb import`."""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd
import pytest
import torch
from sqlalchemy import select
from torch import nn

from operator_db.datasets.importer import import_data_set
from operator_db.datasets.vidur.ops import TRAITS, Block, Traits, config
from operator_db.datasets.vidur.reader import Vidur, in_vidur, vidur
from operator_db.db.models import DeviceKind, Measurement
from operator_db.db.store import Store
from operator_db.errors import InvalidInputError
from operator_db.harvest import harvest
from operator_db.ops.cost import op_cost
from operator_db.specs import TensorSpec, operator_key
from tests.datasets.test_neusight_keys import Call

F16 = torch.float16
LLAMA = Block(heads=8, kv_heads=2, hidden=64, ffn=96, vocab=320, gated=True, tokens=5, tp=2)
PHI = Block(
    heads=4, kv_heads=4, hidden=32, ffn=128, vocab=100, gated=False, tokens=3, tp=1,
    traits=TRAITS["phi-2"],
)  # fmt: skip


def _vidur_call(op: str, b: Block) -> tuple[nn.Module, list[TensorSpec]]:
    """Return a module making Vidur's call for ``op`` in block ``b`` at fp16, and its inputs."""
    t, h, tp, hd = b.tokens, b.hidden, b.tp, b.head_dim
    x = [TensorSpec(shape=[1, t, h], dtype="float16")]
    bias = b.traits.bias

    def module(child: nn.Module, width: int = h) -> tuple[nn.Module, list[TensorSpec]]:
        spec = TensorSpec(shape=[1, t, width], dtype="float16")
        return Call(lambda s, x: s.child(x), child=child.to(F16)), [spec]

    if op == "emb":
        ids = TensorSpec(shape=[1, t], dtype="int64", value_range=(0, b.vocab // tp))
        return Call(lambda s, i: s.child(i), child=nn.Embedding(b.vocab // tp, h).to(F16)), [ids]
    if op == "input_layernorm":
        return module(nn.LayerNorm(h) if b.traits.layer_norm else nn.RMSNorm(h, eps=1e-6))
    if op == "attn_pre_proj":
        qkv = (b.heads + 2 * b.kv_heads) * hd // tp
        return module(nn.Linear(h, qkv, bias=bias or b.traits.qkv_bias))
    if op == "attn_post_proj":
        return module(nn.Linear(b.heads * hd // tp, h, bias=bias), b.heads * hd // tp)
    if op == "mlp_up_proj":
        return module(nn.Linear(h, b.ffn * (2 if b.gated else 1) // tp, bias=bias))
    if op == "mlp_down_proj":
        return module(nn.Linear(b.ffn // tp, h, bias=bias), b.ffn // tp)
    if op == "mlp_act":
        return module(nn.GELU(), b.ffn // tp)
    assert op == "add"
    return Call(lambda _, x, y: x + y), x * 2


CASES = [
    (op, block)
    for block in (LLAMA, PHI)
    for op in (
        "emb", "input_layernorm", "attn_pre_proj", "attn_post_proj", "mlp_up_proj",
        "mlp_down_proj", "add",
    )
] + [("mlp_act", PHI)]  # fmt: skip


@pytest.mark.parametrize(("op", "block"), CASES, ids=[f"{o}-{b.traits.bias}" for o, b in CASES])
def test_an_operator_is_the_harvesters_configuration_with_op_costs_cost(
    op: str, block: Block
) -> None:
    module, inputs = _vidur_call(op, block)
    (harvested,) = harvest(module, inputs if len(inputs) > 1 else inputs[0]).spec.operators
    ours = config(op, block)
    assert not isinstance(ours, str)
    assert operator_key(ours, "inference") == operator_key(harvested, "inference")
    cost = op_cost(ours)
    assert (ours.flops, ours.flop_rule, ours.bytes, ours.params, ours.outputs) == (
        cost.flops,
        cost.flop_rule,
        cost.bytes,
        cost.params,
        cost.outputs,
    )


def test_fused_kernels_and_bad_splits_say_why() -> None:
    assert "rotary" in str(config("attn_rope", LLAMA))
    assert "SiLU" in str(config("mlp_act", LLAMA))  # gated: the fused kernel
    assert "unknown operator" in str(config("attn", LLAMA))
    odd = Block(heads=8, kv_heads=2, hidden=64, ffn=96, vocab=320, gated=True, tokens=5, tp=5)
    with pytest.raises(ValueError, match="does not split over 5"):
        config("mlp_down_proj", odd)


def _write(root: Path, gpu: str, model: str, rows: list[dict[str, object]]) -> None:
    folder = root / "compute" / gpu / model
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / "mlp.csv.gz", "wt") as handle:
        pd.DataFrame(rows).to_csv(handle, index=False)


def _row(tokens: int, tp: int, ms: float, gated: bool = True) -> dict[str, object]:
    shape = {
        "n_head": 8, "n_kv_head": 2, "n_embd": 64, "n_expanded_embd": 96, "vocab_size": 320,
        "use_gated_mlp": gated, "num_tokens": tokens, "num_tensor_parallel_workers": tp,
    }  # fmt: skip
    ops = ["emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj"]
    ops += ["mlp_up_proj", "mlp_act", "mlp_down_proj", "add"]
    stats = {f"time_stats.{op}.{s}": ms for op in ops for s in ("min", "max", "median", "mean")}
    return {**stats, **shape}


@pytest.fixture
def data_set(tmp_path: Path) -> Path:
    (tmp_path / "README.md").write_text("Vidur, commit " + "a" * 40)
    rows = [_row(1, 1, 0.01), _row(8, 2, 0.02), _row(8, 2, 0.021)]  # a repeated measurement
    _write(tmp_path, "a100", "meta-llama/Tiny-llama", rows)
    _write(tmp_path, "a40", "meta-llama/Tiny-llama", [_row(1, 1, 0.03)])
    return tmp_path


def test_the_import_stores_each_call_once_as_fp16_results_and_a_second_adds_nothing(
    data_set: Path, store: Store
) -> None:
    assert in_vidur(data_set / "compute" / "a40") and not in_vidur(data_set.parent)
    data, files = vidur(data_set)
    assert files == [
        "compute/a100/meta-llama/Tiny-llama/mlp.csv.gz",
        "compute/a40/meta-llama/Tiny-llama/mlp.csv.gz",
    ]
    with store.transaction() as session:
        report = import_data_set(session, data, files=files)
    total = report.total()
    assert (total.read, total.imported, total.skipped) == (4 * 7, 4 * 7, 0)  # 7 ops a row
    assert report.new_configs == 2 * 7  # two shapes: (1 token, TP 1), (8 tokens, TP 2)
    assert {why.split(":")[0]: n for why, n in data.left_out.items()} == {
        "attn_rope": 4,  # vLLM's fused kernels: no one PyTorch call
        "mlp_act": 4,
    }
    assert report.kinds == ["NVIDIA A100-SXM4-80GB", "NVIDIA A40"]
    with store.transaction(read_only=True) as session:
        results = session.scalars(select(Measurement)).all()
        a40 = session.scalars(select(DeviceKind).where(DeviceKind.name == "NVIDIA A40")).one()
        assert a40.memory_bytes == 48 * 2**30  # from the spec sheet
    assert {r.dtype for r in results} == {"float16"}
    assert sorted({r.time_median_s for r in results}) == pytest.approx([1e-5, 2e-5, 2.1e-5, 3e-5])
    first = next(r for r in results if r.provenance["op"] == "emb")
    assert first.provenance["ms"]["min"] > 0 and first.provenance["model"].endswith("Tiny-llama")
    with store.transaction() as session:
        again = import_data_set(session, Vidur(data_set)).total()
    assert (again.imported, again.duplicate) == (0, 4 * 7)


def test_bad_rows_and_folders_are_named(data_set: Path, store: Store) -> None:
    bad = _row(0, 1, 0.01)
    _write(data_set, "a100", "org/bad", [bad, _row(4, 5, 0.01), _row(2, 1, -1.0)])
    _write(data_set, "z9", "org/model", [_row(1, 1, 0.01)])
    data = Vidur(data_set)
    with store.transaction() as session:
        files = ["compute/a100/org/bad/mlp.csv.gz", "compute/z9/org/model/mlp.csv.gz"]
        report = import_data_set(session, data, files=files)
    reasons = [str(b) for b in report.bad]
    assert any(":2: a shape column is not a positive integer" in r for r in reasons)
    assert any(":3: attn_pre_proj: QKV width 96 does not split over 5" in r for r in reasons)
    assert any(":4: emb: median '-1.0' is not a positive ms" in r for r in reasons)
    assert any("unknown GPU folder 'z9'" in r for r in reasons)
    with pytest.raises(InvalidInputError, match="not in a Vidur data set"):
        vidur(data_set.parent)
    assert Traits() == TRAITS.get("Tiny-llama", Traits())
