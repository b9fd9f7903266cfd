"""Capture a forward pass as operator calls: leaf modules by hooks, functional calls by a mode.

Every module gets a forward pre-hook and hook (with kwargs). A leaf module that can be rebuilt
(a ``torch.nn`` class whose constructor arguments are recovered and proved) is one ``module`` call;
while it runs, nothing inside it is recorded, so its FLOPs are never counted twice. A custom leaf
with parameters is one ``opaque`` call, its cost counted live (it cannot be rebuilt later). A
custom leaf without parameters (an activation class of a library) is transparent: the functional
calls it makes are recorded, as are those of every non-leaf module's own code between its
children. Functional calls are seen by a ``TorchFunctionMode`` that is active during the whole
forward pass and records only while no recorded leaf is running.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from pydantic import JsonValue, ValidationError
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten
from torch.utils.hooks import RemovableHandle

from operator_db.harvest.modules import (
    NotRebuildable,
    Rebuildable,
    constructor_args,
    has_parameters,
)
from operator_db.ops.encoding import EncodingError, dtype_name, encode_value
from operator_db.ops.flops import FlopTally, Tally
from operator_db.ops.resolve import function_name, is_property_access
from operator_db.specs.keys import operator_key
from operator_db.specs.limits import MAX_JSON_STRING
from operator_db.specs.schema import CallSpec, Mode, OperatorSpec, TensorSpec

CustomLeaves = Literal["opaque", "trace"]
"""What to do with a custom leaf module that has parameters: record it opaque, or trace inside it
(its functional calls are recorded, its parameters becoming tensor inputs)."""

_INDEXING = frozenset({"torch.Tensor.__getitem__", "torch.Tensor.__setitem__"})
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


_Encoded = tuple[list[TensorSpec], CallSpec | None]


class _SkipError(Exception):
    """A call that cannot be written in a spec (a zero-size or exotic tensor); counted, not kept."""


@dataclass
class LiveCost:
    """The cost of an opaque call, counted while the model ran (it cannot be rebuilt later)."""

    tally: Tally
    params: int
    state_bytes: int


@dataclass
class Entry:
    """One distinct configuration seen so far: its spec (without costs), count and locations."""

    op: OperatorSpec
    key: str
    count: int = 1
    locations: list[str] = field(default_factory=list)
    reason: str | None = None
    """Why an opaque call could not be rebuilt."""
    live: LiveCost | None = None


@dataclass
class _Frame:
    name: str
    role: Literal["container", "module", "opaque", "traced", "nested"]
    """What the module is to the harvest: a container, a leaf recorded as a module or opaque, a
    custom leaf traced into its calls, or a module called inside a leaf (nested)."""
    plan: Rebuildable | NotRebuildable | None = None
    inputs: list[TensorSpec] = field(default_factory=list)
    call: CallSpec | None = None
    tally: FlopTally | None = None
    skip: str | None = None


class _Encoder:
    """Numbers the tensors of one call in order of appearance (the same tensor once)."""

    def __init__(self) -> None:
        self.inputs: list[TensorSpec] = []
        self._index: dict[int, int] = {}

    def __call__(self, t: torch.Tensor) -> JsonValue:
        i = self._index.get(id(t))
        if i is None:
            i = len(self.inputs)
            self.inputs.append(tensor_spec(t))
            self._index[id(t)] = i
        if not t.is_contiguous():  # a transposed or sliced view: its layout changes the cost
            return {"strided": {"tensor": i}, "stride": list(t.stride())}
        return {"tensor": i}


def tensor_spec(t: torch.Tensor, name: str | None = None) -> TensorSpec:
    """Return the spec of a tensor's shape and dtype.

    Raises:
        _SkipError: a zero-size dimension or a dtype specs do not know.
    """
    try:
        return TensorSpec(shape=list(t.shape), dtype=dtype_name(t.dtype), name=name)  # type: ignore[arg-type]
    except ValidationError:
        raise _SkipError(f"tensor {list(t.shape)}:{dtype_name(t.dtype)}") from None


def _outputs(value: Any) -> list[TensorSpec]:
    return [tensor_spec(t) for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def _has_tensor(value: Any) -> bool:
    return any(isinstance(t, torch.Tensor) for t in tree_flatten(value)[0])


def _encode_call(
    args: Sequence[Any], kwargs: Mapping[str, Any], *, index_arg: bool = False
) -> tuple[list[TensorSpec], CallSpec | None]:
    """Encode a call's arguments; None for the call when they are the inputs, in order."""
    encoder = _Encoder()
    enc_args = [encode_value(a, encoder, index=index_arg and i == 1) for i, a in enumerate(args)]
    enc_kwargs = {k: encode_value(v, encoder) for k, v in kwargs.items()}
    plain = [{"tensor": i} for i in range(len(encoder.inputs))]
    if not enc_kwargs and enc_args == plain:
        return encoder.inputs, None
    return encoder.inputs, CallSpec(args=enc_args, kwargs=enc_kwargs)


