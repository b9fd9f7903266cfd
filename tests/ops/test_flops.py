from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - the usual alias

from operator_db.ops import FlopTally, counted_by_flop_counter, op_cost
from operator_db.specs import OperatorSpec


def meta(*shape: int) -> torch.Tensor:
    return torch.empty(*shape, device="meta")


def tally(fn: Any) -> tuple[int, str, bool]:
    with torch.no_grad(), FlopTally() as t:
        fn()
    return t.result.flops, t.result.rule, t.result.moves_data


def test_matrix_products_are_flop_counter_mode_counts() -> None:
    assert tally(lambda: meta(8, 16) @ meta(16, 32)) == (2 * 8 * 16 * 32, "matmul", True)
    assert tally(lambda: F.conv2d(meta(1, 3, 8, 8), meta(4, 3, 3, 3))) == (
        2 * 4 * 6 * 6 * 3 * 3 * 3,
        "convolution",
        True,
    )


@pytest.mark.parametrize(
    ("fn", "flops", "rule"),
    [
        (lambda: F.gelu(meta(4, 8)), 32, "elementwise"),
        (lambda: meta(4, 8) + meta(8), 32, "elementwise"),
        (lambda: meta(4, 8).softmax(-1), 5 * 32, "softmax"),
        (lambda: F.layer_norm(meta(4, 8), (8,), meta(8), meta(8)), 7 * 32, "normalization"),
        (lambda: F.layer_norm(meta(4, 8), (8,)), 5 * 32, "normalization"),
        (
            lambda: F.batch_norm(meta(2, 3, 4, 4), meta(3), meta(3), meta(3), meta(3)),
            4 * 96,
            "normalization",
        ),
        (lambda: F.max_pool2d(meta(1, 2, 8, 8), 3, 2, 1), 2 * 4 * 4 * 9, "pooling"),
        (lambda: F.adaptive_avg_pool2d(meta(1, 2, 8, 8), 2), 128, "pooling"),
        (lambda: F.adaptive_avg_pool2d(meta(1, 2, 8, 8), 1), 128, "reduction"),  # a mean
        (lambda: meta(4, 8).sum(-1), 32, "reduction"),
        (lambda: meta(4, 8).var(-1), 96, "reduction"),
        (
            lambda: F.interpolate(meta(1, 1, 4, 4), scale_factor=2, mode="bilinear"),
            7 * 64,
            "interpolation",
        ),
        (lambda: torch.mv(meta(4, 8), meta(8)), 64, "matvec"),
    ],
)
def test_formulas_count_what_flop_counter_mode_does_not(fn: Any, flops: int, rule: str) -> None:
    assert tally(fn)[:2] == (flops, rule)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.view(8, 4),
        lambda x: x.transpose(0, 1),
        lambda x: x.contiguous(),
        lambda x: x[:, 1:3],
        lambda x: x.to(torch.float32),
        lambda x: torch.empty_like(x),
    ],
)
def test_views_and_no_ops_move_no_data(fn: Any) -> None:
    x = meta(4, 8)
    assert tally(lambda: fn(x)) == (0, "none", False)


def test_copies_move_data_without_flops() -> None:
    x, y = meta(4, 8), meta(4, 8)
    assert tally(lambda: x.t().contiguous()) == (0, "none", True)
    assert tally(lambda: torch.cat([x, y])) == (0, "none", True)
    assert tally(lambda: x.to(torch.float16)) == (0, "none", True)


def test_counter_rules_are_recognised() -> None:
    assert counted_by_flop_counter("matmul")
    assert counted_by_flop_counter("convolution+matmul")
    assert not counted_by_flop_counter("elementwise")
    assert not counted_by_flop_counter("matmul+elementwise")
    assert not counted_by_flop_counter(None)


def test_linear_cost_matches_the_hand_written_example_spec() -> None:
    # measurement_specs/mlp-small-b8.yaml: Linear(784, 256) on [8, 784] float32.
    spec = OperatorSpec.model_validate(
        {
            "op": "torch.nn.Linear",
            "form": "module",
            "dtype": "float32",
            "args": {"in_features": 784, "out_features": 256, "bias": True},
            "inputs": [{"shape": [8, 784]}],
        }
    )
    cost = op_cost(spec)
    assert (cost.flops, cost.flop_rule, cost.bytes, cost.params) == (
        3211264,
        "matmul",
        837120,
        200960,
    )
    assert cost.flops_backward is None
    assert cost.device == "meta"
    training = op_cost(spec, "training")
    assert training.flops_backward == 2 * 3211264  # grad input and grad weight, both 2·m·n·k


def test_an_embedding_lookup_moves_the_rows_it_gathers_not_the_table() -> None:
    spec = OperatorSpec.model_validate(
        {
            "op": "torch.nn.Embedding",
            "form": "module",
            "dtype": "float16",
            "args": {"num_embeddings": 32000, "embedding_dim": 4096},
            "inputs": [{"shape": [2, 8], "dtype": "int64", "value_range": [0, 32000]}],
        }
    )
    rows = 2 * 8 * 4096 * 2  # 16 rows of 4096 halves read, and as many written
    assert op_cost(spec).bytes == 16 * 8 + rows + rows
    assert op_cost(spec).params == 32000 * 4096
    # training writes the table's dense gradient: the table counts
    assert op_cost(spec, "training").bytes == 16 * 8 + 32000 * 4096 * 2 + rows


def test_attention_on_meta_is_counted_as_its_matmuls() -> None:
    spec = OperatorSpec.model_validate(
        {
            "op": "torch.nn.functional.scaled_dot_product_attention",
            "form": "function",
            "inputs": [{"shape": [1, 2, 16, 8]}] * 3,
        }
    )
    cost = op_cost(spec)
    assert (cost.flops, cost.flop_rule) == (2 * (2 * 2 * 16 * 16 * 8), "matmul")
    assert cost.bytes == 4 * 4 * (2 * 16 * 8)


def test_an_op_that_needs_data_is_counted_on_the_cpu() -> None:
    spec = OperatorSpec.model_validate(
        {"op": "torch.nonzero", "form": "function", "inputs": [{"shape": [4, 4]}]}
    )
    cost = op_cost(spec)
    assert cost.device == "cpu"
    assert cost.flop_rule == "none"


@pytest.mark.parametrize("groups", [1, 4, 32])
@pytest.mark.parametrize("transposed", [False, True])
def test_a_convolutions_backward_costs_twice_its_forward_grouped_or_not(
    groups: int, transposed: bool
) -> None:
    # torch's FlopCounterMode counts a depthwise conv's input gradient 32 times too much.
    cls = torch.nn.ConvTranspose2d if transposed else torch.nn.Conv2d
    conv = cls(32, 32, 3, padding=1, groups=groups, device="meta")
    x = torch.empty(2, 32, 28, 28, device="meta", requires_grad=True)
    with FlopTally() as forward:
        y = conv(x)
    macs = 2 * 28 * 28 * 32 * (32 // groups) * 9
    assert forward.result.flops == 2 * macs
    with FlopTally() as weight_only:
        torch.autograd.grad(y, [conv.weight], torch.ones_like(y), retain_graph=True)
    with FlopTally() as both:
        torch.autograd.grad(y, [x, conv.weight], torch.ones_like(y))
    assert weight_only.result.flops == 2 * macs
    assert both.result.flops == 4 * macs and both.result.rule == "convolution"
