from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - the usual alias
from torch import nn

from operator_db.ops.resolve import (
    UnknownOperatorError,
    function_name,
    module_name,
    resolve_function,
    resolve_module,
)


@pytest.mark.parametrize(
    ("func", "name"),
    [
        (torch.matmul, "torch.matmul"),
        (F.gelu, "torch.nn.functional.gelu"),
        (F.layer_norm, "torch.nn.functional.layer_norm"),
        (F.scaled_dot_product_attention, "torch.nn.functional.scaled_dot_product_attention"),
        (torch.Tensor.add, "torch.Tensor.add"),
        (torch.Tensor.__getitem__, "torch.Tensor.__getitem__"),
        (torch.Tensor.__rsub__, "torch.Tensor.__rsub__"),
        (torch.Tensor.split, "torch.Tensor.split"),
        (torch.einsum, "torch.einsum"),
        (torch.special.erf, "torch.special.erf"),
    ],
)
def test_functions_get_names_that_resolve_back_to_them(func: object, name: str) -> None:
    assert function_name(func) == name  # type: ignore[arg-type]
    assert resolve_function(name) is func


@pytest.mark.parametrize(
    "name",
    [
        "os.system",
        "builtins.eval",
        "torch.load",
        "torch.save",
        "torch.hub.load",
        "torch.Tensor.backward",
        "torch.Tensor.register_hook",
        "torch.Tensor._make_subclass",
        "torch.Tensor.__reduce_ex__",
        "torch.nn.functional._in_projection",
        "torch.manual_seed",
        "torch.nn.functional.no_such_function",
        "torch.from_file",
        "torch.ops.aten.mm",
    ],
)
def test_only_allowed_tensor_math_resolves(name: str) -> None:
    with pytest.raises(UnknownOperatorError):
        resolve_function(name)


def test_module_classes_resolve_inside_torch_nn_only() -> None:
    assert resolve_module("torch.nn.Conv2d") is nn.Conv2d
    assert resolve_module("torch.nn.modules.linear.NonDynamicallyQuantizableLinear") is (
        nn.modules.linear.NonDynamicallyQuantizableLinear
    )
    assert module_name(nn.Conv2d) == "torch.nn.Conv2d"
    for bad in (
        "torch.nn.functional.relu",
        "collections.OrderedDict",
        "torch.nn.Nope",
        "torch.optim.SGD",
    ):
        with pytest.raises(UnknownOperatorError):
            resolve_module(bad)


def test_subclasses_outside_torch_nn_have_no_module_name() -> None:
    class MyLinear(nn.Linear):
        pass

    assert module_name(MyLinear) is None


def test_functions_outside_the_allow_list_have_no_name() -> None:
    def custom(x: torch.Tensor) -> torch.Tensor:
        return x

    assert function_name(custom) is None
    assert function_name(torch.ops.aten.mm.default) is None
