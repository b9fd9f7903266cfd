from __future__ import annotations

import pytest
import torch

from operator_db.errors import HarvestError
from operator_db.harvest import ModelInputs, parse_batch_sizes, parse_input, with_batch
from operator_db.harvest.inputs import parse_dtype
from operator_db.specs import TensorSpec


def test_shape_only_is_a_float_positional_input() -> None:
    assert parse_input("1x3x224x224") == TensorSpec(shape=[1, 3, 224, 224], dtype="float32")


def test_name_dtype_and_range() -> None:
    spec = parse_input("input_ids=8x128:int64:0..30522")
    assert spec == TensorSpec(
        name="input_ids", shape=[8, 128], dtype="int64", value_range=(0, 30522)
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("1xax3", "'1xax3' is not a shape of integers"),
        ("1x0x3", "every dimension must be positive"),
        ("1x3:float33", "'float33' is neither a dtype"),
        ("9bad=1x3", "'9bad' is not an argument name"),
        ("1x3:int64:5..5", "low must be below high"),
    ],
)
def test_bad_inputs_are_one_line_errors(text: str, problem: str) -> None:
    with pytest.raises(HarvestError) as info:
        parse_input(text)
    message = str(info.value)
    assert problem in message
    assert "expected [NAME=]1x3x224x224[:DTYPE][:LOW..HIGH]" in message
    assert "\n" not in message


def test_batch_sizes() -> None:
    assert parse_batch_sizes("1,8,32") == [1, 8, 32]
    assert parse_batch_sizes("8, 8 ,1") == [8, 1]
    assert parse_batch_sizes(None) is None
    for bad in ("1,x", "0", "-2", ","):
        with pytest.raises(HarvestError, match="bad batch sizes"):
            parse_batch_sizes(bad)


def test_with_batch_replaces_the_first_dimension_of_every_input() -> None:
    inputs = [parse_input("1x3x8x8"), parse_input("mask=1x8:bool"), TensorSpec(shape=[])]
    assert [t.shape for t in with_batch(inputs, 4)] == [[4, 3, 8, 8], [4, 8], []]


def test_dtypes() -> None:
    assert parse_dtype("bfloat16") is torch.bfloat16
    assert parse_dtype(None) is None
    with pytest.raises(HarvestError, match="bad dtype 'int64'"):
        parse_dtype("int64")


def test_model_inputs_split_positional_and_keyword() -> None:
    specs = [parse_input("2x3"), parse_input("mask=2x3:bool")]
    inputs = ModelInputs.of(specs)
    assert inputs.args == [specs[0]] and inputs.kwargs == {"mask": specs[1]}
    args, kwargs = inputs.materialize(torch.device("cpu"), torch.float16)
    assert args[0].dtype == torch.float16 and kwargs["mask"].dtype == torch.bool
    meta_args, _ = inputs.materialize(torch.device("meta"), None)
    assert meta_args[0].device.type == "meta"
    described = inputs.specs(torch.float16)
    assert [(t.shape, t.dtype, t.name) for t in described] == [
        ([2, 3], "float16", None),
        ([2, 3], "bool", "mask"),
    ]


def test_model_inputs_refuse_strings() -> None:
    with pytest.raises(HarvestError, match="got str"):
        ModelInputs.of("1x3")
