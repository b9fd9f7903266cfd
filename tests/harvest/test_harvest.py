from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from operator_db.errors import HarvestError
from operator_db.harvest import HarvestResult, OpaqueOp, SkippedCall, TracedLeaf, harvest
from operator_db.ops import build_op, counted_by_flop_counter
from operator_db.ops.build import output_specs
from operator_db.specs import Spec, TensorSpec, load_spec, operator_key
from tests.harvest.models import DataDependent, MixedNet, Raising, Untraceable

IMAGES = TensorSpec(shape=[2, 3, 32, 32])


def meta_flop_counter(model: nn.Module, *args: torch.Tensor) -> int:
    """What FlopCounterMode counts for the whole model's forward pass on the meta device."""
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.eval()(*args)
    return counter.get_total_flops()


def assert_no_double_counting(spec: Spec) -> None:
    """No functional call is recorded inside a leaf module that is recorded whole."""
    leaves = {
        loc
        for op in spec.operators
        if op.form in ("module", "opaque") and not op.op.startswith("torch.ops.")
        for loc in op.locations
    }
    for op in spec.operators:
        if op.form == "function":
            for loc in op.locations:
                assert not any(loc == leaf or loc.startswith(leaf + ".") for leaf in leaves), (
                    f"{op.op} recorded inside leaf {loc}"
                )


def assert_round_trip(spec: Spec) -> None:
    """Every configuration rebuilds from the spec alone, runs on the CPU, gives its outputs."""
    for op in spec.operators:
        if op.form == "opaque":
            continue
        out = build_op(op, mode=spec.model.mode, device="cpu").run()
        assert [(t.shape, t.dtype) for t in output_specs(out)] == [
            (t.shape, t.dtype) for t in op.outputs
        ], op.op


@pytest.fixture(scope="module")
def mixed() -> HarvestResult:
    return harvest(MixedNet(), IMAGES)


def test_modules_and_functional_calls_between_them_are_recorded(mixed: HarvestResult) -> None:
    blocks = ["blocks.0", "blocks.1"]
    assert [(op.op, op.form, op.count, op.locations) for op in mixed.spec.operators] == [
        ("torch.nn.Conv2d", "module", 1, ["stem"]),
        ("torch.Tensor.flatten", "function", 1, [""]),
        ("torch.Tensor.transpose", "function", 1, [""]),
        ("torch.nn.LayerNorm", "module", 2, ["norm"]),  # one module, called before each block
        ("torch.nn.Linear", "module", 2, ["blocks.0.qkv", "blocks.1.qkv"]),
        ("torch.Tensor.chunk", "function", 2, blocks),
        ("torch.Tensor.view", "function", 6, blocks),
        ("torch.Tensor.transpose", "function", 6, blocks),
        ("torch.Tensor.transpose", "function", 2, blocks),  # k.transpose: a strided input
        ("torch.matmul", "function", 2, blocks),
        ("torch.Tensor.div", "function", 2, blocks),
        ("torch.Tensor.softmax", "function", 2, blocks),
        ("torch.matmul", "function", 2, blocks),
        ("torch.nn.functional.scaled_dot_product_attention", "function", 2, blocks),
        ("torch.Tensor.add", "function", 2, blocks),
        ("torch.Tensor.transpose", "function", 2, blocks),
        ("torch.Tensor.reshape", "function", 2, blocks),
        ("torch.nn.Linear", "module", 2, ["blocks.0.out", "blocks.1.out"]),
        ("torch.Tensor.add", "function", 2, [""]),
        ("torch.nn.functional.relu", "function", 1, ["act"]),  # a custom leaf without weights
        ("torch.Tensor.__pow__", "function", 1, ["act"]),
        ("torch.nn.GELU", "module", 1, ["gelu"]),  # its own F.gelu is not recorded again
        ("torch.Tensor.mul", "function", 1, ["scale"]),  # a custom leaf with weights, traced
        ("torch.Tensor.mean", "function", 1, [""]),
        ("torch.nn.Linear", "module", 1, ["head"]),
    ]
    assert mixed.device == "meta" and mixed.fallback is None
    assert mixed.calls == 49 and mixed.configurations == 25


