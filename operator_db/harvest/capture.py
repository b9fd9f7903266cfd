"""Capture a forward pass as operator calls: leaf modules by hooks, functional calls by a mode.

Every module gets a forward pre-hook and hook (with kwargs). A leaf module that can be rebuilt
(a ``torch.nn`` class whose constructor arguments are recovered and proved) is one ``module`` call;
while it runs, nothing inside it is recorded, so its FLOPs are never counted twice. A custom leaf
(not rebuildable: transformers' ``Conv1D``, an RMSNorm, a user's own module) is *traced*: the
functional calls it makes are recorded at its location, its parameters becoming tensor inputs,
as are those of every non-leaf module's own code between its children. Tracing fails when a call
inside the leaf is opaque or cannot be described; the leaf is then one ``opaque`` call, its cost
counted live (it cannot be rebuilt later), with the reason. ``custom_leaves="opaque"`` keeps the
older policy: a custom leaf with parameters is opaque without being traced.

Functional calls are seen by a ``TorchFunctionMode`` that is active during the whole forward pass
and records only while no recorded leaf is running. A call on a tensor a spec cannot describe (a
dimension of size 0) is not recorded: it is listed, with where it ran and why (``Skipped``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from pydantic import JsonValue, ValidationError
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.hooks import RemovableHandle

from operator_db.harvest.calls import (
    Undescribable,
    call_label,
    class_name,
    describe_args,
    encode_call,
    has_tensor,
    opaque_name,
    operator_spec,
    output_specs,
    synchronizes,
    tensor_inputs,
)
from operator_db.harvest.modules import (
    NotRebuildable,
    Rebuildable,
    constructor_args,
    has_parameters,
)
from operator_db.ops.encoding import EncodingError
from operator_db.ops.flops import FlopTally, Tally
from operator_db.ops.resolve import function_name, is_property_access
from operator_db.specs.keys import operator_key
from operator_db.specs.limits import MAX_JSON_STRING
from operator_db.specs.schema import CallSpec, Mode, OperatorSpec, TensorSpec

CustomLeaves = Literal["trace", "opaque"]
"""What to do with a custom leaf module (not rebuildable): trace inside it (its functional calls
are recorded, its parameters becoming tensor inputs; opaque only where tracing fails), or record
one with parameters as opaque, untraced."""

_INDEXING = frozenset({"torch.Tensor.__getitem__", "torch.Tensor.__setitem__"})


_Encoded = tuple[list[TensorSpec], CallSpec | None]


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
class Listed:
    """Calls of one op that share a reason (skipped, or custom leaves traced): where, how often."""

    op: str
    reason: str
    count: int = 0
    locations: list[str] = field(default_factory=list)

    def add(self, location: str) -> None:
        """Count one more call at ``location``."""
        self.count += 1
        if location not in self.locations:
            self.locations.append(location)


@dataclass
class _Record:
    """A call recorded inside a traced leaf, kept until the leaf is known to trace whole."""

    op: OperatorSpec | None
    """None for a skipped call."""
    label: str
    location: str
    reason: str | None = None
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
    pending: list[_Record] = field(default_factory=list)
    """Traced: what its calls recorded, committed when it returns."""
    problem: str | None = None
    """Traced: the first call inside it that is opaque or skipped (tracing failed)."""


class Recorder:
    """Collects distinct configurations while a model runs (see the module documentation)."""

    def __init__(self, model: nn.Module, mode: Mode, custom_leaves: CustomLeaves) -> None:
        self.model = model
        self.mode = mode
        self.custom_leaves = custom_leaves
        self.entries: dict[str, Entry] = {}
        self.order: list[str] = []
        """The key of every recorded call, in the order the model made them."""
        self.syncs: list[int] = []
        """Positions in ``order`` before which the model made the host wait for the device (a
        synchronizing call, ``SYNCHRONIZING``, after the calls before it)."""
        self.skipped: dict[tuple[str, str], Listed] = {}
        """Calls no spec can describe, by op and reason."""
        self.traced: dict[tuple[str, str], Listed] = {}
        """Custom leaves traced into their calls, by class and why they are not rebuilt."""
        self._names: dict[int, list[str]] = {}
        for name, module in model.named_modules(remove_duplicate=False):
            self._names.setdefault(id(module), []).append(name)
        self._plans: dict[int, _Frame] = {}
        self._stack: list[_Frame] = []
        self._tracing: list[_Frame] = []
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
                with torch._C.DisableTorchFunction():
                    self._describe_leaf(frame, args, kwargs)
            if frame.role in ("module", "opaque"):
                self._leaf_depth += 1
            elif frame.role == "traced":
                self._tracing.append(frame)
            self._stack.append(frame)
        finally:
            self._busy -= 1
        if (frame.role == "opaque" and frame.skip is None) or frame.role == "traced":
            frame.tally = FlopTally()  # a traced leaf's, in case it turns out opaque
            frame.tally.__enter__()

    def _describe_leaf(self, frame: _Frame, args: Any, kwargs: Any) -> None:
        """Encode a recorded leaf's call; a ``torch.nn`` leaf with exotic arguments is traced.

        (Opaque under ``custom_leaves="opaque"``.)
        """
        try:
            frame.inputs, frame.call = encode_call(args, kwargs)
        except Undescribable as exc:
            frame.skip = str(exc)
        except EncodingError as exc:
            if frame.role == "module":
                frame.plan = NotRebuildable(f"call arguments: {exc}")
                if self.custom_leaves == "trace":
                    frame.role = "traced"
                    return
                frame.role = "opaque"
            frame.inputs, frame.call = self._leaf_inputs(frame, args, kwargs)

    def _leaf_inputs(self, frame: _Frame, args: Any, kwargs: Any) -> _Encoded:
        try:
            return tensor_inputs(args, kwargs), None
        except Undescribable as exc:
            frame.skip = str(exc)
            return [], None

    def _post_hook(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
    ) -> None:
        if not self._stack:
            return
        frame = self._stack.pop()
        if frame.tally is not None:
            frame.tally.__exit__(None, None, None)
        if frame.role == "traced":
            self._tracing.pop()
            with torch._C.DisableTorchFunction():
                self._end_trace(module, frame, args, kwargs, output)
            return
        if frame.role not in ("module", "opaque"):
            return
        self._leaf_depth -= 1
        with torch._C.DisableTorchFunction():
            label = frame.plan.op if isinstance(frame.plan, Rebuildable) else class_name(module)
            try:
                if frame.skip is not None:
                    raise Undescribable(frame.skip)
                outputs = output_specs(output)
                if isinstance(frame.plan, Rebuildable) and frame.role == "module":
                    op = operator_spec(
                        op=frame.plan.op,
                        form="module",
                        args=frame.plan.args,
                        dtype=frame.plan.dtype,
                        inputs=frame.inputs,
                        call=frame.call,
                        outputs=outputs,
                    )
                    self._add(op, label, frame.name)
                    return
                reason = frame.plan.reason if isinstance(frame.plan, NotRebuildable) else "custom"
                self._add_opaque_module(module, frame, outputs, reason)
            except Undescribable as exc:
                self._skip(label, frame.name, str(exc))

    def _add_opaque_module(
        self, module: nn.Module, frame: _Frame, outputs: list[TensorSpec], reason: str
    ) -> None:
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
        op = operator_spec(
            op=opaque_name(class_name(module)),
            form="opaque",
            args=opaque_args,
            inputs=frame.inputs,
            call=frame.call,
            outputs=outputs,
        )
        live = None
        if frame.tally is not None:
            tensors = (*module.parameters(recurse=False), *module.buffers(recurse=False))
            live = LiveCost(
                frame.tally.result,
                sum(p.numel() for p in module.parameters(recurse=False)),
                sum(t.numel() * t.element_size() for t in tensors),
            )
        self._add(op, op.op, frame.name, reason=reason, live=live)

    def _end_trace(
        self, module: nn.Module, frame: _Frame, args: Any, kwargs: Any, output: Any
    ) -> None:
        """Commit a traced leaf's calls; where one is opaque or skipped, the leaf is opaque."""
        why = frame.plan.reason if isinstance(frame.plan, NotRebuildable) else "custom"
        # A model that is itself a leaf keeps its calls: opaque whole, nothing would be measured.
        if frame.problem is not None and module is not self.model:
            try:
                try:
                    frame.inputs, frame.call = encode_call(args, kwargs)
                except EncodingError:
                    frame.inputs, frame.call = tensor_inputs(args, kwargs), None
                outputs = output_specs(output)
                self._add_opaque_module(
                    module, frame, outputs, f"{why}; tracing it failed: {frame.problem}"
                )
                return
            except Undescribable:
                pass  # the leaf cannot be described either: its calls say what they can
        for record in frame.pending:
            if record.op is None:
                self._skip(record.label, record.location, record.reason or "")
            else:
                self._add(
                    record.op, record.label, record.location, reason=record.reason, live=record.live
                )
        key = (class_name(module), why)
        self.traced.setdefault(key, Listed(*key)).add(frame.name)

    # -- functional calls -----------------------------------------------------------------------

    def function_call(
        self, func: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> Any:
        """Run a functional call made outside recorded leaves, and record it."""
        name = function_name(func)
        if synchronizes(func, name) and (not self.syncs or self.syncs[-1] != len(self.order)):
            self.syncs.append(len(self.order))
        encoded: _Encoded | None = None
        problem: str | None = None
        skip: str | None = None
        if name is not None:
            # Encoded before the call runs: an in-place op must be described by what it was given.
            with torch._C.DisableTorchFunction():
                try:
                    encoded = encode_call(args, kwargs, index_arg=name in _INDEXING)
                except EncodingError as exc:
                    problem = f"arguments: {exc}"
                except Undescribable as exc:
                    skip = str(exc)
                except ValidationError as exc:  # the call's JSON is beyond the format's limits
                    problem = f"arguments: {exc.errors()[0]['msg'] if exc.errors() else exc}"
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
        if not setitem and not has_tensor(out):
            return  # metadata (sizes, dtypes, booleans): nothing runs on the device
        location = self._stack[-1].name if self._stack else ""
        label = call_label(func, name)
        try:
            if skip is not None:
                raise Undescribable(skip)
            outputs = [] if setitem else output_specs(out)
            if encoded is not None and name is not None:
                inputs, call = encoded
                op = operator_spec(
                    op=name, form="function", inputs=inputs, call=call, outputs=outputs
                )
                self._add(op, label, location)
                return
            op = operator_spec(
                op=opaque_name(label),
                form="opaque",
                args={"arguments": describe_args(args, kwargs)},
                inputs=tensor_inputs(list(args), dict(kwargs)),
                outputs=outputs,
            )
        except Undescribable as exc:
            self._skip(label, location, str(exc))
            return
        self._add(op, label, location, reason=problem, live=live)

    # -- bookkeeping ----------------------------------------------------------------------------

    def _skip(self, label: str, location: str, reason: str) -> None:
        if self._tracing:
            frame = self._tracing[-1]
            frame.pending.append(_Record(None, label, location, reason))
            frame.problem = frame.problem or f"{label}: {reason}"
            return
        key = (label, reason)
        self.skipped.setdefault(key, Listed(*key)).add(location)

    def _add(
        self,
        op: OperatorSpec,
        label: str,
        location: str,
        *,
        reason: str | None = None,
        live: LiveCost | None = None,
    ) -> None:
        if self._tracing:
            frame = self._tracing[-1]
            frame.pending.append(_Record(op, label, location, reason, live))
            if op.form == "opaque":
                frame.problem = frame.problem or f"{label} is opaque ({reason or 'custom'})"
            return
        key = operator_key(op, self.mode)
        self.order.append(key)
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
