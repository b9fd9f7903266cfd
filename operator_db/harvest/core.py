"""Harvest a model into a spec: run it once on the meta device, record and cost its operators."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

import torch
from pydantic import JsonValue
from torch import nn

from operator_db.errors import HarvestError, OperatorDBError
from operator_db.harvest.capture import CaptureMode, CustomLeaves, Entry, Recorder
from operator_db.harvest.inputs import ModelInputs
from operator_db.harvest.refs import (
    ModelRef,
    complete_inputs,
    default_inputs,
    load_model,
    model_name_part,
    parse_reference,
)
from operator_db.harvest.result import (
    HarvestResult,
    OpaqueOp,
    SkippedCall,
    TracedLeaf,
    listed,
    provenance,
)
from operator_db.ops.admission import admit_spec
from operator_db.ops.cost import OpCost, compulsory_bytes, op_cost
from operator_db.ops.encoding import dtype_name
from operator_db.specs.io import parse_spec
from operator_db.specs.keys import operator_key
from operator_db.specs.schema import (
    MAX_NUMEL,
    MAX_SEQUENCE_CALLS,
    SPEC_VERSION,
    Mode,
    ModelInfo,
    OperatorSpec,
    Spec,
    TensorSpec,
)

RunDevice = Literal["auto", "meta", "cpu"]


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    text = lines[0].strip() if lines else ""
    text = text if len(text) <= 300 else text[:297] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _needs_data(exc: BaseException) -> bool:
    """Whether a failure on the meta device means an op needed real data (not a real error)."""
    if isinstance(exc, NotImplementedError):
        return True
    text = str(exc).lower()
    return "meta" in text or "data-dependent" in text or "data dependent" in text


def _model_dtype(model: nn.Module) -> torch.dtype:
    for t in (*model.parameters(), *model.buffers()):
        if t.is_floating_point():
            return t.dtype
    return torch.float32


def _is_meta(model: nn.Module) -> bool:
    return any(t.device.type == "meta" for t in (*model.parameters(), *model.buffers()))


@contextmanager
def _training_flags(model: nn.Module, mode: Mode) -> Iterator[None]:
    saved = [(m, m.training) for m in model.modules()]
    model.train(mode == "training")
    try:
        yield
    finally:
        for m, training in saved:
            m.training = training


def _state_on(
    model: nn.Module, device: torch.device, dtype: torch.dtype | None
) -> dict[str, torch.Tensor] | None:
    """Return the parameters and buffers to run with on ``device``; None if the model's own fit."""
    # One name per tensor: functional_call ties the other names of a shared one (tied embeddings).
    tensors = [*model.named_parameters(), *model.named_buffers()]
    if all(
        t.device == device and (dtype is None or not t.is_floating_point() or t.dtype == dtype)
        for _, t in tensors
    ):
        return None
    return {
        name: t.to(
            device=device, dtype=dtype if dtype is not None and t.is_floating_point() else t.dtype
        )
        for name, t in tensors
    }


def _run(
    model: nn.Module,
    inputs: ModelInputs,
    *,
    device: torch.device,
    mode: Mode,
    dtype: torch.dtype | None,
    custom_leaves: CustomLeaves,
) -> Recorder:
    """Run the model once on ``device`` with the capture attached; return what it recorded."""
    recorder = Recorder(model, mode, custom_leaves)
    args, kwargs = inputs.materialize(device, dtype)
    # A model with weights elsewhere runs on ``device`` with its parameters swapped for copies
    # there (meta copies cost nothing): the user's model is left as it was.
    state = _state_on(model, device, dtype)
    grad = torch.enable_grad() if mode == "training" else torch.no_grad()
    recorder.attach()
    try:
        with _training_flags(model, mode), grad, torch.device(device), CaptureMode(recorder):
            if state is None:
                model(*args, **kwargs)
            else:
                torch.func.functional_call(model, state, tuple(args), kwargs, strict=False)
    finally:
        recorder.detach()
    return recorder


def _same_outputs(a: list[TensorSpec], b: list[TensorSpec]) -> bool:
    return [(t.shape, t.dtype) for t in a] == [(t.shape, t.dtype) for t in b]


