"""JSON encoding of an operator's non-tensor arguments, shared by the harvester and the builder.

A spec stores every argument of a call as JSON. Plain JSON values (null, booleans, integers,
finite floats, strings) are written as they are; everything else is a one-key mapping whose key
names the type. The encoding is part of a configuration's identity (its key hashes it), so it is
deterministic.

=========================  ===============================================  ======================
Python value               JSON                                             decoded as
=========================  ===============================================  ======================
tensor (``inputs[i]``)     ``{"tensor": i}``                                the allocated input
non-contiguous tensor      ``{"strided": {"tensor": i}, "stride": [..]}``   ``as_strided`` view
tuple, list, torch.Size    ``[...]``                                        tuple
list used as an index      ``{"list": [...]}``                              list
slice                      ``{"slice": [start, stop, step]}``               slice
Ellipsis                   ``{"ellipsis": true}``                           Ellipsis
inf, -inf, nan             ``{"float": "inf"}`` (``"-inf"``, ``"nan"``)      float
complex                    ``{"complex": [re, im]}``                        complex
torch.dtype                ``{"dtype": "float32"}``                         torch.float32
torch.device               ``{"device": "target"}``                         the device built on
torch.memory_format        ``{"memory_format": "channels_last"}``           torch.channels_last
torch.layout               ``{"layout": "strided"}``                        torch.strided
dict (string keys)         ``{"dict": {...}}``                              dict
=========================  ===============================================  ======================

Tuples and lists decode as tuples: every torch function that takes one takes the other, except
indexing, where ``x[[0, 2]]`` (advanced) differs from ``x[(0, 2)]`` (basic); a list inside an index
is therefore written ``{"list": [...]}``. A device is never recorded (a spec harvested on the meta
device must run on a GPU): it always decodes to the device the op is built on.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

import torch
from pydantic import JsonValue

from operator_db.errors import OperatorDBError

TensorEncoder = Callable[[torch.Tensor], JsonValue]
"""Turns a tensor argument into its reference (``{"tensor": i}`` or a strided wrapper)."""
TensorDecoder = Callable[[int], torch.Tensor]
"""Returns the allocated input ``i``."""

_MEMORY_FORMATS = {
    "contiguous_format": torch.contiguous_format,
    "channels_last": torch.channels_last,
    "channels_last_3d": torch.channels_last_3d,
    "preserve_format": torch.preserve_format,
}
_LAYOUTS = {"strided": torch.strided, "sparse_coo": torch.sparse_coo}
_MARKERS = frozenset(
    {
        "tensor",
        "strided",
        "list",
        "slice",
        "ellipsis",
        "float",
        "complex",
        "dtype",
        "device",
        "memory_format",
        "layout",
        "dict",
    }
)


class EncodingError(OperatorDBError):
    """A value cannot be written as JSON, or an encoded value is malformed."""


def dtype_name(dtype: torch.dtype) -> str:
    """Return a dtype's name without the ``torch.`` prefix (``torch.float32`` → ``float32``)."""
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    """Return the ``torch.dtype`` called ``name`` (``float32``).

    Raises:
        EncodingError: ``name`` is not a torch dtype.
    """
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise EncodingError(f"unknown dtype {name!r}")
    return value


def _encode_float(value: float) -> JsonValue:
    if math.isfinite(value):
        return value
    return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}


def encode_value(value: Any, tensor: TensorEncoder, *, index: bool = False) -> JsonValue:
    """Encode one argument as JSON; tensors anywhere inside go through ``tensor``.

    ``index`` is set for the index of ``Tensor.__getitem__``/``__setitem__``, where a list must stay
    a list.

    Raises:
        EncodingError: the value (or something inside it) has no JSON form, e.g. a generator or a
            Python object.
    """
    if isinstance(value, torch.Tensor):
        return tensor(value)
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return _encode_float(float(value))
    if isinstance(value, numbers.Complex):
        number = complex(value)
        return {"complex": [_encode_float(number.real), _encode_float(number.imag)]}
    if isinstance(value, list) and index:
        return {"list": [encode_value(v, tensor, index=True) for v in value]}
    if isinstance(value, tuple | list):
        return [encode_value(v, tensor, index=index) for v in value]
    if isinstance(value, slice):
        return {"slice": [encode_value(v, tensor) for v in (value.start, value.stop, value.step)]}
    if value is Ellipsis:
        return {"ellipsis": True}
    if isinstance(value, torch.dtype):
        return {"dtype": dtype_name(value)}
    if isinstance(value, torch.device):
        return {"device": "target"}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise EncodingError("a mapping argument has non-string keys")
        return {"dict": {k: encode_value(v, tensor) for k, v in value.items()}}
    raise EncodingError(f"an argument of type {type(value).__name__} has no JSON form")


