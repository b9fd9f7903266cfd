"""Each NeuSight family becomes the configuration `opdb harvest` records for the same call.

A small module makes NeuSight's call (``neusight/Dataset/collect.py``'s ``profile_kernel``: the
op, its constructor, its inputs) and is harvested on the meta device; the family's configuration
must have the same key, and its closed-form cost the same FLOPs, bytes, parameters and outputs
as ``ops.cost.op_cost`` (on random shapes of each family).
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from operator_db.datasets.neusight.ops import FAMILIES, SCALAR
from operator_db.harvest import harvest
from operator_db.ops.cost import op_cost
from operator_db.specs import TensorSpec, operator_key


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


def _module(child: nn.Module) -> Call:
    return Call(lambda s, x: s.child(x), child=child)


def _neusight_call(name: str, s: dict[str, int]) -> tuple[nn.Module, list[TensorSpec]]:
    """Return a module making NeuSight's call for family ``name`` at shape ``s``, its inputs."""
    bh = [_t(s.get("B", 1), s.get("H", 1))]
    binary = {"add": torch.add, "mul": torch.mul, "pow": torch.pow, "div": torch.div}
    if name == "bmm":
        return Call(lambda _, a, b: torch.bmm(a, b)), [
            _t(s["B"], s["M"], s["N"]),
            _t(s["B"], s["N"], s["K"]),
        ]
    if name == "linear":
        return _module(nn.Linear(s["N"], s["K"], bias=True)), [_t(s["B"], s["M"], s["N"])]
    if name == "ln":
        return _module(nn.LayerNorm(s["H"])), bh
    if name == "softmax":
        return _module(nn.Softmax()), bh
    if name in binary:
        fn = binary[name]
        return Call(lambda _, x, y: fn(x, y)), bh * 2
    if name.removesuffix("u") in binary:
        fn = binary[name.removesuffix("u")]
        return Call(lambda _, x: fn(x, SCALAR)), bh
    if name == "relu":
        return _module(nn.ReLU()), bh
    if name == "gelu":
        return _module(nn.GELU()), bh
    if name == "tanh":
        return Call(lambda _, x: torch.tanh(x)), bh
    assert name == "conv"
    conv = nn.Conv2d(
        s["Input_Channel"],
        s["Output_Channel"],
        s["Kernel_Szie"],
        stride=s["Stride"],
        padding=s["Padding"],
        bias=False,
    )
    return _module(conv), [_t(s["B"], s["Input_Channel"], s["Input_Size"], s["Input_Size"])]


def _shape(name: str, rng: random.Random) -> dict[str, int]:
    family = FAMILIES[name]
    shape = {c: rng.randint(1, 40) for c in family.columns}
    if name == "linear":
        shape["B"] = 1  # NeuSight's linear rows all have B = 1
    if name == "conv":
        shape.update(Kernel_Szie=3, Stride=1, Padding=1)  # every conv row of the data set
    return shape


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_family_has_the_harvesters_key(name: str) -> None:
    shape = _shape(name, random.Random(name))
    module, inputs = _neusight_call(name, shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nn.Softmax() warns that its dim is implicit
        spec = harvest(module, inputs if len(inputs) > 1 else inputs[0]).spec
    (harvested,) = spec.operators
    ours = FAMILIES[name].build(shape)
    assert operator_key(ours, "inference") == operator_key(harvested, "inference")
    fields = ("op", "form", "args", "dtype", "inputs", "call")
    assert ours.model_dump(include=set(fields)) == harvested.model_dump(include=set(fields))


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_familys_closed_form_cost_is_op_costs(name: str) -> None:
    rng = random.Random(f"cost-{name}")
    for _ in range(8):
        ours = FAMILIES[name].build(_shape(name, rng))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cost = op_cost(ours)
        assert (ours.flops, ours.flop_rule, ours.bytes, ours.params) == (
            cost.flops,
            cost.flop_rule,
            cost.bytes,
            cost.params,
        )
        assert ours.outputs == cost.outputs
