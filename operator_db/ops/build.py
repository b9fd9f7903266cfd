"""A spec's operator configuration → a runnable op with freshly allocated inputs on a device.

This is what the worker measures: :func:`build_op` once, then :meth:`BuiltOp.run` many times on the
same pre-allocated inputs ("reused input maps", METHODOLOGY §3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from operator_db.errors import OperatorDBError
from operator_db.ops.encoding import (
    EncodingError,
    decode_value,
    dtype_from_name,
    dtype_name,
    input_strides,
)
from operator_db.ops.late import local_args
from operator_db.ops.resolve import UnknownOperatorError, resolve_function, resolve_module
from operator_db.specs.schema import Mode, OperatorSpec, TensorSpec


class OperatorBuildError(OperatorDBError):
    """An operator configuration could not be built or run."""


def first_line(exc: BaseException) -> str:
    """Return ``Type: first line of the message`` (at most 300 characters of it) for a user."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else ""
    line = line if len(line) <= 300 else line[:297] + "..."
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def storage_numel(shape: list[int], stride: list[int]) -> int:
    """Return how many elements a storage needs to hold a view of ``shape`` and ``stride``."""
    return 1 + sum((size - 1) * step for size, step in zip(shape, stride, strict=True))


def int_high(op: OperatorSpec, index: int, module: nn.Module | None) -> int:
    """Upper bound (exclusive) for an integer input without a ``value_range``.

    An Embedding's indices must be below ``num_embeddings``. For other ops the integer input is
    usually an index into another operand, so the values stay below the smallest dimension of the
    op's floating-point (or boolean: a mask indexed) tensors: always a valid index, if a less
    spread one. With nothing to index, values are 0 or 1 (masks, token types).
    """
    num_embeddings = getattr(module, "num_embeddings", None)
    if isinstance(num_embeddings, int):
        return max(1, num_embeddings)
    dims = [
        d
        for i, t in enumerate(op.inputs)
        if i != index and (_is_floating(t.dtype) or t.dtype == "bool")
        for d in t.shape
    ]
    if module is not None:
        dims += [d for p in module.parameters() for d in p.shape]
    return max(1, min(dims)) if dims else 2


