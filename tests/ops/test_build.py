from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from operator_db.ops import OperatorBuildError, UnknownOperatorError, build_op
from operator_db.specs import OperatorSpec


def op(**fields: Any) -> OperatorSpec:
    return OperatorSpec.model_validate(fields)


LINEAR = op(
    op="torch.nn.Linear",
    form="module",
    dtype="float32",
    args={"in_features": 16, "out_features": 8, "bias": True},
    inputs=[{"shape": [4, 16]}],
    outputs=[{"shape": [4, 8]}],
)


def test_a_module_is_rebuilt_from_its_arguments_with_inputs_allocated_once() -> None:
    built = build_op(LINEAR)
    assert isinstance(built.module, nn.Linear)
    assert (built.module.in_features, built.module.out_features) == (16, 8)
    assert [tuple(t.shape) for t in built.inputs] == [(4, 16)]
    first = built.run()
    assert first.shape == (4, 8)
    assert not first.requires_grad  # inference runs under no_grad
    pointer = built.inputs[0].data_ptr()
    built.run()
    assert built.inputs[0].data_ptr() == pointer  # the same inputs, reused
    assert "torch.nn.Linear(in_features=16, out_features=8, bias=True)" in built.describe()


def test_inputs_are_seeded() -> None:
    a, b, c = build_op(LINEAR, seed=1), build_op(LINEAR, seed=1), build_op(LINEAR, seed=2)
    assert torch.equal(a.inputs[0], b.inputs[0])
    assert not torch.equal(a.inputs[0], c.inputs[0])


def test_dtype_replaces_floating_inputs_and_parameters_only() -> None:
    spec = op(
        op="torch.nn.Embedding",
        form="module",
        dtype="float32",
        args={"num_embeddings": 10, "embedding_dim": 4},
        inputs=[{"shape": [2, 3], "dtype": "int64"}],
    )
    built = build_op(spec, dtype=torch.bfloat16)
    assert built.inputs[0].dtype == torch.int64
    assert built.module is not None and built.module.weight.dtype == torch.bfloat16
    assert built.run().dtype == torch.bfloat16


def test_embedding_indices_stay_below_num_embeddings_without_a_range() -> None:
    spec = op(
        op="torch.nn.Embedding",
        form="module",
        dtype="float32",
        args={"num_embeddings": 7, "embedding_dim": 4},
        inputs=[{"shape": [64, 64], "dtype": "int64"}],
    )
    built = build_op(spec)
    assert int(built.inputs[0].max()) == 6 and int(built.inputs[0].min()) == 0


def test_integer_inputs_are_drawn_in_their_value_range() -> None:
    spec = op(
        op="torch.Tensor.add",
        form="function",
        inputs=[{"shape": [1000], "dtype": "int32", "value_range": [5, 9]}],
        call={"args": [{"tensor": 0}, 1]},
    )
    values = build_op(spec).inputs[0]
    assert values.dtype == torch.int32
    assert set(values.unique().tolist()) == {5, 6, 7, 8}


def test_integer_index_without_range_is_valid_for_the_indexed_operand() -> None:
    spec = op(
        op="torch.nn.functional.embedding",
        form="function",
        inputs=[{"shape": [4, 5], "dtype": "int64"}, {"shape": [3, 8]}],
    )
    built = build_op(spec)
    assert int(built.inputs[0].max()) < 3
    assert built.run().shape == (4, 5, 8)


def test_integer_indices_of_a_boolean_mask_are_valid() -> None:
    # Bart's decoder indexes its [1, 8] causal mask with two int64 index tensors.
    spec = op(
        op="torch.Tensor.__getitem__",
        form="function",
        inputs=[
            {"shape": [1, 8], "dtype": "bool"},
            {"shape": [1, 1, 1, 1], "dtype": "int64"},
            {"shape": [1, 1, 1, 8], "dtype": "int64"},
        ],
        call={"args": [{"tensor": 0}, [{"tensor": 1}, {"tensor": 2}]]},
    )
    assert build_op(spec).run().shape == (1, 1, 1, 8)


