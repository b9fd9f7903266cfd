"""Constructor arguments of a ``form: module`` operator, checked before anything is allocated.

A spec's ``args`` are JSON that the worker decodes and passes to a ``torch.nn`` class. They are
checked against the constructor's signature first: unknown, private, ``device`` and ``dtype``
arguments are refused (the worker chooses the device; the parameter dtype is the operator's
``dtype``), required ones must be there, and each value must fit the parameter's annotation (an
``int`` is an integer, neither a boolean nor a string; a ``float`` a number; a tuple a list).
Where torch declares no annotations (``MultiheadAttention``, the RNNs), :data:`_DECLARED` does.
Every integer is within ±:data:`MAX_INT_ARG`, a count of layers within :data:`MAX_LAYERS`. Then
the module is built on the meta device, which allocates nothing, and its parameters and buffers
together must hold at most ``max_numel`` elements: ``Linear(10**6, 10**6)`` is refused here, not
by the worker's allocator.
"""

from __future__ import annotations

import functools
import inspect
import json
import types
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, Literal, Union

import torch
from pydantic import JsonValue
from torch import nn
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter

from operator_db.errors import OperatorDBError
from operator_db.ops.build import first_line
from operator_db.ops.encoding import EncodingError, decode_value
from operator_db.ops.late import LateArgumentError, local_args
from operator_db.ops.resolve import resolve_module

MAX_INT_ARG = 2**31 - 1
"""Largest magnitude of an integer constructor argument (a size, an index, a dimension)."""
MAX_LAYERS = 128
"""Largest count of layers (``num_layers``, ...): constructors loop over it."""
_LAYER_COUNTS = frozenset({"num_layers", "num_encoder_layers", "num_decoder_layers"})
_SET_BY_WORKER = frozenset({"device", "dtype"})

_RNN: dict[str, Any] = {
    "input_size": int,
    "hidden_size": int,
    "num_layers": int,
    "bias": bool,
    "batch_first": bool,
    "dropout": float,
    "bidirectional": bool,
}
_SIZES = frozenset({"input_size", "hidden_size"})
_DECLARED: dict[type[nn.Module], tuple[dict[str, Any], frozenset[str]]] = {
    nn.MultiheadAttention: (
        {
            "embed_dim": int,
            "num_heads": int,
            "dropout": float,
            "bias": bool,
            "add_bias_kv": bool,
            "add_zero_attn": bool,
            "kdim": int | None,
            "vdim": int | None,
            "batch_first": bool,
        },
        frozenset({"embed_dim", "num_heads"}),
    ),
    nn.RNN: ({**_RNN, "nonlinearity": Literal["tanh", "relu"]}, _SIZES),
    nn.LSTM: ({**_RNN, "proj_size": int}, _SIZES),
    nn.GRU: (_RNN, _SIZES),
}
"""Parameters (annotation, required names) of classes whose ``__init__`` takes ``*args, **kwargs``
or declares no annotations."""


class ArgumentError(OperatorDBError):
    """A module's constructor arguments do not fit its class; ``name`` is the argument, if one."""

    def __init__(self, name: str | None, message: str) -> None:
        self.name = name
        super().__init__(f"{name}: {message}" if name else message)
        self.detail = message


@dataclass(frozen=True)
class _Signature:
    params: dict[str, Any]
    """Annotation of each accepted argument (``Any`` where nothing is known)."""
    required: frozenset[str]
    open_ended: bool
    """Whether ``**kwargs`` takes names not listed (the constructor then decides)."""


@functools.cache
def _signature(op: str) -> _Signature:
    cls = resolve_module(op)
    declared = next((v for k, v in _DECLARED.items() if cls is k), None)
    if declared is not None:
        return _Signature(declared[0], declared[1], False)
    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return _Signature({}, frozenset(), True)
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # noqa: BLE001 - unresolvable annotations: fall back to the raw ones
        hints = {}
    params: dict[str, Any] = {}
    required: set[str] = set()
    open_ended = False
    for p in list(sig.parameters.values())[1:]:
        if p.kind is p.VAR_KEYWORD:
            open_ended = True
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name.startswith("_"):
            continue
        if p.name in _SET_BY_WORKER:
            continue
        annotation = hints.get(p.name, p.annotation)
        if annotation is p.empty:  # say, LazyBatchNorm1d(eps=1e-05): the default's type
            is_plain = isinstance(p.default, bool | int | float | str)
            annotation = type(p.default) if is_plain else Any
        params[p.name] = annotation
        if p.default is p.empty:
            required.add(p.name)
    return _Signature(params, frozenset(required), open_ended)


