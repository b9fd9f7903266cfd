"""The door for specs: allowed ops, typed module arguments, tensors within the setting; every
shipped, example and harvested spec passes."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from operator_db.errors import SpecError
from operator_db.harvest import harvest
from operator_db.ops.admission import admit_spec
from operator_db.ops.probe import largest_created
from operator_db.specs import load_specs, parse_spec
from tests.helpers import EXAMPLE_SPECS, linear_op, relu_op, spec_dict

LIMIT = 2**33


def refusal(data: dict[str, Any], limit: int = LIMIT) -> str:
    with pytest.raises(SpecError) as info:
        admit_spec(parse_spec(data, "x.yaml"), max_tensor_numel=limit)
    message = str(info.value)
    assert "\n" not in message
    return message


def function_op(name: str, shape: list[int]) -> dict[str, Any]:
    return {"op": name, "form": "function", "inputs": [{"shape": shape}], "outputs": []}


def test_shipped_specs_pass() -> None:
    for loaded in load_specs([EXAMPLE_SPECS], max_bytes=2**24):
        assert admit_spec(loaded, max_tensor_numel=LIMIT) is loaded
        for op in loaded.spec.operators:  # each runs whole on the meta device: no fallback
            assert op.form == "opaque" or largest_created(op).failure is None, op.op


@pytest.mark.parametrize(
    ("form", "op", "message"),
    [
        ("function", "os.system", "function 'os.system' is not an allowed operator"),
        ("function", "torch.load", "function 'torch.load' is not an allowed operator"),
        ("function", "torch.from_file", "function 'torch.from_file' is not an allowed operator"),
        ("function", "torch.Tensor.tolist", "function 'torch.Tensor.tolist' is not an allowed"),
        ("function", "torch.nn.functional.nope", "no operator 'torch.nn.functional.nope'"),
        ("module", "os.system", "module 'os.system' is not a torch.nn class"),
        ("module", "torch.nn.functional.relu", "'torch.nn.functional.relu' is not a torch.nn"),
    ],
)
def test_ops_outside_the_allow_list_are_refused(form: str, op: str, message: str) -> None:
    entry = {**function_op(op, [4, 4]), "form": form}
    data = spec_dict(operators=[linear_op(), entry])
    assert refusal(data).startswith(f"x.yaml: operators[1].op: {message}")


def test_opaque_ops_are_names_only() -> None:
    entry = {**function_op("my_lib.custom_op", [4, 4]), "form": "opaque"}
    admit_spec(parse_spec(spec_dict(operators=[entry]), "x.yaml"), max_tensor_numel=LIMIT)
    entry["op"] = "os.system; rm -rf /"
    with pytest.raises(SpecError, match=r"operators\[0\]\.op: string should match pattern"):
        parse_spec(spec_dict(operators=[entry]), "x.yaml")


def test_module_arguments_are_checked() -> None:
    op = linear_op()
    op["args"]["in_features"] = "abc"
    assert refusal(spec_dict(operators=[op])) == (
        'x.yaml: operators[0].args.in_features: torch.nn.Linear: must be int, got "abc"'
    )
    op["args"] |= {"in_features": 2**20, "out_features": 2**20}
    assert refusal(spec_dict(operators=[op])).startswith(
        "x.yaml: operators[0].args: torch.nn.Linear: its parameters and buffers would hold "
    )


def test_tensors_are_bounded_by_the_setting() -> None:
    big = relu_op([2**17, 2**17])  # 2**34 elements: within the format, over the default setting
    assert refusal(spec_dict(operators=[big])) == (
        f"x.yaml: operators[0].inputs[0].shape: tensor of {2**34} elements, over the limit of "
        f"{LIMIT} (OPDB_MAX_TENSOR_NUMEL)"
    )
    admit_spec(parse_spec(spec_dict(operators=[big]), "x.yaml"), max_tensor_numel=2**34)
    data = spec_dict(operators=[relu_op([4, 4])])
    assert refusal(data, limit=63) == (
        "x.yaml: model.inputs[0].shape: tensor of 64 elements, over the limit of 63 "
        "(OPDB_MAX_TENSOR_NUMEL)"
    )


def test_strided_storage_is_bounded() -> None:
    op = function_op("torch.Tensor.sum", [4, 4])
    op["call"] = {"args": [{"strided": {"tensor": 0}, "stride": [2**40, 1]}]}
    assert refusal(spec_dict(operators=[op])).startswith(
        "x.yaml: operators[0].call: strided input 0: storage of 3298534883332 elements, over the "
        "limit of"
    )
    op["call"] = {"args": [{"strided": {"tensor": 0}, "stride": [1]}]}
    assert refusal(spec_dict(operators=[op])) == (
        "x.yaml: operators[0].call: the stride [1] does not fit input 0"
    )


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.emb = nn.Embedding(10, 8, padding_idx=0)
        self.norm2 = nn.LayerNorm([8])

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.conv(x)).flatten(2).transpose(1, 2)
        y = self.attn(y, y, y)[0] + self.emb(ids)
        return torch.nn.functional.gelu(self.norm2(y)).sum(-1)


def test_what_harvest_writes_passes() -> None:
    ids = torch.randint(0, 10, (2, 16))
    result = harvest(_Block(), [torch.randn(2, 3, 4, 4), ids], name="block", device="cpu")
    forms = {op.op: op.form for op in result.spec.operators}
    assert [forms[f"torch.nn.{name}"] for name in ("Conv2d", "Embedding", "LayerNorm")] == [
        "module"
    ] * 3
    data = result.spec.model_dump(mode="json")
    admit_spec(parse_spec(data, "block.yaml"), max_tensor_numel=LIMIT)


def call_op(name: str, args: list[Any], *shapes: list[int], **kwargs: Any) -> dict[str, Any]:
    inputs = [{"shape": shape, "dtype": "float32"} for shape in shapes]
    call = {"args": args, "kwargs": kwargs}
    return {"op": name, "form": "function", "inputs": inputs, "outputs": [], "call": call}


X = {"tensor": 0}


@pytest.mark.parametrize(
    ("op", "numel", "aten"),
    [
        (call_op("torch.empty", [100000, 1000000], device="cpu"), 10**11, "empty.memory_format"),
        (call_op("torch.zeros", [[100000, 100000]]), 10**10, "zeros.default"),
        (call_op("torch.full", [[100000, 100000], 1.5]), 10**10, "full.default"),
        (call_op("torch.randn", [100000, 100000]), 10**10, "randn.default"),
        (call_op("torch.randint", [0, 5, [100000, 100000]]), 10**10, "randint.low"),
        (call_op("torch.arange", [10**10]), 10**10, "arange.default"),
        (call_op("torch.linspace", [0, 1, 10**10]), 10**10, "linspace.default"),
        (call_op("torch.eye", [100000]), 10**10, "eye.default"),
        (call_op("torch.Tensor.new_zeros", [X, [100000, 100000]], [4, 4]), 10**10, "new_zeros"),
        (call_op("torch.Tensor.repeat", [X, 100000, 100000], [4, 4]), 16 * 10**10, "repeat"),
        (call_op("torch.Tensor.expand", [X, 100000, 100000], [1, 1]), 10**10, "expand"),
        (call_op("torch.Tensor.tile", [X, [100000, 100000]], [4, 4]), 16 * 10**10, "repeat"),
        (call_op("torch.repeat_interleave", [X, 10**9], [4, 4]), 16 * 10**9, "expand"),
        (
            call_op("torch.nn.functional.interpolate", [X], [1, 3, 4, 4], size=[100000, 100000]),
            3 * 10**10,
            "upsample_nearest2d",
        ),
        (call_op("torch.nn.functional.pad", [X, [10**5] * 4], [4, 4]), 200004**2, "constant_pad"),
    ],
)
def test_tensors_a_call_creates_are_bounded(op: dict[str, Any], numel: int, aten: str) -> None:
    # Each runs on the meta device (device="cpu" included): nothing is allocated here.
    message = refusal(spec_dict(operators=[relu_op([4, 4]), op]))
    assert message.startswith(f"x.yaml: operators[1].call: {op['op']} creates a tensor of {numel}")
    assert f"(aten.{aten}" in message
    assert message.endswith(f"over the limit of {LIMIT} (OPDB_MAX_TENSOR_NUMEL)")
    admit_spec(parse_spec(spec_dict(operators=[op]), "x.yaml"), max_tensor_numel=numel)


@pytest.mark.parametrize(
    ("op", "numel"),
    [
        (call_op("torch.ones", [[3e9, 3]]), 9 * 10**9),  # torch refuses floats: sizes read
        (call_op("torch.Tensor.repeat", [X, 1e11], [4, 4]), 10**11),
        (call_op("torch.Tensor.view", [X, 100000, 1000000], [4, 4]), 10**11),
        (call_op("torch.Tensor.reshape", [X, [100000, 1000000]], [4, 4]), 10**11),
    ],
)
def test_sizes_in_the_arguments_are_bounded_where_the_meta_run_fails(
    op: dict[str, Any], numel: int
) -> None:
    assert refusal(spec_dict(operators=[op])) == (
        f"x.yaml: operators[0].call: {op['op']} asks for a tensor of {numel} elements in its "
        f"arguments, over the limit of {LIMIT} (OPDB_MAX_TENSOR_NUMEL)"
    )


def test_data_dependent_calls_within_the_limit_pass() -> None:
    # A boolean index has no shape on the meta device; its arguments ask for nothing large, and a
    # slice's sys.maxsize bound and a large fill value are not sizes.
    mask = call_op("torch.Tensor.__getitem__", [X, {"tensor": 1}], [4, 4], [4, 4])
    mask["inputs"][1]["dtype"] = "bool"
    fill = call_op("torch.Tensor.masked_fill", [X, {"tensor": 1}, -1e38], [4, 4], [4, 4])
    fill["inputs"][1]["dtype"] = "bool"
    index = call_op("torch.Tensor.__getitem__", [X, [{"slice": [0, 2**63 - 1, None]}]], [4, 4])
    data = spec_dict(operators=[mask, fill, index])
    admit_spec(parse_spec(data, "x.yaml"), max_tensor_numel=LIMIT)


def int_op(name: str, args: list[Any], shape: list[int], top: int, **kwargs: Any) -> dict[str, Any]:
    """A call of ``name`` on one int64 input of ``shape`` whose values lie in [0, top)."""
    op = call_op(name, args, shape, **kwargs)
    op["inputs"][0].update(dtype="int64", value_range=[0, top])
    return op


@pytest.mark.parametrize(
    ("op", "numel"),
    [
        # issue 46's probe: each was stored (201) and queued
        (int_op("torch.repeat_interleave", [X], [1000], 10**7 + 1), 10**10),
        (int_op("torch.nn.functional.one_hot", [X], [1000], 10**9, num_classes=-1), 10**12),
        (int_op("torch.arange", [X], [], 10**12 + 1), 10**12),
        (int_op("torch.bincount", [X], [10], 10**11), 10**11),
        (call_op("torch.combinations", [X], [64], r=8), 8 * 64**8),  # its grids stacked
    ],
)
def test_sizes_that_follow_the_data_are_bounded_by_its_value_range(
    op: dict[str, Any], numel: int
) -> None:
    """repeat_interleave on values 1e7, one_hot(num_classes=-1), arange of a 0-dim tensor,
    bincount and combinations(64, r=8) passed: the meta run could not see their sizes."""
    message = refusal(spec_dict(operators=[op]))
    assert message.startswith(f"x.yaml: operators[0].call: {op['op']} creates a tensor of {numel}")
    created = largest_created(parse_spec(spec_dict(operators=[op]), "x.yaml").spec.operators[0])
    assert created.numel == numel


def test_data_dependent_sizes_within_their_range_pass() -> None:
    small = [
        int_op("torch.repeat_interleave", [X], [1000], 4),
        int_op("torch.nn.functional.one_hot", [X], [8], 10, num_classes=-1),
        int_op("torch.bincount", [X], [10], 100),
        call_op("torch.combinations", [X], [8], r=2),
    ]
    admit_spec(parse_spec(spec_dict(operators=small), "x.yaml"), max_tensor_numel=LIMIT)


def test_a_size_no_range_bounds_is_unbounded() -> None:
    """.item() of a tensor no value range reaches (a sum of the input) bounds no size."""
    from operator_db.ops.probe import UnboundedSizeError, _Largest

    meta = torch.device("meta")
    x = torch.empty(4, dtype=torch.int64, device=meta)
    watch = _Largest()
    watch.bound([x], [(0.0, 9.0)])
    with watch:
        assert torch.arange(x.max()).shape == (9,)  # a max of x keeps x's range
        with pytest.raises(UnboundedSizeError, match="a .item"):
            torch.arange(x.sum())


def test_tensors_are_bounded_in_bytes_and_calls_in_flops() -> None:
    """A complex128 [4, 2**31-1] (128 GiB) passed the element limit; a 65536² matmul (2.8e14
    FLOPs) had no bound."""
    huge = function_op("torch.abs", [4, 2**31 - 1])
    huge["inputs"][0]["dtype"] = "complex128"
    with pytest.raises(SpecError, match=r"bytes \(complex128\), over the limit of 34359738368"):
        admit_spec(
            parse_spec(spec_dict(operators=[huge]), "x.yaml"),
            max_tensor_numel=LIMIT,
            max_tensor_bytes=2**35,
        )
    matmul = call_op("torch.matmul", [X, {"tensor": 1}], [65536, 65536], [65536, 65536])
    with pytest.raises(SpecError, match=r"a call of 5.63e\+14 FLOPs, over the limit of 1e\+14"):
        admit_spec(
            parse_spec(spec_dict(operators=[matmul]), "x.yaml"),
            max_tensor_numel=LIMIT,
            max_call_flops=1e14,
        )


def test_a_specs_own_flops_and_bytes_are_recomputed() -> None:
    """`Linear 4096² flops: 1` was stored as given, for every later model sharing it."""
    from operator_db.ops.admission import GIVEN

    lying = linear_op(4096, 4096, batch=8)
    lying.update(flops=1, bytes=1, flop_rule="made up")
    opaque = {"op": "my.Custom", "form": "opaque", "inputs": [{"shape": [8, 4096]}], "flops": 7}
    data = spec_dict(operators=[lying, opaque])
    admitted = admit_spec(parse_spec(data, "x.yaml"), max_tensor_numel=LIMIT, recompute=True)
    linear, custom = admitted.spec.operators
    assert linear.flops == 2 * 8 * 4096 * 4096  # the matmul (FlopCounterMode: the bias is free)
    assert linear.bytes == 4 * (8 * 4096 + 4096 * 4096 + 4096 + 8 * 4096)
    assert linear.flop_rule != "made up"
    assert custom.flops == 7 and custom.flop_rule is None  # nothing can count an opaque op
    stuck = call_op("torch.Tensor.view", [X, 1e3], [4, 4])  # torch refuses a float size
    stuck.update(flops=5)
    kept = admit_spec(
        parse_spec(spec_dict(operators=[stuck]), "x.yaml"), max_tensor_numel=LIMIT, recompute=True
    ).spec.operators[0]
    assert kept.flops == 5 and kept.flop_rule == GIVEN  # kept, and flagged