def test_calls_are_described_exactly(mixed: HarvestResult) -> None:
    by_op = {op.op: op for op in mixed.spec.operators}
    conv = by_op["torch.nn.Conv2d"]
    assert conv.args == {
        "in_channels": 3,
        "out_channels": 32,
        "kernel_size": [4, 4],
        "stride": [4, 4],
        "padding": [0, 0],
        "dilation": [1, 1],
        "groups": 1,
        "bias": True,
        "padding_mode": "zeros",
    }
    assert (conv.dtype, conv.call, conv.params) == ("float32", None, 32 * 3 * 16 + 32)
    assert [t.shape for t in conv.inputs] == [[2, 3, 32, 32]]
    assert [t.shape for t in conv.outputs] == [[2, 32, 8, 8]]
    assert conv.flops == 2 * (2 * 32 * 8 * 8) * (3 * 4 * 4)
    assert conv.flop_rule == "convolution"
    assert conv.bytes == 4 * (2 * 3 * 32 * 32 + 32 * 3 * 16 + 32 + 2 * 32 * 8 * 8)
    sdpa = by_op["torch.nn.functional.scaled_dot_product_attention"]
    assert sdpa.call is not None
    assert sdpa.call.args == [
        {"strided": {"tensor": i}, "stride": [6144, 8, 96, 1]} for i in range(3)
    ]  # q, k, v: views of the qkv projection
    assert sdpa.flops == 2 * (2 * 2 * 4 * 64 * 64 * 8) and sdpa.flop_rule == "matmul"
    mean = by_op["torch.Tensor.mean"]
    assert mean.call is not None and mean.call.kwargs == {"dim": 1}
    assert (mean.flops, mean.flop_rule) == (2 * 64 * 32, "reduction")
    view = by_op["torch.Tensor.view"]
    assert (view.flops, view.flop_rule, view.bytes) == (0, "none", 0)


def test_flop_counter_part_equals_flop_counter_mode_on_the_whole_model(
    mixed: HarvestResult,
) -> None:
    with torch.device("meta"):
        model = MixedNet()
    expected = meta_flop_counter(model, torch.empty(2, 3, 32, 32, device="meta"))
    assert mixed.counter_flops == expected
    # What our formulas add (softmax, norms, elementwise) comes on top, in ops it gives 0.
    formula = sum(
        op.count * (op.flops or 0)
        for op in mixed.spec.operators
        if not counted_by_flop_counter(op.flop_rule)
    )
    assert mixed.flops == expected + formula and formula > 0
    assert_no_double_counting(mixed.spec)


def test_every_configuration_rebuilds_and_runs_on_the_cpu(mixed: HarvestResult) -> None:
    assert_round_trip(mixed.spec)


def test_custom_leaves_are_traced_into_their_calls(mixed: HarvestResult) -> None:
    assert mixed.opaque == [] and mixed.skipped == []
    inside = [op for op in mixed.spec.operators if op.locations == ["scale"]]
    assert [(op.op, [t.shape for t in op.inputs]) for op in inside] == [
        ("torch.Tensor.mul", [[2, 64, 32], [32]])
    ]  # the weight became an input
    assert mixed.traced == [
        TracedLeaf(
            "tests.harvest.models.SquaredReLU",
            ["act"],
            1,
            "tests.harvest.models.SquaredReLU is not a torch.nn class",
        ),
        TracedLeaf(
            "tests.harvest.models.Scale",
            ["scale"],
            1,
            "tests.harvest.models.Scale is not a torch.nn class",
        ),
    ]
    assert mixed.spec.provenance["custom_leaves"] == "trace"
    # The traced leaves' weights are inputs of their calls, yet the model's own count has them.
    module_params = sum((op.params or 0) * len(op.locations) for op in mixed.spec.operators)
    assert mixed.spec.provenance["params"] == sum(p.numel() for p in MixedNet().parameters())
    assert mixed.spec.provenance["params"] > module_params
    assert mixed.spec.provenance["traced"] == [
        "tests.harvest.models.SquaredReLU ×1 at act: tests.harvest.models.SquaredReLU is not a "
        "torch.nn class",
        "tests.harvest.models.Scale ×1 at scale: tests.harvest.models.Scale is not a torch.nn "
        "class",
    ]


def test_custom_leaves_with_weights_can_stay_opaque(mixed: HarvestResult) -> None:
    result = harvest(MixedNet(), IMAGES, custom_leaves="opaque")
    assert result.opaque == [
        OpaqueOp(
            "tests.harvest.models.Scale",
            ["scale"],
            1,
            "tests.harvest.models.Scale is not a torch.nn class",
        )
    ]
    scale = next(op for op in result.spec.operators if op.form == "opaque")
    assert scale.args == {"state": {"weight": [32]}}
    assert (scale.flops, scale.flop_rule, scale.params) == (2 * 64 * 32, "elementwise", 32)
    assert scale.bytes == 4 * (2 * 2 * 64 * 32 + 32)  # input, output, weight
    assert result.spec.provenance["opaque"] == [
        "tests.harvest.models.Scale ×1 at scale: tests.harvest.models.Scale is not a torch.nn class"
    ]
    assert [t.op for t in result.traced] == ["tests.harvest.models.SquaredReLU"]  # no weights
    assert result.flops == mixed.flops  # the same cost, counted live
    with pytest.raises(Exception, match="opaque"):
        build_op(scale)


