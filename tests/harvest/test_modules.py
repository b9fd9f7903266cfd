from __future__ import annotations

import pytest
import torch
from torch import nn

from operator_db.harvest.modules import NotRebuildable, Rebuildable, constructor_args
from operator_db.ops import build_op
from operator_db.specs import OperatorSpec

MODULES = [
    nn.Conv2d(3, 64, 7, 2, 3, bias=False),
    nn.Conv2d(8, 8, 3, padding="same", groups=4, padding_mode="reflect"),
    nn.ConvTranspose2d(4, 4, 2, 2, output_padding=1),
    nn.Linear(3, 4, bias=False),
    nn.BatchNorm2d(64, eps=1e-3, momentum=None),
    nn.BatchNorm1d(5, affine=False, track_running_stats=False),
    nn.LayerNorm(768, eps=1e-12),
    nn.LayerNorm([4, 5], elementwise_affine=False),
    nn.GroupNorm(4, 16),
    nn.RMSNorm(16),
    nn.Embedding(100, 8, padding_idx=0),
    nn.Dropout(0.1),
    nn.ReLU(inplace=True),
    nn.GELU(approximate="tanh"),
    nn.Softmax(dim=-1),
    nn.MaxPool2d(3, 2, 1),
    nn.AvgPool2d(2, ceil_mode=True),
    nn.AdaptiveAvgPool2d((1, 1)),
    nn.Flatten(1),
    nn.Identity(),
    nn.Hardtanh(-2.0, 2.0),
    nn.PReLU(3),
    nn.Upsample(scale_factor=2, mode="bilinear"),
    nn.ZeroPad2d((1, 2, 0, 0)),
    nn.modules.linear.NonDynamicallyQuantizableLinear(4, 4),
]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: repr(m))
def test_torch_nn_modules_are_rebuilt_generically(module: nn.Module) -> None:
    found = constructor_args(module)
    assert isinstance(found, Rebuildable), found
    spec = OperatorSpec(op=found.op, form="module", args=found.args, dtype=found.dtype)  # type: ignore[arg-type]
    rebuilt = build_op(spec, device="meta").module
    assert type(rebuilt) is type(module)
    assert rebuilt is not None and rebuilt.extra_repr() == module.extra_repr()
    assert [(n, p.shape) for n, p in rebuilt.named_parameters()] == [
        (n, p.shape) for n, p in module.named_parameters()
    ]


def test_recovered_arguments_are_readable() -> None:
    found = constructor_args(nn.Conv2d(3, 64, 7, 2, 3, bias=False))
    assert found == Rebuildable(
        "torch.nn.Conv2d",
        {
            "in_channels": 3,
            "out_channels": 64,
            "kernel_size": [7, 7],
            "stride": [2, 2],
            "padding": [3, 3],
            "dilation": [1, 1],
            "groups": 1,
            "bias": False,
            "padding_mode": "zeros",
        },
        "float32",
    )


def test_parameter_dtype_is_recorded() -> None:
    found = constructor_args(nn.Linear(2, 2).to(torch.bfloat16))
    assert isinstance(found, Rebuildable) and found.dtype == "bfloat16"
    assert isinstance(found := constructor_args(nn.ReLU()), Rebuildable) and found.dtype is None


def test_custom_classes_are_not_rebuilt_from_a_guess() -> None:
    class MyLinear(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) * 2

    found = constructor_args(MyLinear(2, 3))
    assert isinstance(found, NotRebuildable)
    assert found.reason.endswith("MyLinear is not a torch.nn class")


def test_a_torch_nn_module_whose_arguments_are_not_kept_is_refused() -> None:
    found = constructor_args(nn.LSTM(4, 8))  # LSTM(*args, **kwargs): nothing to read
    assert isinstance(found, NotRebuildable)
    assert found.reason.startswith("torch.nn.LSTM: rebuilding from the recovered arguments raised")
