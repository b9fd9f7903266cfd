"""The harvested specs shipped in measurement_specs/: valid, reproducible, and runnable."""

from __future__ import annotations

from pathlib import Path

import pytest

from operator_db.harvest import harvest
from operator_db.specs import Spec, load_spec
from tests.harvest.test_harvest import assert_round_trip
from tests.helpers import EXAMPLE_SPECS

SHIPPED = {
    "resnet50-b1": ("transformers:ResNetModel", 1),
    "resnet50-b8": ("transformers:ResNetModel", 8),
    "mobilenetv2-b1": ("transformers:MobileNetV2Model", 1),
    "mobilenetv2-b8": ("transformers:MobileNetV2Model", 8),
    "bert-base-b1": ("transformers:BertModel", 1),
    "bert-base-b8": ("transformers:BertModel", 8),
    "gpt2-b1": ("transformers:GPT2Model", 1),  # custom leaves (Conv1D), traced
    "ftransformer-b1": ("module:operator_db.examples:functional_transformer", 1),
    "ftransformer-b8": ("module:operator_db.examples:functional_transformer", 8),
}


def _load(name: str) -> Spec:
    return load_spec(EXAMPLE_SPECS / f"{name}.yaml", max_bytes=10**7).spec


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_spec_describes_its_model(name: str) -> None:
    spec = _load(name)
    reference, batch = SHIPPED[name]
    assert (spec.model.name, spec.model.reference, spec.model.batch_size) == (
        name,
        reference,
        batch,
    )
    assert spec.model.mode == "inference" and spec.model.dtype == "float32"
    assert spec.provenance["device"] == "meta" and "opaque" not in spec.provenance
    assert all(
        op.key is not None and op.flops is not None and op.bytes is not None
        for op in spec.operators
    )
    vocabulary = {"transformers:BertModel": 30522, "transformers:GPT2Model": 50257}
    if reference in vocabulary:
        assert [t.model_dump(exclude_none=True) for t in spec.model.inputs] == [
            {
                "name": "input_ids",
                "shape": [batch, 128],
                "dtype": "int64",
                "value_range": (0, vocabulary[reference]),
            }
        ]
    elif reference.startswith("module:"):
        assert [(t.name, t.shape) for t in spec.model.inputs] == [(None, [batch, 128, 256])]
    else:
        assert [(t.name, t.shape) for t in spec.model.inputs] == [
            ("pixel_values", [batch, 3, 224, 224])
        ]


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_spec_is_what_the_harvester_produces_today(name: str) -> None:
    shipped = _load(name)
    reference, _ = SHIPPED[name]
    fresh = harvest(
        reference, list(shipped.model.inputs), name=name, description=shipped.model.description
    ).spec
    assert fresh.model == shipped.model
    assert [op.model_copy(update={"key": None}) for op in shipped.operators] == fresh.operators


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_configuration_rebuilds_and_runs_on_the_cpu(name: str) -> None:
    assert_round_trip(_load(name))


def test_the_hand_written_examples_are_left_alone() -> None:
    assert {p.name for p in Path(EXAMPLE_SPECS).glob("mlp-*.yaml")} == {
        "mlp-small-b8.yaml",
        "mlp-deep-b8.yaml",
    }