def test_training_mode_counts_backward_flops() -> None:
    result = harvest(MixedNet(), IMAGES, mode="training")
    assert result.spec.model.mode == "training"
    head = next(op for op in result.spec.operators if op.locations == ["head"])
    assert head.flops_backward == 2 * head.flops  # type: ignore[operator]
    rebuilt = [op for op in result.spec.operators if op.form != "opaque"]
    assert all(op.flops_backward is not None for op in rebuilt)
    assert result.flops_backward > result.flops
    assert_round_trip(result.spec)


def test_inference_specs_have_no_backward_flops(mixed: HarvestResult) -> None:
    assert {op.flops_backward for op in mixed.spec.operators} == {None}


def test_the_users_model_is_left_as_it_was() -> None:
    model = MixedNet().train()
    before = {n: p.clone() for n, p in model.named_parameters()}
    harvest(model, torch.randn(2, 3, 32, 32))
    assert model.training and all(m.training for m in model.modules())
    assert all(
        p.device.type == "cpu" and torch.equal(p, before[n]) for n, p in model.named_parameters()
    )
    assert not model._forward_hooks and not model.stem._forward_pre_hooks


def test_models_built_on_meta_and_keyword_inputs() -> None:
    with torch.device("meta"):
        model = MixedNet()
    result = harvest(model, {"images": torch.empty(2, 3, 32, 32, device="meta")}, name="m-b2")
    assert result.spec.model.name == "m-b2"
    assert result.spec.model.inputs == [TensorSpec(name="images", shape=[2, 3, 32, 32])]
    assert result.configurations == 25


def test_dtype_changes_weights_and_float_inputs() -> None:
    result = harvest(MixedNet(), IMAGES, dtype=torch.bfloat16)
    assert result.spec.model.dtype == "bfloat16"
    assert result.spec.model.inputs[0].dtype == "bfloat16"
    conv = result.spec.operators[0]
    assert (conv.dtype, conv.inputs[0].dtype) == ("bfloat16", "bfloat16")
    assert conv.bytes == 2 * (2 * 3 * 32 * 32 + 32 * 3 * 16 + 32 + 2 * 32 * 8 * 8)


def test_references_get_their_name_and_are_recorded() -> None:
    result = harvest("module:tests.harvest.models:mixed", [IMAGES], overrides={"blocks": 1})
    assert result.spec.model.name == "mixed-b2"
    assert result.spec.model.reference == "module:tests.harvest.models:mixed"
    assert result.spec.model.overrides == {"blocks": 1}
    assert result.spec.provenance["reference"] == "module:tests.harvest.models:mixed"
    assert result.spec.provenance["device"] == "meta"


def test_written_specs_load_back_with_their_keys(mixed: HarvestResult, tmp_path: Path) -> None:
    path = mixed.write(tmp_path / "mixed.yaml")
    loaded = load_spec(path, max_bytes=10**7)
    assert [op.model_copy(update={"key": None}) for op in loaded.spec.operators] == (
        mixed.spec.operators
    )
    assert list(loaded.keys) == [operator_key(op, "inference") for op in mixed.spec.operators]
    assert "key: " in path.read_text()


def test_a_model_that_needs_data_runs_on_the_cpu_and_says_so() -> None:
    result = harvest(DataDependent(), torch.randn(3, 8))
    assert result.device == "cpu"
    assert result.fallback == (
        "needs data on the meta device: RuntimeError: Tensor.item() cannot "
        "be called on meta tensors"
    )
    assert result.spec.provenance["device"] == "cpu"
    assert [op.op for op in result.spec.operators] == [
        "torch.nn.Linear",
        "torch.Tensor.sum",
        "torch.Tensor.gt",
        "torch.relu",
    ]
    assert_round_trip(result.spec)


def test_a_referenced_model_that_needs_data_is_rebuilt_on_the_cpu() -> None:
    result = harvest("module:tests.harvest.models:data_dependent", TensorSpec(shape=[3, 8]))
    assert result.device == "cpu" and result.fallback is not None


