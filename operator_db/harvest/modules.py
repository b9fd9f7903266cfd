"""Recover the constructor arguments of a ``torch.nn`` module, generically, and prove them.

``torch.nn`` modules keep their constructor arguments as attributes of the same name (``Conv2d``
keeps ``in_channels``, ``kernel_size``, ``padding_mode``, ...), with one convention to undo: a
``bias: bool`` argument becomes a ``bias`` parameter or None. So the arguments are read from the
attributes the signature names, and then proved: the module is rebuilt on the meta device from them
and must have the same class, the same parameter and buffer shapes, and the same ``extra_repr``.
A module that fails is not rebuilt from a guess; the harvester treats it as custom.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import JsonValue
from torch import nn

from operator_db.ops.encoding import EncodingError, decode_value, dtype_name, encode_value
from operator_db.ops.late import is_late_default
from operator_db.ops.resolve import module_name

_SKIPPED = frozenset({"self", "device", "dtype"})


@dataclass(frozen=True)
class Rebuildable:
    """A module the builder can construct again: its spec name, arguments and parameter dtype."""

    op: str
    args: dict[str, JsonValue]
    dtype: str | None


@dataclass(frozen=True)
class NotRebuildable:
    """Why a module cannot be rebuilt (one line)."""

    reason: str


def _no_tensor(value: torch.Tensor) -> JsonValue:
    raise EncodingError("a constructor argument is a tensor")


def _state(module: nn.Module) -> list[tuple[str, tuple[int, ...], bool]]:
    """Names, shapes and floating-ness of a module's own parameters and buffers."""
    return [
        (name, tuple(t.shape), t.is_floating_point())
        for name, t in (
            *module.named_parameters(recurse=False),
            *module.named_buffers(recurse=False),
        )
        if t is not None
    ]


def module_dtype(module: nn.Module) -> str | None:
    """Return the dtype name of a module's first floating-point parameter or buffer, or None."""
    for t in (*module.parameters(recurse=False), *module.buffers(recurse=False)):
        if t.is_floating_point():
            return dtype_name(t.dtype)
    return None


def constructor_args(module: nn.Module) -> Rebuildable | NotRebuildable:
    """Recover and verify the constructor arguments of a ``torch.nn`` module (see above)."""
    cls = type(module)
    op = module_name(cls)
    if op is None:
        return NotRebuildable(f"{cls.__module__}.{cls.__qualname__} is not a torch.nn class")
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())
    except (TypeError, ValueError):
        return NotRebuildable(f"{op} has no readable constructor signature")
    args: dict[str, Any] = {}
    for param in params:
        if (
            param.name in _SKIPPED
            or param.name.startswith("_")
            or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD)
        ):
            continue
        if not hasattr(module, param.name):
            if param.default is inspect.Parameter.empty:
                return NotRebuildable(f"{op}: constructor argument {param.name!r} is not kept")
            continue  # an argument not kept has no effect the checks below would miss
        value = getattr(module, param.name)
        if isinstance(param.default, bool) and (value is None or isinstance(value, torch.Tensor)):
            value = value is not None  # bias=True became a Parameter, bias=False became None
        if is_late_default(op, param.name, value):
            continue  # one key whichever torch harvested (ops/late.py)
        args[param.name] = value
    try:
        encoded = {k: encode_value(v, _no_tensor) for k, v in args.items()}
    except EncodingError as exc:
        return NotRebuildable(f"{op}: {exc}")
    problem = _verify(module, cls, encoded)
    if problem:
        return NotRebuildable(f"{op}: {problem}")
    return Rebuildable(op, encoded, module_dtype(module))


def _verify(module: nn.Module, cls: type[nn.Module], encoded: dict[str, JsonValue]) -> str | None:
    """Rebuild on the meta device from the encoded arguments; return what differs, or None."""
    meta = torch.device("meta")
    try:
        decoded = {k: decode_value(v, _no_index, meta) for k, v in encoded.items()}
        with meta:
            rebuilt = cls(**decoded)
    except Exception as exc:  # noqa: BLE001 - any failure means "not rebuildable", with a reason
        return f"rebuilding from the recovered arguments raised {type(exc).__name__}"
    if type(rebuilt) is not cls:
        return "rebuilt as another class"
    if _state(rebuilt) != _state(module):
        return "rebuilt with other parameter or buffer shapes"
    if rebuilt.extra_repr() != module.extra_repr():
        return f"rebuilt as {rebuilt.extra_repr()!r}, not {module.extra_repr()!r}"
    return None


def _no_index(i: int) -> torch.Tensor:
    raise EncodingError("constructor arguments cannot refer to tensors")


def has_parameters(module: nn.Module) -> bool:
    """Whether a module owns parameters (its own; a leaf has no children)."""
    return next(module.parameters(recurse=False), None) is not None
