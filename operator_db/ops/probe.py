"""Every tensor an operator configuration creates, found on the meta device (nothing is allocated).

The admission (``ops/admission.py``) bounds the tensors a spec *writes*; a call may create larger
ones from its arguments alone (``torch.empty(100000, 1000000)``, ``Tensor.repeat(x, 10**11)``,
``Tensor.expand``, ``F.interpolate(size=...)``). :func:`largest_created` builds the configuration
as the worker does (``ops/build.py``) on PyTorch's meta device, whose tensors carry a shape and no
storage, runs it once, and reports the largest tensor any aten op produced (elements and bytes),
intermediates included, and the call's FLOPs (``ops/flops.py``). Every aten op that names a device
is sent to the meta device, so a call that asks for ``device="cpu"`` allocates nothing either.

Sizes that follow the values of a tensor (``repeat_interleave`` of counts, ``bincount``,
``one_hot(num_classes=-1)``, ``arange`` of a 0-dim tensor, ``nonzero``, ``masked_select`` inside
``combinations``) are bounded by the values the worker would draw (``ops/build.py``'s
``allocate``: a spec's ``value_range``, else ``[0, high)``), taken at their worst: ``.item()`` of
a spec's input (or of a max, a view, a copy of one) is the top of its range, and each such op
returns a tensor of the largest size those values allow. A value no range bounds (``.item()`` of
a sum) makes the run fail as ``unbounded``, which the admission refuses. Where the meta run fails
otherwise (an op without a meta kernel, an argument torch refuses), the sizes written in the
call's arguments are bounded instead (:func:`largest_argument_size`).
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

from operator_db.ops.build import BuiltOp, build_op, first_line, int_high
from operator_db.ops.flops import FlopTally
from operator_db.specs.schema import OperatorSpec


@dataclass(frozen=True)
class Created:
    """The largest tensor one meta run of a configuration created, or why the run failed."""

    numel: int
    """Elements of the largest tensor any op of the call produced (so far, where it failed)."""
    aten: str
    """The aten op that produced it (``aten.empty.memory_format``), empty if none ran."""
    failure: str | None = None
    """``Type: first line`` of the exception where the meta run failed, else None."""
    nbytes: int = 0
    """Bytes of the largest tensor (by bytes) any op produced."""
    flops: int = 0
    """FLOPs of the call (forward), where the run completed."""
    unbounded: bool = False
    """The run failed because a size follows values no range bounds: refuse, never fall back."""


_META = torch.device("meta")


class UnboundedSizeError(Exception):
    """A size follows the values of a tensor whose range nothing bounds."""


Range = tuple[float, float]
aten = torch.ops.aten
_KEEPS_RANGE = frozenset(
    {
        aten.max, aten.min, aten.amax, aten.amin, aten.clone, aten._to_copy, aten.view,
        aten._unsafe_view, aten.reshape, aten.expand, aten.select, aten.slice, aten.squeeze,
        aten.unsqueeze, aten.flatten, aten.alias, aten.detach, aten.t, aten.permute,
        aten.contiguous, aten.lift_fresh, aten.flip, aten.lift_fresh_copy, aten.transpose,
    }
)  # fmt: skip
"""Ops whose output holds only values of their first input (the range carries over)."""


class _Largest(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Sends every dispatched op to the meta device; records the largest tensor one returns.

    Ops whose output size follows their input's values get the largest output the inputs'
    ranges (``ranges``, by tensor) allow (see the module documentation).
    """

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.numel = 0
        self.aten = ""
        self.nbytes = 0
        self.ranges: dict[int, tuple[torch.Tensor, Range]] = {}

    def bound(self, tensors: list[torch.Tensor], ranges: list[Range]) -> None:
        """Say that the values of each of ``tensors`` lie in its range (inclusive)."""
        for t, r in zip(tensors, ranges, strict=True):
            self.ranges[id(t)] = (t, r)

    def _range(self, t: Any, what: str) -> Range:
        if isinstance(t, torch.Tensor) and t.dtype == torch.bool:
            return (0.0, 1.0)
        found = self.ranges.get(id(t)) if isinstance(t, torch.Tensor) else None
        if found is None or found[0] is not t:
            raise UnboundedSizeError(f"{what} follows values that no value_range bounds")
        return found[1]

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
        out = self._data_dependent(func, args, kwargs)
        if out is None:
            out = func(*args, **kwargs)
        if func._overloadpacket in _KEEPS_RANGE and args and isinstance(out, torch.Tensor):
            first = self.ranges.get(id(args[0]))
            if first is not None and first[0] is args[0]:
                self.ranges[id(out)] = (out, first[1])
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                if t.numel() > self.numel:
                    self.numel, self.aten = t.numel(), str(func)
                self.nbytes = max(self.nbytes, t.numel() * t.element_size())
        return out

    def _data_dependent(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Return the worst-case result of an op whose output size follows values, else None."""
        packet = func._overloadpacket
        if packet is aten._local_scalar_dense:  # .item(): the top of the range
            t = args[0]
            top = self._range(t, "a .item()")[1]
            return (
                bool(top) if t.dtype == torch.bool else top if t.is_floating_point() else int(top)
            )
        if packet is aten.repeat_interleave and func is aten.repeat_interleave.Tensor:
            if kwargs.get("output_size") is not None or len(args) > 1:
                return None
            repeats = args[0]
            size = repeats.numel() * max(0, int(self._range(repeats, "repeat_interleave")[1]))
            return torch.empty(size, dtype=repeats.dtype, device=_META)
        if packet is aten.bincount:
            x, weights = args[0], (args[1] if len(args) > 1 else kwargs.get("weights"))
            minlength = args[2] if len(args) > 2 else kwargs.get("minlength", 0)
            size = max(int(self._range(x, "bincount")[1]) + 1, int(minlength or 0))
            dtype = torch.int64 if weights is None else torch.float64
            return torch.empty(size, dtype=dtype, device=_META)
        if packet is aten.nonzero:
            return torch.empty((args[0].numel(), args[0].dim()), dtype=torch.int64, device=_META)
        if packet is aten.masked_select:
            shape = torch.broadcast_shapes(args[0].shape, args[1].shape)  # type: ignore[no-untyped-call]
            numel = math.prod(shape)
            return torch.empty(numel, dtype=args[0].dtype, device=_META)
        return None


def input_ranges(op: OperatorSpec, built: BuiltOp) -> list[Range]:
    """Return the range (inclusive) of the values the worker draws for each of ``op``'s inputs.

    A spec's ``value_range`` (drawn from ``[low, high)``), else ``[0, high)`` as ``allocate``
    draws (``int_high``); booleans 0 or 1; floating values are normal, taken within ±8.
    """
    ranges: list[Range] = []
    for i, t in enumerate(op.inputs):
        if t.dtype == "bool":
            ranges.append((0.0, 1.0))
        elif t.dtype.startswith(("float", "bfloat", "complex")):
            ranges.append((-8.0, 8.0))
        else:
            low, top = t.value_range or (0, int_high(op, i, built.module))
            ranges.append((float(low), float(top - 1)))
    return ranges


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
    tally = FlopTally()
    try:
        with _META, tally, watch:
            built = build_op(op, device=_META)
            watch.bound(built.inputs, input_ranges(op, built))
            built.run()
    except Exception as exc:  # noqa: BLE001 - any op may raise anything; the caller falls back
        failure = first_line(exc)
        return Created(
            watch.numel,
            watch.aten,
            failure,
            watch.nbytes,
            unbounded=isinstance(exc, UnboundedSizeError),
        )
    return Created(watch.numel, watch.aten, None, watch.nbytes, tally.result.flops)


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