def test_meta_only_refuses_to_fall_back() -> None:
    with pytest.raises(HarvestError) as info:
        harvest(DataDependent(), torch.randn(3, 8), device="meta")
    assert str(info.value) == (
        "the model raised RuntimeError: Tensor.item() cannot be called on "
        "meta tensors (device='auto' runs it on the CPU)"
    )


def test_a_meta_model_without_a_reference_cannot_fall_back() -> None:
    with torch.device("meta"):
        model = DataDependent()
    with pytest.raises(
        HarvestError, match="has no weights .* pass a model built on the CPU, or a reference"
    ):
        harvest(model, torch.randn(3, 8))


def test_models_that_raise_are_one_line_errors() -> None:
    with pytest.raises(HarvestError) as info:
        harvest(Raising(), torch.randn(2, 4))
    assert str(info.value) == "the model raised ValueError: this model is broken"


def test_bad_input_shapes_are_one_line_errors() -> None:
    with pytest.raises(HarvestError) as info:
        harvest(MixedNet(), TensorSpec(shape=[2, 4, 32, 32]))
    message = str(info.value)
    assert message.startswith("the model raised RuntimeError: ")
    assert "channel" in message and "\n" not in message


def test_missing_inputs_and_wrong_arguments() -> None:
    with pytest.raises(HarvestError, match="no example inputs"):
        harvest(MixedNet())
    with pytest.raises(HarvestError, match="overrides apply to a model reference"):
        harvest(MixedNet(), IMAGES, overrides={"blocks": 1})
    with pytest.raises(HarvestError, match="no example inputs"):
        harvest("module:tests.harvest.models:mixed")  # no default inputs for a factory
    with pytest.raises(HarvestError, match="expected a torch.nn.Module or a reference, got int"):
        harvest(3, IMAGES)  # type: ignore[arg-type]


def test_calls_a_spec_cannot_describe_are_listed_with_where_and_why() -> None:
    class Empty(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, x.new_zeros(0)]) * 2

    result = harvest(Empty(), TensorSpec(shape=[4]))
    assert [op.op for op in result.spec.operators] == ["torch.Tensor.mul"]
    empty = "tensor [0]:float32 is empty (a spec's dimensions are positive)"
    assert result.skipped == [
        SkippedCall("torch.Tensor.new_zeros", [""], 1, f"output {empty}"),
        SkippedCall("torch.cat", [""], 1, f"input {empty}"),
    ]
    assert result.warnings == []
    assert result.spec.provenance["skipped"] == [
        f"torch.Tensor.new_zeros ×1 at (model): output {empty}",
        f"torch.cat ×1 at (model): input {empty}",
    ]