def _decode_float(value: JsonValue) -> float:
    if isinstance(value, dict) and set(value) == {"float"}:
        text = value["float"]
        if text not in ("inf", "-inf", "nan"):
            raise EncodingError(f"unknown special float {text!r}")
        return float(str(text))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise EncodingError(f"expected a number, got {value!r}")


def decode_value(value: JsonValue, tensor: TensorDecoder, device: torch.device) -> Any:
    """Decode one argument written by :func:`encode_value`.

    Raises:
        EncodingError: an unknown marker or a malformed value.
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        return tuple(decode_value(v, tensor, device) for v in value)
    if len(value) == 1:
        ((marker, inner),) = value.items()
    elif set(value) == {"strided", "stride"}:
        marker, inner = "strided", value["strided"]
    else:
        raise EncodingError(f"unknown encoded value with keys {sorted(value)}")
    if marker not in _MARKERS:
        raise EncodingError(f"unknown encoded value {{{marker!r}: ...}}")
    if marker in ("tensor", "strided"):
        ref = (
            inner
            if marker == "tensor"
            else (inner.get("tensor") if isinstance(inner, dict) else None)
        )
        if not isinstance(ref, int) or isinstance(ref, bool):
            raise EncodingError(f"a tensor reference must be an integer, got {ref!r}")
        return tensor(ref)
    if marker == "list":
        if not isinstance(inner, list):
            raise EncodingError("{'list': ...} must hold a list")
        return [decode_value(v, tensor, device) for v in inner]
    if marker == "slice":
        if not isinstance(inner, list) or len(inner) != 3:
            raise EncodingError("{'slice': ...} must hold [start, stop, step]")
        start, stop, step = (decode_value(v, tensor, device) for v in inner)
        return slice(start, stop, step)
    if marker == "ellipsis":
        return Ellipsis
    if marker == "float":
        return _decode_float(value)
    if marker == "complex":
        if not isinstance(inner, list) or len(inner) != 2:
            raise EncodingError("{'complex': ...} must hold [real, imag]")
        return complex(_decode_float(inner[0]), _decode_float(inner[1]))
    if marker == "dtype":
        return dtype_from_name(str(inner))
    if marker == "device":
        return device
    if marker == "memory_format":
        if inner not in _MEMORY_FORMATS:
            raise EncodingError(f"unknown memory format {inner!r}")
        return _MEMORY_FORMATS[str(inner)]
    if marker == "layout":
        if inner not in _LAYOUTS:
            raise EncodingError(f"unknown layout {inner!r}")
        return _LAYOUTS[str(inner)]
    if not isinstance(inner, dict):
        raise EncodingError("{'dict': ...} must hold a mapping")
    return {k: decode_value(v, tensor, device) for k, v in inner.items()}


def input_strides(value: JsonValue) -> dict[int, list[int]]:
    """Return the strides of every input written as a strided wrapper anywhere inside ``value``."""
    found: dict[int, list[int]] = {}

    def visit(item: JsonValue) -> None:
        if isinstance(item, dict):
            if set(item) == {"strided", "stride"}:
                ref, stride = item["strided"], item["stride"]
                if (
                    isinstance(ref, dict)
                    and isinstance(ref.get("tensor"), int)
                    and isinstance(stride, list)
                    and all(isinstance(s, int) and s >= 0 for s in stride)
                ):
                    found[int(ref["tensor"])] = [int(s) for s in stride]  # type: ignore[arg-type]
                    return
                raise EncodingError(f"malformed strided tensor reference {item!r}")
            for v in item.values():
                visit(v)
        elif isinstance(item, list):
            for v in item:
                visit(v)

    visit(value)
    return found
