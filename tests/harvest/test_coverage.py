"""Σ count × FLOPs of a harvested spec against FlopCounterMode on the whole model (meta device)."""

from __future__ import annotations

import pytest
import torch

from operator_db.harvest import harvest, load_model, parse_reference
from operator_db.specs import TensorSpec
from tests.harvest.test_harvest import (
    assert_no_double_counting,
    assert_round_trip,
    meta_flop_counter,
)

CASES = [
    # reference, model inputs on meta, configurations, calls
    ("transformers:ResNetModel", [TensorSpec(shape=[2, 3, 224, 224])], 57, 201),
    (
        "transformers:BertModel",
        [TensorSpec(name="input_ids", shape=[2, 128], dtype="int64")],
        26,
        314,
    ),
]


@pytest.mark.parametrize(
    ("reference", "inputs", "configs", "calls"), CASES, ids=["resnet50", "bert-base"]
)
def test_spec_flops_equal_flop_counter_mode_on_the_whole_model(
    reference: str, inputs: list[TensorSpec], configs: int, calls: int
) -> None:
    model = load_model(parse_reference(reference))
    result = harvest(model, inputs, reference=reference)
    assert (result.device, result.opaque, result.warnings) == ("meta", [], [])
    assert (result.configurations, result.calls) == (configs, calls)
    args = {
        t.name or "x": torch.empty(t.shape, dtype=getattr(torch, t.dtype), device="meta")
        for t in inputs
    }
    expected = meta_flop_counter(model, *args.values())
    assert expected > 0
    assert result.counter_flops == pytest.approx(expected, rel=0.01)
    assert result.counter_flops == expected  # in fact exact: the same counter, op by op
    assert_no_double_counting(result.spec)
    # Every leaf module ran is in the spec once per call: none is missing, none counted twice.
    leaves = {name for name, m in model.named_modules() if next(m.children(), None) is None}
    recorded = [loc for op in result.spec.operators if op.form == "module" for loc in op.locations]
    assert len(recorded) == len(set(recorded))
    assert set(recorded) <= leaves
    assert_round_trip(result.spec)