def test_calls_outside_the_allow_list_are_opaque_with_their_cost() -> None:
    class Aten(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.aten.mm(x, x)

    result = harvest(Aten(), TensorSpec(shape=[4, 4]))
    (op,) = result.spec.operators
    assert (op.op, op.form, op.flops, op.flop_rule) == (
        "torch.ops.aten.mm",
        "opaque",
        2 * 4 * 4 * 4,
        "matmul",
    )
    assert result.opaque == [
        OpaqueOp("torch.ops.aten.mm", [""], 1, "not an allowed torch function")
    ]


def test_a_custom_leaf_that_cannot_be_traced_is_opaque_with_the_reason() -> None:
    result = harvest(Untraceable(), TensorSpec(shape=[4, 8]))
    assert [(op.op, op.form, op.locations) for op in result.spec.operators] == [
        ("torch.nn.Linear", "module", ["first", "last"]),
        ("tests.harvest.models.AtenScale", "opaque", ["odd"]),
    ]
    reason = (
        "tests.harvest.models.AtenScale is not a torch.nn class; tracing it failed: "
        "torch.ops.aten.mm is opaque (not an allowed torch function)"
    )
    assert result.opaque == [OpaqueOp("tests.harvest.models.AtenScale", ["odd"], 1, reason)]
    assert result.traced == []  # its calls are not in the spec
    odd = result.spec.operators[1]
    # Counted live; FlopCounterMode counted the mm, so its count alone is the FLOPs (as for any op).
    assert (odd.flops, odd.flop_rule, odd.params) == (2 * 4 * 8 * 8, "matmul", 64)
    assert odd.args == {"state": {"weight": [8, 8]}}
    assert result.spec.provenance["opaque"] == [
        f"tests.harvest.models.AtenScale ×1 at odd: {reason}"
    ]


def test_a_torch_nn_leaf_called_with_arguments_a_spec_cannot_hold_is_traced() -> None:
    class Odd(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ident = nn.Identity()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.ident({1: x})[1])  # a mapping with an int key has no JSON form

    result = harvest(Odd(), TensorSpec(shape=[2, 4]))
    assert result.opaque == []
    ((op, locations, count, reason),) = [
        (t.op, t.locations, t.count, t.reason) for t in result.traced
    ]
    assert (op, locations, count) == ("torch.nn.modules.linear.Identity", ["ident"], 1)
    assert reason == "call arguments: a mapping argument has non-string keys"
    opaque = harvest(Odd(), TensorSpec(shape=[2, 4]), custom_leaves="opaque")
    assert [o.op for o in opaque.opaque] == ["torch.nn.modules.linear.Identity"]


def test_long_lists_stay_within_the_provenance_limit() -> None:
    """Hundreds of distinct traced, opaque and skipped calls: each list is cut, the spec valid."""

    def leaf(i: int, body: str) -> nn.Module:
        forward = {
            "traced": lambda self, x: x * 2,
            "opaque": lambda self, x: torch.ops.aten.mul(x, 2),  # tracing it fails
        }[body]
        cls = type(f"{body.title()}Leaf{i}_" + "x" * 200, (nn.Module,), {"forward": forward})
        return cls()  # type: ignore[no-any-return]

    class Many(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.leaves = nn.ModuleList(
                leaf(i, body) for i in range(120) for body in ("traced", "opaque")
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for i, module in enumerate(self.leaves):
                x = module(x)
                x.new_zeros(i + 1, 0)  # an empty tensor of another shape each time: skipped
            return x

    result = harvest(Many(), TensorSpec(shape=[4]))
    assert (len(result.traced), len(result.opaque), len(result.skipped)) == (120, 120, 240)
    for key in ("traced", "opaque", "skipped"):
        lines = result.spec.provenance[key]
        assert isinstance(lines, list) and len(lines) == 41
        assert lines[-1] == f"and {len(getattr(result, key)) - 40} more"


def test_the_spec_keeps_the_order_of_the_calls() -> None:
    """``calls`` lists the model's calls in order as operator indices; a shared one repeats."""
    result = harvest(
        "module:operator_db.examples:mlp?hidden=[64,64]", torch.empty(4, 784, device="meta")
    )
    ops = result.spec.operators
    assert [op.op.rsplit(".", 1)[1] for op in ops] == ["Linear", "ReLU", "Linear", "Linear"]
    assert result.spec.calls == [0, 1, 2, 1, 3]
    # The order is content: the same model harvested again gives the same spec.
    again = harvest(
        "module:operator_db.examples:mlp?hidden=[64,64]", torch.empty(4, 784, device="meta")
    )
    assert again.spec.calls == result.spec.calls


def test_calls_of_a_traced_leaf_come_in_the_order_they_ran() -> None:
    """A custom leaf traced into its functional calls puts them in order where it ran."""
    result = harvest("transformers:GPT2Model", name="gpt2", overrides={"n_layer": 1})
    ops = result.spec.operators
    named = [ops[i].op.rsplit(".", 1)[-1] for i in result.spec.calls or []]
    assert len(named) == sum(op.count for op in ops)
    # Each traced Conv1D is a view, an addmm and a view, right after the layer norm it reads.
    first_norm = named.index("LayerNorm")
    assert named[first_norm + 1 : first_norm + 4] == ["view", "addmm", "view"]


class _Synchronizing(torch.nn.Module):
    """A Linear, a branch on the data (``if (y > 0).any():``), ``.item()``, another Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        if (y > 0).any():
            y = y + 1
        scale = float(y.sum().item())
        return self.b(y) * (1.0 if scale else 2.0)


def test_calls_that_make_the_host_wait_are_marked_in_the_order() -> None:
    """``syncs`` holds the positions in ``calls`` before which the host waited for the device:
    the branch on ``any()`` (``__bool__``) and ``.item()``; the model needs data (CPU)."""
    result = harvest(_Synchronizing(), torch.randn(2, 8))
    ops = result.spec.operators
    named = [ops[i].op.rsplit(".", 1)[-1] for i in result.spec.calls or []]
    assert named == ["Linear", "gt", "any", "add", "sum", "Linear", "mul"]
    assert result.spec.syncs == [3, 5]  # before the add (after any), before b (after item)
    assert result.device == "cpu"
    assert result.spec.model.name == "synchronizing-b2"  # from the class name, made valid
    # A model that never waits has no syncs.
    plain = harvest(
        "module:operator_db.examples:mlp?hidden=[64,64]", torch.empty(4, 784, device="meta")
    )
    assert plain.spec.syncs is None