def _show(annotation: Any) -> str:
    if isinstance(annotation, type) and _origin(annotation) is None:
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("NoneType", "None")


def _origin(annotation: Any) -> Any:
    # typing.get_origin, with Union for int | None too
    origin = typing.get_origin(annotation)
    return Union if origin is types.UnionType else origin


def fits(value: JsonValue, annotation: Any) -> bool:
    """Say whether an encoded JSON argument fits a constructor parameter's annotation.

    Unknown annotations (a class, a callable, a string) fit anything: the constructor decides.
    """
    origin, args = _origin(annotation), typing.get_args(annotation)
    if annotation is Any or isinstance(annotation, str | typing.TypeVar):
        return True
    if annotation is None or annotation is type(None):
        return value is None
    if origin is Union:
        return any(fits(value, a) for a in args)
    if origin is Literal:
        return any(type(value) is type(a) and value == a for a in args)
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        special = isinstance(value, dict) and set(value) == {"float"}
        return special or (isinstance(value, int | float) and not isinstance(value, bool))
    if annotation is str:
        return isinstance(value, str)
    if annotation is torch.Size:
        return isinstance(value, list) and all(fits(v, int) for v in value)
    if origin in (tuple, list, Sequence, Iterable):
        if not isinstance(value, list):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return all(fits(v, args[min(i, len(args) - 1)]) for i, v in enumerate(value))
        return not args or all(fits(v, args[0]) for v in value)
    # A tensor or a module has no JSON form; anything else, the constructor decides.
    return not (isinstance(annotation, type) and issubclass(annotation, torch.Tensor | nn.Module))


def _integers(value: JsonValue) -> Iterable[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _integers(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _integers(item)


def check_module_args(op: str, args: dict[str, JsonValue], *, max_numel: int) -> None:
    """Check ``args`` against the constructor of the module ``op`` names and its state's size.

    ``max_numel`` bounds the elements of the module's parameters and buffers together (see the
    module documentation).

    Raises:
        UnknownOperatorError: ``op`` is not a ``torch.nn`` module class of the allow-list.
        ArgumentError: one line naming the argument (where one is to blame) and the problem.
    """
    sig = _signature(op)
    try:
        args = local_args(op, args)
    except LateArgumentError as exc:
        raise ArgumentError(exc.name, exc.problem) from None
    for name, value in args.items():
        if name in _SET_BY_WORKER:
            raise ArgumentError(name, "is set by the worker, not the spec (use the op's dtype)")
        annotation = sig.params.get(name)
        if annotation is None and (name.startswith("_") or not sig.open_ended):
            raise ArgumentError(name, "is not an argument of the constructor")
        if annotation is not None and not fits(value, annotation):
            raise ArgumentError(name, f"must be {_show(annotation)}, got {json.dumps(value)[:60]}")
        top = MAX_LAYERS if name in _LAYER_COUNTS else MAX_INT_ARG
        if any(abs(n) > top for n in _integers(value)):
            got = json.dumps(value)[:60]
            raise ArgumentError(name, f"integers must lie within ±{top}, got {got}")
    missing = sorted(sig.required - set(args))
    if missing:
        raise ArgumentError(None, f"missing constructor argument {missing[0]!r}")
    problem = _built_size_problem(op, json.dumps(args, sort_keys=True), max_numel)
    if problem is not None:
        raise ArgumentError(None, problem)


@functools.lru_cache(maxsize=4096)
def _built_size_problem(op: str, args_json: str, max_numel: int) -> str | None:
    cls = resolve_module(op)
    meta = torch.device("meta")
    try:
        decoded = {k: decode_value(v, _no_tensor, meta) for k, v in json.loads(args_json).items()}
        with meta:
            module = cls(**decoded)
    except Exception as exc:  # noqa: BLE001 - a constructor may raise anything; one line for the user
        return f"the constructor refuses these arguments: {first_line(exc)}"
    numel = sum(
        t.numel()
        for t in chain(module.parameters(), module.buffers())
        if not isinstance(t, UninitializedParameter | UninitializedBuffer)
    )
    if numel > max_numel:
        return (
            f"its parameters and buffers would hold {numel} elements, over the limit of "
            f"{max_numel} (OPDB_MAX_TENSOR_NUMEL)"
        )
    return None


def _no_tensor(i: int) -> torch.Tensor:
    raise EncodingError("constructor arguments cannot refer to tensors")