def _finish(entry: Entry, mode: Mode, warnings: list[str], opaque: list[OpaqueOp]) -> OperatorSpec:
    """Fill in an entry's count, locations and costs (rebuilding it; live for opaque ones)."""
    op = entry.op
    update: dict[str, Any] = {"count": entry.count, "locations": entry.locations}
    if op.form != "opaque":
        cost: OpCost | None = None
        reason: str | None = None
        try:
            cost = op_cost(op, mode)
        except OperatorDBError as exc:
            reason = f"cannot be rebuilt: {exc}"
        else:
            if not _same_outputs(cost.outputs, list(op.outputs)):
                if cost.device == "meta":
                    reason = "rebuilt, it gives other outputs than in the model"
                else:
                    warnings.append(f"{op.op}: output shapes depend on data; kept the model's")
        if cost is not None and cost.device != "meta":
            warnings.append(f"{op.op}: needs data, FLOPs counted on the CPU")
        if cost is not None and cost.unclassified:
            warnings.append(f"{op.op}: no FLOP rule for {', '.join(sorted(cost.unclassified))}")
        if cost is None or reason is not None:
            opaque.append(OpaqueOp(op.op, entry.locations, entry.count, reason or "unknown"))
            return op.model_copy(update={**update, "form": "opaque"})
        update |= {
            "flops": cost.flops,
            "flop_rule": cost.flop_rule,
            "bytes": cost.bytes,
            "params": cost.params,
        }
        if mode == "training":
            update["flops_backward"] = cost.flops_backward
        return op.model_copy(update=update)
    opaque.append(OpaqueOp(op.op, entry.locations, entry.count, entry.reason or "custom"))
    if entry.live is not None:
        tally = entry.live.tally
        moved = tally.moves_data
        update |= {
            "flops": tally.flops,
            "flop_rule": tally.rule,
            "params": entry.live.params,
            "bytes": (
                compulsory_bytes(list(op.inputs), None, list(op.outputs)) + entry.live.state_bytes
            )
            if moved
            else 0,
        }
    return op.model_copy(update=update)


def _merge(ops: list[OperatorSpec], mode: Mode) -> list[OperatorSpec]:
    """Merge configurations that became equal (a rebuilt op turned opaque), adding their counts."""
    merged: dict[str, OperatorSpec] = {}
    for op in ops:
        key = operator_key(op, mode)
        if key in merged:
            first = merged[key]
            locations = first.locations + [x for x in op.locations if x not in first.locations]
            merged[key] = first.model_copy(
                update={"count": first.count + op.count, "locations": locations}
            )
        else:
            merged[key] = op
    return list(merged.values())


def _call_order(
    order: list[str],
    finished: Mapping[str, OperatorSpec],
    operators: list[OperatorSpec],
    mode: Mode,
) -> list[int] | None:
    """Return the recorded calls as indices into ``operators`` (after merging), in call order.

    None for a model of more than ``MAX_SEQUENCE_CALLS`` calls: its spec keeps counts only.
    """
    if len(order) > MAX_SEQUENCE_CALLS:
        return None
    index = {operator_key(op, mode): i for i, op in enumerate(operators)}
    merged = {key: index[operator_key(op, mode)] for key, op in finished.items()}
    return [merged[key] for key in order]


def harvest(
    model: nn.Module | str,
    example_inputs: Any = None,
    *,
    name: str | None = None,
    mode: Mode = "inference",
    dtype: torch.dtype | None = None,
    device: RunDevice = "auto",
    overrides: Mapping[str, JsonValue] | None = None,
    reference: ModelRef | str | None = None,
    custom_leaves: CustomLeaves = "trace",
    description: str | None = None,
) -> HarvestResult:
    """Describe a model as a spec of distinct operator configurations with counts, FLOPs and bytes.

    ``model`` is a module (on any device, meta included) or a reference such as
    ``"transformers:BertModel"``, built on the meta device with ``overrides`` applied to its config
    or factory. ``reference`` names the reference a module was built from: it is recorded in the
    spec and used to rebuild the model on the CPU if it needs data. ``example_inputs`` is a
    tensor, a :class:`TensorSpec`, a sequence of them (positional; specs with a name go by
    keyword) or a mapping (keyword); a reference gets its default inputs when it is None.

    The model runs once on the meta device: no weight memory, no arithmetic. With
    ``device="auto"`` a model that needs data (``x.item()``, ``if mask.any():``) runs once on the
    CPU instead, and the result says so; ``"meta"`` refuses that, ``"cpu"`` runs there directly.
    ``custom_leaves`` says what a custom leaf module (not a ``torch.nn`` class that can be rebuilt)
    becomes: ``"trace"`` (its functional calls are recorded, its parameters becoming inputs; it is
    one opaque call only where tracing fails, with the reason) or ``"opaque"`` (one with
    parameters is recorded with its shapes and live-counted cost, never measured). The result lists
    the leaves traced, the opaque calls and the calls a spec cannot describe (skipped), each with
    where it ran and why.

    FLOPs are forward FLOPs per call (and backward FLOPs in training mode), bytes compulsory bytes
    per call (``operator_db.ops.flops``). Building the model is not part of ``seconds``.

    Raises:
        HarvestError: a bad reference or inputs, or the model raised (one line).
    """
    ref = parse_reference(reference) if isinstance(reference, str) else reference
    if isinstance(model, str):
        ref = parse_reference(model, overrides)
        module = load_reference(ref)
    elif overrides:
        raise HarvestError("overrides apply to a model reference, not to a module")
    else:
        module = model
    if not isinstance(module, nn.Module):
        raise HarvestError(
            f"expected a torch.nn.Module or a reference, got {type(module).__name__}"
        )
    if example_inputs is None and ref is not None:
        example_inputs = default_inputs(ref, module)
    if example_inputs is None:
        raise HarvestError("no example inputs: give at least one tensor (or --input)")
    inputs = ModelInputs.of(example_inputs)
    if ref is not None:
        inputs = _complete(ref, module, inputs)
    specs = inputs.specs(dtype)
    if not specs:
        raise HarvestError("no example inputs: give at least one tensor (or --input)")
    started = time.perf_counter()
    used, fallback, recorder = _run_somewhere(
        module, ref, inputs, device=device, mode=mode, dtype=dtype, custom_leaves=custom_leaves
    )
    warnings: list[str] = []
    opaque: list[OpaqueOp] = []
    finished = {key: _finish(e, mode, warnings, opaque) for key, e in recorder.entries.items()}
    operators = _merge(list(finished.values()), mode)
    if not operators:
        raise HarvestError("the model ran no operator that could be recorded")
    calls = _call_order(recorder.order, finished, operators, mode)
    batch = specs[0].shape[0] if specs[0].shape else None
    default_name = ref.default_name if ref else (model_name_part(type(module).__name__) or "model")
    info = ModelInfo(
        name=name or (f"{default_name}-b{batch}" if batch else default_name),
        reference=ref.text if ref else None,
        overrides=dict(ref.overrides) if ref else {},
        mode=mode,
        dtype=dtype_name(dtype or _model_dtype(module)),  # type: ignore[arg-type]
        batch_size=batch,
        inputs=specs,
        description=description,
    )
    skipped = [SkippedCall(*item) for item in listed(recorder.skipped)]
    traced = [TracedLeaf(*item) for item in listed(recorder.traced)]
    spec = Spec(
        spec_version=SPEC_VERSION,
        model=info,
        operators=operators,
        calls=calls,
        syncs=list(recorder.syncs) if calls is not None and recorder.syncs else None,
        provenance={
            **provenance(ref, used, fallback, custom_leaves, opaque, skipped, traced),
            # The model's own count: a traced custom leaf's weights are its calls' inputs, and
            # a shared (tied) parameter is one parameter.
            "params": sum(p.numel() for p in module.parameters()),
        },
    )
    # What we write is valid, and passes the door (at the format's tensor limit: no settings here).
    admit_spec(
        parse_spec(spec.model_dump(mode="json"), f"harvest of {info.name}"),
        max_tensor_numel=MAX_NUMEL,
    )
    return HarvestResult(
        spec,
        used,
        fallback,
        opaque,
        list(dict.fromkeys(warnings)),
        time.perf_counter() - started,
        skipped,
        traced,
    )


