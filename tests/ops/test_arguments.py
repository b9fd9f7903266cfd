"""Constructor arguments of module operators: names, types and bounds from the signature, and the
size of what the module would allocate, found on the meta device."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import JsonValue

from operator_db.ops.arguments import MAX_LAYERS, ArgumentError, check_module_args, fits
from operator_db.ops.resolve import UnknownOperatorError

LIMIT = 2**33


def problem(op: str, args: dict[str, JsonValue], limit: int = LIMIT) -> str:
    with pytest.raises(ArgumentError) as info:
        check_module_args(op, args, max_numel=limit)
    return str(info.value)


@pytest.mark.parametrize(
    ("op", "args"),
    [
        ("torch.nn.Linear", {"in_features": 784, "out_features": 256, "bias": True}),
        ("torch.nn.Conv2d", {"in_channels": 3, "out_channels": 64, "kernel_size": [7, 7]}),
        (
            "torch.nn.Conv2d",
            {"in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": "same"},
        ),
        ("torch.nn.Conv1d", {"in_channels": 4, "out_channels": 4, "kernel_size": 3, "groups": 4}),
        ("torch.nn.ConvTranspose2d", {"in_channels": 4, "out_channels": 2, "kernel_size": [2, 2]}),
        ("torch.nn.Embedding", {"num_embeddings": 30522, "embedding_dim": 768, "padding_idx": 0}),
        ("torch.nn.Embedding", {"num_embeddings": 10, "embedding_dim": 4, "max_norm": None}),
        ("torch.nn.LayerNorm", {"normalized_shape": [768], "eps": 1e-12}),
        ("torch.nn.BatchNorm2d", {"num_features": 64, "momentum": None, "eps": 1e-5}),
        ("torch.nn.GroupNorm", {"num_groups": 8, "num_channels": 64}),
        ("torch.nn.MultiheadAttention", {"embed_dim": 64, "num_heads": 4, "batch_first": True}),
        ("torch.nn.LSTM", {"input_size": 8, "hidden_size": 16, "num_layers": 2}),
        ("torch.nn.GRU", {"input_size": 8, "hidden_size": 16}),
        ("torch.nn.RNN", {"input_size": 8, "hidden_size": 16, "nonlinearity": "relu"}),
        ("torch.nn.AdaptiveAvgPool2d", {"output_size": [None, 7]}),
        ("torch.nn.MaxPool2d", {"kernel_size": 3, "stride": 2, "padding": 1}),
        ("torch.nn.Hardtanh", {"min_val": {"float": "-inf"}, "max_val": 1}),
        ("torch.nn.Dropout", {"p": 0, "inplace": False}),
        ("torch.nn.GELU", {"approximate": "tanh"}),
        ("torch.nn.Softmax", {"dim": -1}),
        ("torch.nn.ReLU", {}),
        ("torch.nn.LazyLinear", {"out_features": 4}),
        ("torch.nn.LazyBatchNorm1d", {"eps": 1e-3}),
    ],
)
def test_valid_arguments_pass(op: str, args: dict[str, JsonValue]) -> None:
    check_module_args(op, args, max_numel=LIMIT)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"in_features": "abc", "out_features": 4}, 'in_features: must be int, got "abc"'),
        ({"in_features": True, "out_features": 4}, "in_features: must be int, got true"),
        ({"in_features": 8.0, "out_features": 4}, "in_features: must be int, got 8.0"),
        ({"in_features": 8, "out_features": 4, "bias": 1}, "bias: must be bool, got 1"),
        ({"in_features": 8}, "missing constructor argument 'out_features'"),
        ({"in_features": 8, "out_features": 4, "colour": 1}, "colour: is not an argument"),
        ({"in_features": 8, "out_features": 4, "device": "cpu"}, "device: is set by the worker"),
        ({"in_features": 8, "out_features": 4, "dtype": {"dtype": "float64"}}, "dtype: is set by"),
        (
            {"in_features": 10**12, "out_features": 4},
            "in_features: integers must lie within ±2147483647, got 1000000000000",
        ),
        (
            {"in_features": 2**20, "out_features": 2**20},
            f"its parameters and buffers would hold {2**40 + 2**20} elements, over the limit of "
            f"{LIMIT} (OPDB_MAX_TENSOR_NUMEL)",
        ),
        (
            {"in_features": -8, "out_features": 4},
            "the constructor refuses these arguments: RuntimeError: Trying to create tensor with "
            "negative dimension -8: [4, -8]",
        ),
    ],
)
def test_linear_arguments_are_typed_and_bounded(args: dict[str, JsonValue], message: str) -> None:
    assert problem("torch.nn.Linear", args).startswith(message)


def test_private_arguments_are_refused() -> None:
    args: dict[str, JsonValue] = {"num_embeddings": 5, "embedding_dim": 5, "_weight": None}
    assert problem("torch.nn.Embedding", args) == "_weight: is not an argument of the constructor"


def test_tuples_and_declared_classes() -> None:
    conv = {"in_channels": 3, "out_channels": 8, "kernel_size": [3, "x"]}
    assert problem("torch.nn.Conv2d", conv) == (
        'kernel_size: must be Union[int, tuple[int, int]], got [3, "x"]'
    )
    assert problem("torch.nn.MultiheadAttention", {"embed_dim": 64, "num_heads": "4"}) == (
        'num_heads: must be int, got "4"'
    )
    assert problem("torch.nn.LSTM", {"input_size": 8}) == (
        "missing constructor argument 'hidden_size'"
    )
    assert problem("torch.nn.LSTM", {"input_size": 8, "hidden_size": 8, "colour": 1}) == (
        "colour: is not an argument of the constructor"
    )


def test_layer_counts_are_small() -> None:
    lstm = {"input_size": 8, "hidden_size": 8, "num_layers": MAX_LAYERS + 1}
    assert problem("torch.nn.LSTM", lstm) == "num_layers: integers must lie within ±128, got 129"
    assert problem("torch.nn.Transformer", {"num_encoder_layers": 10**5}).startswith(
        "num_encoder_layers: integers must lie within ±128"
    )


def test_the_limit_counts_every_parameter_and_buffer() -> None:
    args: dict[str, JsonValue] = {"num_features": 100}
    check_module_args("torch.nn.BatchNorm1d", args, max_numel=401)  # 2 × 100 + 2 × 100 + 1
    assert problem("torch.nn.BatchNorm1d", args, limit=400).startswith(
        "its parameters and buffers would hold 401 elements"
    )


def test_only_torch_nn_classes() -> None:
    with pytest.raises(UnknownOperatorError, match="module 'os.system' is not a torch.nn class"):
        check_module_args("os.system", {}, max_numel=LIMIT)


@pytest.mark.parametrize(
    ("value", "annotation", "expected"),
    [
        (3, int, True),
        (True, int, False),
        (3, float, True),
        ({"float": "nan"}, float, True),
        (None, int | None, True),
        ([1, 2], tuple[int, ...], True),
        ([1, "a"], tuple[int, int], False),
        (3, tuple[int, int], False),
        ("zeros", Any, True),
    ],
)
def test_fits(value: JsonValue, annotation: Any, expected: bool) -> None:
    assert fits(value, annotation) is expected