def _opaque_name(text: str) -> str:
    cleaned = text.replace("<", "").replace(">", "")
    parts = [re.sub(r"\W", "_", p) or "_" for p in cleaned.split(".")]
    return ".".join(p if not p[0].isdigit() else "_" + p for p in parts)[:300]


def _describe_args(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    def show(value: Any) -> str:
        if isinstance(value, torch.Tensor):
            return "tensor"
        return _ADDRESS.sub("", repr(value))[:80]

    parts = [show(a) for a in args] + [f"{k}={show(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)[:500]


class Recorder:
    """Collects distinct configurations while a model runs (see the module documentation)."""

    def __init__(self, model: nn.Module, mode: Mode, custom_leaves: CustomLeaves) -> None:
        self.model = model
        self.mode = mode
        self.custom_leaves = custom_leaves
        self.entries: dict[str, Entry] = {}
        self.skipped: dict[str, int] = {}
        self._names: dict[int, list[str]] = {}
        for name, module in model.named_modules(remove_duplicate=False):
            self._names.setdefault(id(module), []).append(name)
        self._plans: dict[int, _Frame] = {}
        self._stack: list[_Frame] = []
        self._leaf_depth = 0
        self._busy = 0
        self._handles: list[RemovableHandle] = []

    # -- hooks -----------------------------------------------------------------------------------

    def attach(self) -> None:
        """Register the hooks on every module of the model."""
        seen: set[int] = set()
        for module in self.model.modules():
            if id(module) in seen:
                continue
            seen.add(id(module))
            self._handles.append(
                module.register_forward_pre_hook(self._pre_hook, with_kwargs=True, prepend=True)
            )
            self._handles.append(
                module.register_forward_hook(self._post_hook, with_kwargs=True, always_call=True)
            )

    def detach(self) -> None:
        """Remove every hook."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    @property
    def recording(self) -> bool:
        """Whether a functional call made now is recorded.

        It is, inside the model's forward (not in what sets it up), outside recorded leaf modules,
        and when not made by the recorder itself.
        """
        return bool(self._stack) and self._leaf_depth == 0 and self._busy == 0

    def _name(self, module: nn.Module) -> str:
        names = self._names.get(id(module), ["?"])
        if len(names) > 1 and self._stack:
            parent = self._stack[-1].name
            for name in names:
                if name.rpartition(".")[0] == parent:
                    return name
        return names[0]

    def _plan(self, module: nn.Module) -> _Frame:
        cached = self._plans.get(id(module))
        if cached is not None:
            return cached
        if next(module.children(), None) is not None:
            plan = _Frame("", "container")
        else:
            found = constructor_args(module)
            if isinstance(found, Rebuildable):
                plan = _Frame("", "module", found)
            elif has_parameters(module) and self.custom_leaves == "opaque":
                plan = _Frame("", "opaque", found)
            else:
                plan = _Frame("", "traced", found)
        self._plans[id(module)] = plan
        return plan

    def _pre_hook(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._busy += 1  # torch calls made here (rebuilding on meta) are ours, not the model's
        try:
            name = self._name(module)
            if self._leaf_depth:
                self._stack.append(_Frame(name, "nested"))
                return
            plan = self._plan(module)
            frame = _Frame(name, plan.role, plan.plan)
            if frame.role in ("module", "opaque"):
                self._leaf_depth += 1
                with torch._C.DisableTorchFunction():
                    try:
                        frame.inputs, frame.call = _encode_call(args, kwargs)
                    except _SkipError as exc:
                        frame.skip = str(exc)
                    except EncodingError as exc:
                        if frame.role == "module":  # a torch.nn leaf called with exotic arguments
                            frame.role = "opaque"
                            frame.plan = NotRebuildable(f"call arguments: {exc}")
                        frame.inputs = self._tensor_inputs(args, kwargs, frame)
                        frame.call = None
            self._stack.append(frame)
        finally:
            self._busy -= 1
        if frame.role == "opaque" and frame.skip is None:
            frame.tally = FlopTally()
            frame.tally.__enter__()

    def _tensor_inputs(self, args: Any, kwargs: Any, frame: _Frame) -> list[TensorSpec]:
        try:
            return [
                tensor_spec(t)
                for t in tree_flatten((args, kwargs))[0]
                if isinstance(t, torch.Tensor)
            ]
        except _SkipError as exc:
            frame.skip = str(exc)
            return []

    def _post_hook(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
    ) -> None:
        if not self._stack:
            return
        frame = self._stack.pop()
        if frame.tally is not None:
            frame.tally.__exit__(None, None, None)
        if frame.role not in ("module", "opaque"):
            return
        self._leaf_depth -= 1
        with torch._C.DisableTorchFunction():
            if frame.skip is not None:
                self._skip(frame.skip)
                return
            try:
                outputs = _outputs(output)
            except _SkipError as exc:
                self._skip(str(exc))
                return
            if isinstance(frame.plan, Rebuildable) and frame.role == "module":
                op = OperatorSpec(
                    op=frame.plan.op,
                    form="module",
                    args=frame.plan.args,
                    dtype=frame.plan.dtype,  # type: ignore[arg-type]
                    inputs=frame.inputs,
                    call=frame.call,
                    outputs=outputs,
                )
                self._add(op, frame.name)
                return
            cls = type(module)
            state = {
                n: list(t.shape)
                for n, t in (
                    *module.named_parameters(recurse=False),
                    *module.named_buffers(recurse=False),
                )
            }
            opaque_args: dict[str, JsonValue] = {"state": state}  # type: ignore[dict-item]
            if module.extra_repr():
                opaque_args["extra_repr"] = module.extra_repr()[:MAX_JSON_STRING]
            op = OperatorSpec(
                op=_opaque_name(f"{cls.__module__}.{cls.__qualname__}"),
                form="opaque",
                args=opaque_args,
                inputs=frame.inputs,
                call=frame.call,
                outputs=outputs,
            )
            reason = frame.plan.reason if isinstance(frame.plan, NotRebuildable) else "custom"
            live = None
            if frame.tally is not None:
                tensors = (*module.parameters(recurse=False), *module.buffers(recurse=False))
                live = LiveCost(
                    frame.tally.result,
                    sum(p.numel() for p in module.parameters(recurse=False)),
                    sum(t.numel() * t.element_size() for t in tensors),
                )
            self._add(op, frame.name, reason=reason, live=live)

    # -- functional calls -----------------------------------------------------------------------

    def function_call(
        self, func: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> Any:
        """Run a functional call made outside recorded leaves, and record it."""
        name = function_name(func)
        encoded: _Encoded | None = None
        problem: str | None = None
        skip: str | None = None
        if name is not None:
            # Encoded before the call runs: an in-place op must be described by what it was given.
            with torch._C.DisableTorchFunction():
                try:
                    encoded = _encode_call(args, kwargs, index_arg=name in _INDEXING)
                except EncodingError as exc:
                    problem = f"arguments: {exc}"
                except _SkipError as exc:
                    skip = str(exc)
        else:
            problem = "not an allowed torch function"
        if encoded is None and skip is None:  # opaque: its cost can only be counted now
            with FlopTally() as tally:
                out = func(*args, **kwargs)
            live: LiveCost | None = LiveCost(tally.result, 0, 0)
        else:
            out = func(*args, **kwargs)
            live = None
        with torch._C.DisableTorchFunction():
            self._record_function(func, name, args, kwargs, out, encoded, problem, skip, live)
        return out

    def _record_function(
        self,
        func: Callable[..., Any],
        name: str | None,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        out: Any,
        encoded: _Encoded | None,
        problem: str | None,
        skip: str | None,
        live: LiveCost | None,
    ) -> None:
        setitem = name == "torch.Tensor.__setitem__"
        if not setitem and not _has_tensor(out):
            return  # metadata (sizes, dtypes, booleans): nothing runs on the device
        if skip is not None:
            self._skip(skip)
            return
        location = self._stack[-1].name if self._stack else ""
        try:
            outputs = [] if setitem else _outputs(out)
            if encoded is not None and name is not None:
                inputs, call = encoded
                op = OperatorSpec(
                    op=name, form="function", inputs=inputs, call=call, outputs=outputs
                )
                self._add(op, location)
                return
            inputs = [
                tensor_spec(t)
                for t in tree_flatten((list(args), dict(kwargs)))[0]
                if isinstance(t, torch.Tensor)
            ]
        except _SkipError as exc:
            self._skip(str(exc))
            return
        if isinstance(func, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
            label = f"torch.ops.{func}"  # torch.ops.aten.mm: what the user's code called
        else:
            label = name or (
                f"{getattr(func, '__module__', None) or 'unknown'}."
                f"{getattr(func, '__qualname__', None) or 'function'}"
            )
        op = OperatorSpec(
            op=_opaque_name(label),
            form="opaque",
            args={"arguments": _describe_args(args, kwargs)},
            inputs=inputs,
            outputs=outputs,
        )
        self._add(op, location, reason=problem, live=live)

    # -- bookkeeping ----------------------------------------------------------------------------

    def _skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def _add(
        self,
        op: OperatorSpec,
        location: str,
        *,
        reason: str | None = None,
        live: LiveCost | None = None,
    ) -> None:
        key = operator_key(op, self.mode)
        entry = self.entries.get(key)
        if entry is None:
            self.entries[key] = Entry(op, key, 1, [location], reason, live)
            return
        entry.count += 1
        if location not in entry.locations:
            entry.locations.append(location)


class CaptureMode(TorchFunctionMode):
    """Sends every torch function called outside recorded leaf modules to the recorder."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if not self.recorder.recording or is_property_access(func):
            return func(*args, **kwargs)
        return self.recorder.function_call(func, args, kwargs)