def _complete(ref: ModelRef, module: nn.Module, inputs: ModelInputs) -> ModelInputs:
    def one(value: Any) -> Any:
        return complete_inputs(ref, module, [value])[0] if isinstance(value, TensorSpec) else value

    return ModelInputs([one(v) for v in inputs.args], {k: one(v) for k, v in inputs.kwargs.items()})


def load_reference(ref: ModelRef) -> nn.Module:
    """Build a referenced model on the meta device; on the CPU if its constructor needs data.

    Raises:
        HarvestError: the library is missing, the name unknown, or the constructor raised.
    """
    try:
        return load_model(ref, device="meta")
    except HarvestError as exc:
        if "meta" not in str(exc).lower() and "NotImplementedError" not in str(exc):
            raise
    return load_model(ref, device="cpu")


def _run_somewhere(
    module: nn.Module,
    ref: ModelRef | None,
    inputs: ModelInputs,
    *,
    device: RunDevice,
    mode: Mode,
    dtype: torch.dtype | None,
    custom_leaves: CustomLeaves,
) -> tuple[str, str | None, Recorder]:
    """Run on the meta device, or on the CPU when asked or when an op needs data."""
    fallback: str | None = None
    if device != "cpu":
        try:
            recorder = _run(
                module,
                inputs,
                device=torch.device("meta"),
                mode=mode,
                dtype=dtype,
                custom_leaves=custom_leaves,
            )
            return "meta", None, recorder
        except OperatorDBError:
            raise
        except Exception as exc:  # noqa: BLE001 - the model's own code may raise anything
            if device == "meta" or not _needs_data(exc):
                hint = " (device='auto' runs it on the CPU)" if _needs_data(exc) else ""
                raise HarvestError(f"the model raised {_first_line(exc)}{hint}") from None
            fallback = f"needs data on the meta device: {_first_line(exc)}"
    if _is_meta(module):
        if ref is None:
            raise HarvestError(
                f"the model {fallback or 'must run on the CPU'}, and it has no weights (built on "
                "the meta device); pass a model built on the CPU, or a reference"
            )
        module = load_model(ref, device="cpu")
    try:
        recorder = _run(
            module,
            inputs,
            device=torch.device("cpu"),
            mode=mode,
            dtype=dtype,
            custom_leaves=custom_leaves,
        )
    except OperatorDBError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise HarvestError(f"the model raised {_first_line(exc)}") from None
    return "cpu", fallback, recorder