def _is_floating(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat", "complex"))


def allocate(
    spec: TensorSpec,
    *,
    device: torch.device,
    dtype: torch.dtype | None = None,
    stride: list[int] | None = None,
    high: int = 2,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Allocate one input: normal values for floating types, integers in ``value_range``.

    ``dtype`` replaces a floating-point spec dtype (integer and boolean inputs keep theirs);
    ``stride`` makes a non-contiguous view over a storage just large enough; integers without a
    ``value_range`` are drawn from ``[0, high)``. On the meta device nothing is drawn.
    """
    target = dtype_from_name(spec.dtype)
    if dtype is not None and target.is_floating_point:
        target = dtype
    # A strided input is a view over a flat storage just large enough for it.
    shape = [storage_numel(spec.shape, stride)] if stride is not None else list(spec.shape)
    if device.type == "meta":
        values = torch.empty(shape, dtype=target, device=device)
    elif target.is_floating_point or target.is_complex:
        draw = target if target in _DRAWABLE else torch.float32
        values = torch.randn(shape, generator=generator, device=device, dtype=draw).to(target)
    else:
        low, top = spec.value_range if spec.value_range is not None else (0, high)
        if target == torch.bool:
            low, top = 0, 2
        values = torch.randint(
            low, top, shape, generator=generator, device=device, dtype=torch.int64
        ).to(target)
    if stride is not None:
        return values.as_strided(spec.shape, stride)
    return values


_DRAWABLE = frozenset(
    {torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.complex128}
)
"""Dtypes ``torch.randn`` draws directly; others (float8) are drawn in float32 and converted."""


def _decode_call(
    op: OperatorSpec, tensors: list[torch.Tensor], device: torch.device
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if op.call is None:
        return tuple(tensors), {}

    def tensor(i: int) -> torch.Tensor:
        return tensors[i]

    args = tuple(decode_value(v, tensor, device) for v in op.call.args)
    kwargs = {k: decode_value(v, tensor, device) for k, v in op.call.kwargs.items()}
    return args, kwargs


def _module_dtype(module: nn.Module) -> torch.dtype | None:
    for t in (*module.parameters(), *module.buffers()):
        if t.is_floating_point():
            return t.dtype
    return None


def _flat_tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


@dataclass
class BuiltOp:
    """An operator ready to run: the callable, its module (if any) and its allocated inputs."""

    spec: OperatorSpec
    mode: Mode
    device: torch.device
    dtype: torch.dtype | None
    module: nn.Module | None
    inputs: list[torch.Tensor]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    fn: Callable[..., Any]
    grad_targets: list[torch.Tensor] = field(default_factory=list)
    """Inputs and parameters whose gradients one training step computes."""
    grad_outputs: list[torch.Tensor] = field(default_factory=list)
    """Pre-allocated gradients of the outputs that require grad (training)."""
    cloned_inputs: tuple[int, ...] = ()
    """Inputs the op writes in place; in training mode each run works on a fresh clone of them."""

    def forward(self) -> Any:
        """Call the op once on the pre-allocated inputs (autograd as the caller's context sets)."""
        if self.cloned_inputs:
            tensors = list(self.inputs)
            for i in self.cloned_inputs:
                tensors[i] = tensors[i].clone()
            args, kwargs = _decode_call(self.spec, tensors, self.device)
            return self.fn(*args, **kwargs)
        return self.fn(*self.args, **self.kwargs)

    def run(self) -> Any:
        """Run one call: the forward pass in inference mode; forward and backward in training.

        In training mode the backward pass computes the gradients of every floating-point input
        and parameter with ``torch.autograd.grad`` against pre-allocated output gradients, so no
        ``.grad`` accumulates between runs. Returns the forward output.
        """
        if self.mode == "inference":
            if torch.is_grad_enabled():
                # Called on its own: no autograd graph for an inference op. The measurement runs
                # its loops under one no_grad instead of entering one per call (~1 µs each).
                with torch.no_grad():
                    return self.forward()
            return self.forward()
        out = self.forward()
        outputs = [t for t in _flat_tensors(out) if t.requires_grad]
        if outputs and self.grad_targets:
            torch.autograd.grad(
                outputs, self.grad_targets, self.grad_outputs[: len(outputs)], allow_unused=True
            )
        return out

    def describe(self) -> str:
        """Return a one-line description: op, constructor arguments, inputs → outputs."""
        args = ", ".join(f"{k}={v}" for k, v in self.spec.args.items())
        ins = ", ".join(
            f"{list(t.shape)}:{str(t.dtype).removeprefix('torch.')}" for t in self.inputs
        )
        outs = ", ".join(f"{t.shape}:{t.dtype}" for t in self.spec.outputs)
        return f"{self.spec.op}({args}) [{self.mode}, {self.device}] on {ins or 'nothing'} → {outs}"


def build_op(
    op: OperatorSpec,
    *,
    mode: Mode = "inference",
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
    seed: int = 0,
) -> BuiltOp:
    """Build ``op`` on ``device``: construct its module or resolve its function, allocate inputs.

    ``dtype`` replaces the floating-point dtype of the inputs and of the module's parameters (None
    keeps the spec's). Inputs are drawn from a generator seeded with ``seed``. In training mode the
    module is in ``train()`` mode, every floating-point input and parameter requires grad, and the
    op is run once here to allocate the output gradients and find inputs it writes in place.

    Raises:
        UnknownOperatorError: the op is opaque, unknown, or outside the allowed namespaces.
        OperatorBuildError: the module cannot be constructed or its arguments decoded.
    """
    dev = torch.device(device)
    if op.form == "opaque":
        raise UnknownOperatorError(f"operator {op.op!r} is opaque: it was recorded, not rebuilt")
    module: nn.Module | None = None
    try:
        if op.form == "module":
            cls = resolve_module(op.op)
            ctor_args = local_args(op.op, dict(op.args))
            ctor = {k: decode_value(v, _no_tensor, dev) for k, v in ctor_args.items()}
            with torch.device(dev):
                module = cls(**ctor)
            target = dtype or (dtype_from_name(op.dtype) if op.dtype else None)
            if target is not None and _module_dtype(module) is not None:
                module = module.to(dtype=target)
            module.train(mode == "training")
            fn: Callable[..., Any] = module
        else:
            fn = resolve_function(op.op)
            if not op.inputs:  # a factory (torch.arange(n)) allocates on the default device
                fn = _on_device(fn, dev)
    except (UnknownOperatorError, OperatorBuildError):
        raise
    except EncodingError as exc:
        raise OperatorBuildError(f"cannot build {op.op}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a constructor may raise anything; one line for the user
        raise OperatorBuildError(f"cannot build {op.op}: {first_line(exc)}") from None
    try:
        strides = input_strides(op.call.model_dump(mode="json")) if op.call else {}
    except EncodingError as exc:
        raise OperatorBuildError(f"cannot build {op.op}: {exc}") from None
    generator = None
    if dev.type != "meta":
        generator = torch.Generator(device=dev)
        generator.manual_seed(seed)
    inputs = [
        allocate(
            t,
            device=dev,
            dtype=dtype,
            stride=strides.get(i),
            high=int_high(op, i, module),
            generator=generator,
        )
        for i, t in enumerate(op.inputs)
    ]
    try:
        args, kwargs = _decode_call(op, inputs, dev)
    except EncodingError as exc:
        raise OperatorBuildError(f"cannot build {op.op}: {exc}") from None
    built = BuiltOp(op, mode, dev, dtype, module, inputs, args, kwargs, fn)
    if mode == "training":
        _prepare_training(built)
    return built


def _on_device(fn: Callable[..., Any], device: torch.device) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        with device:
            return fn(*args, **kwargs)

    return call


def _no_tensor(i: int) -> torch.Tensor:
    raise EncodingError("constructor arguments cannot refer to tensors")


def _prepare_training(built: BuiltOp) -> None:
    """Find in-place writes, mark what requires grad, allocate output gradients (one trial run)."""
    versions = [t._version for t in built.inputs]
    try:
        with torch.no_grad():
            built.forward()
    except Exception as exc:  # noqa: BLE001 - an op may raise anything; one line for the user
        raise OperatorBuildError(f"cannot run {built.spec.op}: {first_line(exc)}") from None
    built.cloned_inputs = tuple(
        i
        for i, (t, v) in enumerate(zip(built.inputs, versions, strict=True))
        if t._version != v and (t.is_floating_point() or t.is_complex())
    )
    targets: list[torch.Tensor] = []
    inputs: list[torch.Tensor] = []
    for t in built.inputs:
        if not (t.is_floating_point() or t.is_complex()):
            inputs.append(t)
            continue
        if t._base is None:
            targets.append(t.requires_grad_(True))
            inputs.append(t)
        else:  # a strided view: its flat storage is the leaf, the view is taken again from it
            base = t._base.requires_grad_(True)
            targets.append(base)
            inputs.append(base.as_strided(t.shape, t.stride()))
    if built.module is not None:
        targets += [p for p in built.module.parameters() if p.requires_grad]
    built.inputs = inputs
    built.grad_targets = targets
    built.args, built.kwargs = _decode_call(built.spec, inputs, built.device)
    try:
        out = built.forward()
    except Exception as exc:  # noqa: BLE001
        raise OperatorBuildError(f"cannot run {built.spec.op}: {first_line(exc)}") from None
    built.grad_outputs = [torch.ones_like(t) for t in _flat_tensors(out) if t.requires_grad]


def output_specs(value: Any) -> list[TensorSpec]:
    """Return the shapes and dtypes of the tensors in an op's output, in flattening order."""
    return [
        TensorSpec(shape=list(t.shape), dtype=dtype_name(t.dtype))  # type: ignore[arg-type]
        for t in _flat_tensors(value)
    ]