def test_function_with_strided_input_keeps_its_layout() -> None:
    spec = op(
        op="torch.Tensor.contiguous",
        form="function",
        inputs=[{"shape": [4, 6]}],
        call={"args": [{"strided": {"tensor": 0}, "stride": [1, 4]}]},
    )
    built = build_op(spec)
    assert built.inputs[0].stride() == (1, 4)
    assert not built.inputs[0].is_contiguous()
    out = built.run()
    assert out.is_contiguous() and torch.equal(out, built.inputs[0])


def test_expanded_input_with_zero_stride() -> None:
    spec = op(
        op="torch.Tensor.sum",
        form="function",
        inputs=[{"shape": [8, 5]}],
        call={"args": [{"strided": {"tensor": 0}, "stride": [0, 1]}, -1]},
    )
    built = build_op(spec)
    assert built.inputs[0].stride() == (0, 1)
    assert built.run().shape == (8,)


def test_factory_functions_allocate_on_the_target_device() -> None:
    spec = op(
        op="torch.arange",
        form="function",
        call={"args": [5]},
        outputs=[{"shape": [5], "dtype": "int64"}],
    )
    assert build_op(spec, device="meta").run().device.type == "meta"
    assert torch.equal(build_op(spec).run(), torch.arange(5))


def test_device_arguments_decode_to_the_target_device() -> None:
    spec = op(
        op="torch.zeros",
        form="function",
        call={"args": [2, 3], "kwargs": {"device": {"device": "target"}}},
    )
    assert build_op(spec, device="meta").run().device.type == "meta"


def test_training_runs_forward_and_backward_without_accumulating_grads() -> None:
    built = build_op(LINEAR, mode="training")
    assert built.module is not None and built.module.training
    assert built.inputs[0].requires_grad
    assert len(built.grad_targets) == 3  # input, weight, bias
    assert [tuple(g.shape) for g in built.grad_outputs] == [(4, 8)]
    out = built.run()
    assert out.shape == (4, 8) and out.requires_grad
    assert built.module.weight.grad is None  # torch.autograd.grad, not .backward()


def test_in_place_ops_in_training_work_on_a_fresh_clone() -> None:
    spec = op(
        op="torch.Tensor.add_", form="function", inputs=[{"shape": [3, 3]}, {"shape": [3, 3]}]
    )
    built = build_op(spec, mode="training")
    assert built.cloned_inputs == (0,)
    before = built.inputs[0].detach().clone()
    built.run()
    built.run()
    assert torch.equal(built.inputs[0].detach(), before)


def test_in_place_modules_in_inference_reuse_their_inputs() -> None:
    spec = op(op="torch.nn.ReLU", form="module", args={"inplace": True}, inputs=[{"shape": [10]}])
    built = build_op(spec)
    out = built.run()
    assert out.data_ptr() == built.inputs[0].data_ptr()
    assert bool((built.inputs[0] >= 0).all())


def test_opaque_and_unknown_ops_are_refused_in_one_line() -> None:
    with pytest.raises(UnknownOperatorError, match="opaque"):
        build_op(op(op="mypkg.Block", form="opaque"))
    with pytest.raises(UnknownOperatorError, match="not an allowed operator"):
        build_op(op(op="os.system", form="function", call={"args": ["echo hi"]}))
    with pytest.raises(UnknownOperatorError, match="not a torch.nn class"):
        build_op(op(op="mypkg.Block", form="module"))


def test_bad_constructor_arguments_are_one_line_errors() -> None:
    spec = op(
        op="torch.nn.Linear",
        form="module",
        args={"in_features": 3, "colour": "red"},
        inputs=[{"shape": [1, 3]}],
    )
    with pytest.raises(OperatorBuildError) as info:
        build_op(spec)
    message = str(info.value)
    assert message.startswith("cannot build torch.nn.Linear: TypeError:")
    assert "\n" not in message


def test_constructor_arguments_cannot_refer_to_tensors() -> None:
    spec = op(
        op="torch.nn.Linear",
        form="module",
        args={"in_features": {"tensor": 0}},
        inputs=[{"shape": [1, 3]}],
    )
    with pytest.raises(OperatorBuildError, match="cannot refer to tensors"):
        build_op(spec)
