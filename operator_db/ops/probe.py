"""Every tensor an operator configuration creates, found on the meta device (nothing is allocated).

The admission (``ops/admission.py``) bounds the tensors a spec *writes*; a call may create larger
ones from its arguments alone (``torch.empty(100000, 1000000)``, ``Tensor.repeat(x, 10**11)``,
``Tensor.expand``, ``F.interpolate(size=...)``). :func:`largest_created` builds the configuration
as the worker does (``ops/build.py``) on PyTorch's meta device, whose tensors carry a shape and no
storage, runs it once, and reports the largest tensor any aten op produced, intermediates
included. Every aten op that names a device is sent to the meta device, so a call that asks for
``device="cpu"`` allocates nothing either. Where the meta run fails (a data-dependent shape such as
``nonzero`` or a boolean index, ``.item()``, an op without a meta kernel, an argument torch
refuses), the sizes written in the call's arguments are bounded instead
(:func:`largest_argument_size`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import JsonValue
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from operator_db.ops.build import build_op, first_line
from operator_db.specs.schema import OperatorSpec


@dataclass(frozen=True)
class Created:
    """The largest tensor one meta run of a configuration created, or why the run failed."""

    numel: int
    """Elements of the largest tensor any op of the call produced (0 when the run failed)."""
    aten: str
    """The aten op that produced it (``aten.empty.memory_format``), empty when the run failed."""
    failure: str | None = None
    """``Type: first line`` of the exception where the meta run failed, else None."""


_META = torch.device("meta")


class _Largest(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Sends every dispatched op to the meta device; records the largest tensor one returns."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.numel = 0
        self.aten = ""

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        if kwargs.get("device") is not None:
            kwargs["device"] = _META
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.numel() > self.numel:
                self.numel, self.aten = t.numel(), str(func)
        return out


def largest_created(op: OperatorSpec) -> Created:
    """Build and run ``op`` once on the meta device; return the largest tensor created.

    Inputs, a module's parameters and the call's outputs and intermediates all count. Never
    raises for what the call does: a failed run is returned with its ``failure``.
    """
    return _largest_created(op.model_dump_json(exclude={"count", "locations", "key"}))


@functools.lru_cache(maxsize=4096)
def _largest_created(op_json: str) -> Created:
    op = OperatorSpec.model_validate_json(op_json)
    watch = _Largest()
    try:
        with _META, watch:
            build_op(op, device=_META).run()
    except Exception as exc:  # noqa: BLE001 - any op may raise anything; the caller falls back
        return Created(0, "", first_line(exc))
    return Created(watch.numel, watch.aten)


def largest_argument_size(args: list[JsonValue], kwargs: dict[str, JsonValue]) -> int:
    """Return the largest size a call's arguments write: a whole number, or a shape's product.

    Sizes are positive whole numbers (``1e11`` counts as one: YAML reads it as a float). A list of
    two or more of them is a shape (``[100000, 1000000]`` → 10¹¹), and so are the positional
    arguments' sizes together (``Tensor.view(x, 100000, 1000000)``). Tensor references, slices (an
    index's bounds, often ``sys.maxsize``) and other values count for nothing.
    """
    top = 0

    def visit(value: JsonValue) -> None:
        nonlocal top
        if isinstance(value, list):
            top = max(top, _shape_numel(value))
            for v in value:
                visit(v)
        elif isinstance(value, dict):
            if {"tensor", "strided", "slice"} & set(value):  # an input; an index's bounds
                return
            for v in value.values():
                visit(v)
        else:
            top = max(top, _size(value) or 0)

    visit([*args, *kwargs.values()])
    return max(top, _shape_numel([v for v in args if _size(v) is not None]))


def _size(value: JsonValue) -> int | None:
    """Return ``value`` as a size (a positive whole number), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    return int(value) if value > 0 else None


def _shape_numel(values: list[JsonValue]) -> int:
    """Return the product of ``values`` if they are two or more sizes, else 0."""
    sizes = [_size(v) for v in values]
    if len(sizes) < 2 or any(s is None for s in sizes):
        return 0
    return math.prod(s for s in sizes if s is not None)
