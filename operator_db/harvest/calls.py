"""Describe one call for a spec: its tensors numbered, its arguments encoded, or why it cannot be.

What cannot be written in a spec (a tensor with a dimension of size 0, a dtype the format does not
know) raises :class:`Undescribable` with a one-line reason naming the tensor; the recorder lists
such calls with their location instead of dropping them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from pydantic import JsonValue, ValidationError
from torch import nn
from torch.utils._pytree import tree_flatten

from operator_db.ops.encoding import dtype_name, encode_value
from operator_db.specs.schema import CallSpec, OperatorSpec, TensorSpec

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class Undescribable(Exception):  # noqa: N818 - a reason, not an error: the call is listed
    """A call a spec cannot describe; the message says which tensor and why (one line)."""


def tensor_spec(t: torch.Tensor, role: str = "input") -> TensorSpec:
    """Return the spec of a tensor's shape and dtype; ``role`` names it in a refusal.

    Raises:
        Undescribable: a dimension of size 0, or a dtype or size the format does not hold.
    """
    try:
        return TensorSpec(shape=list(t.shape), dtype=dtype_name(t.dtype))  # type: ignore[arg-type]
    except ValidationError as exc:
        what = f"{role} tensor {list(t.shape)}:{dtype_name(t.dtype)}"
        if 0 in t.shape:
            raise Undescribable(f"{what} is empty (a spec's dimensions are positive)") from None
        problem = exc.errors()[0]["msg"] if exc.errors() else "invalid"
        raise Undescribable(f"{what} cannot be described: {problem}") from None


class TensorNumbering:
    """Numbers the tensors of one call in order of appearance (the same tensor once)."""

    def __init__(self) -> None:
        self.inputs: list[TensorSpec] = []
        self._index: dict[int, int] = {}

    def __call__(self, t: torch.Tensor) -> JsonValue:
        """Return the JSON reference to ``t`` (numbering it if new)."""
        i = self._index.get(id(t))
        if i is None:
            i = len(self.inputs)
            self.inputs.append(tensor_spec(t))
            self._index[id(t)] = i
        if not t.is_contiguous():  # a transposed or sliced view: its layout changes the cost
            return {"strided": {"tensor": i}, "stride": list(t.stride())}
        return {"tensor": i}


def output_specs(value: Any) -> list[TensorSpec]:
    """Return the specs of the tensors in a (nested) output, flattened.

    Raises:
        Undescribable: an output tensor a spec cannot describe.
    """
    return [tensor_spec(t, "output") for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def tensor_inputs(args: Any, kwargs: Any) -> list[TensorSpec]:
    """Return the specs of every tensor among a call's arguments, in order.

    Raises:
        Undescribable: an input tensor a spec cannot describe.
    """
    return [tensor_spec(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]


def has_tensor(value: Any) -> bool:
    """Whether a (nested) value holds a tensor."""
    return any(isinstance(t, torch.Tensor) for t in tree_flatten(value)[0])


def encode_call(
    args: Sequence[Any], kwargs: Mapping[str, Any], *, index_arg: bool = False
) -> tuple[list[TensorSpec], CallSpec | None]:
    """Encode a call's arguments; None for the call when they are the inputs, in order.

    Raises:
        EncodingError: an argument has no JSON form.
        Undescribable: a tensor argument a spec cannot describe.
    """
    numbering = TensorNumbering()
    enc_args = [encode_value(a, numbering, index=index_arg and i == 1) for i, a in enumerate(args)]
    enc_kwargs = {k: encode_value(v, numbering) for k, v in kwargs.items()}
    plain = [{"tensor": i} for i in range(len(numbering.inputs))]
    if not enc_kwargs and enc_args == plain:
        return numbering.inputs, None
    return numbering.inputs, CallSpec(args=enc_args, kwargs=enc_kwargs)


def opaque_name(text: str) -> str:
    """Return ``text`` as a dotted name the spec format accepts (for opaque ops)."""
    cleaned = text.replace("<", "").replace(">", "")
    parts = [re.sub(r"\W", "_", p) or "_" for p in cleaned.split(".")]
    return ".".join(p if not p[0].isdigit() else "_" + p for p in parts)[:300]


def call_label(func: Callable[..., Any], name: str | None) -> str:
    """Return what the user's code called: its name, ``torch.ops.…``, or module.qualname."""
    if isinstance(func, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return f"torch.ops.{func}"  # torch.ops.aten.mm: what the user's code called
    return name or (
        f"{getattr(func, '__module__', None) or 'unknown'}."
        f"{getattr(func, '__qualname__', None) or 'function'}"
    )


def describe_args(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """Return a short text of a call's arguments (tensors as ``tensor``), for an opaque op."""

    def show(value: Any) -> str:
        if isinstance(value, torch.Tensor):
            return "tensor"
        return _ADDRESS.sub("", repr(value))[:80]

    parts = [show(a) for a in args] + [f"{k}={show(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)[:500]


def operator_spec(**fields: Any) -> OperatorSpec:
    """Return an operator spec, or say why the format cannot hold it.

    Raises:
        Undescribable: a field outside the format's limits (more than 64 inputs, ...).
    """
    try:
        return OperatorSpec(**fields)
    except ValidationError as exc:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid"}
        where = ".".join(str(p) for p in first["loc"]) or "spec"
        raise Undescribable(f"cannot be described: {where}: {first['msg']}") from None


def class_name(module: nn.Module) -> str:
    """Return a module's class as ``module.QualifiedName``."""
    cls = type(module)
    return f"{cls.__module__}.{cls.__qualname__}"


SYNCHRONIZING = frozenset(
    {
        *(
            f"torch.Tensor.{m}"
            for m in (
                "item",
                "tolist",
                "numpy",
                "cpu",
                "__bool__",
                "__int__",
                "__float__",
                "__index__",
                "nonzero",
                "masked_select",
                "unique",
                "unique_consecutive",
            )
        ),
        "torch.nonzero",
        "torch.masked_select",
        "torch.unique",
        "torch.unique_consecutive",
        "torch.equal",
        "torch.argwhere",
    }
)
"""Calls that make the host wait for the device: they bring values to the host (``.item()``,
``if mask.any():``) or size an output by its data (``nonzero``)."""


def synchronizes(func: Callable[..., Any], name: str | None) -> bool:
    """Whether a call makes the host wait for the device (``SYNCHRONIZING``).

    ``.item()`` and ``__bool__`` are not operators (``function_name`` gives None): their tensor
    method's qualified name (``TensorBase.item``) says what they are.
    """
    if name is None:
        owner, _, method = str(getattr(func, "__qualname__", "")).partition(".")
        name = f"torch.Tensor.{method}" if owner in ("TensorBase", "Tensor") else None
    return name in SYNCHRONIZING
