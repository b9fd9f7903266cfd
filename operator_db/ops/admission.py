"""The door for specs: what a valid spec may ask of a worker, checked before anything is stored.

The schema (``specs/``) checks the format alone. Here a spec is checked against torch and the
settings, the same way wherever it comes in (``opdb ingest``, ``POST /specs``, a harvest):

- a ``module`` or ``function`` operator must name an op of the allow-list, resolved by the same
  functions the worker builds with (``ops/resolve.py``); an ``opaque`` one is only a name (the
  schema's dotted-name pattern), never run;
- a module's constructor arguments must fit its class, and its parameters and buffers stay within
  ``max_tensor_numel`` elements (``ops/arguments.py``);
- every tensor (inputs and outputs of the model and of each operator), and the storage behind a
  strided input, holds at most ``max_tensor_numel`` elements (``OPDB_MAX_TENSOR_NUMEL``);
- so does every tensor a ``module`` or ``function`` operator's call creates from its arguments
  (factories, ``repeat``, ``expand``, ``interpolate`` sizes, intermediates): the call is run once
  on fake tensors, which allocate nothing (``ops/probe.py``), sizes that follow values taken at
  the worst the spec's value ranges allow; a size no range bounds is refused; where the run fails
  otherwise, the sizes the call's arguments write are bounded instead;
- where the door is given them (``opdb ingest``, ``POST /specs``, a study), every tensor holds at
  most ``max_tensor_bytes`` bytes (``OPDB_MAX_TENSOR_BYTES``: a complex128 tensor is 16 bytes an
  element) and a call costs at most ``max_call_flops`` FLOPs (``OPDB_MAX_CALL_FLOPS``), counted
  on the same fake run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from operator_db.errors import SpecError
from operator_db.ops.arguments import ArgumentError, check_module_args
from operator_db.ops.build import storage_numel
from operator_db.ops.cost import meta_cost
from operator_db.ops.encoding import EncodingError, input_strides
from operator_db.ops.probe import largest_argument_size, largest_created
from operator_db.ops.resolve import UnknownOperatorError, resolve_function
from operator_db.specs.io import LoadedSpec, load_specs, parse_spec
from operator_db.specs.schema import OperatorSpec, TensorSpec


@dataclass(frozen=True)
class Limits:
    """What one call of a spec's operators may ask of a worker (None: not checked)."""

    max_tensor_numel: int
    max_tensor_bytes: int | None = None
    max_call_flops: float | None = None


def admit_spec(
    loaded: LoadedSpec,
    *,
    max_tensor_numel: int,
    max_tensor_bytes: int | None = None,
    max_call_flops: float | None = None,
    recompute: bool = False,
) -> LoadedSpec:
    """Return ``loaded`` if a worker may run what it asks (see the module documentation).

    ``recompute``: return it with its operators' FLOPs and bytes counted here
    (:func:`recompute_costs`), as the doors of uploaded specs do.

    Raises:
        SpecError: naming the spec, the place (``operators[3].args.in_features``) and the problem.
    """
    limits = Limits(max_tensor_numel, max_tensor_bytes, max_call_flops)
    spec = loaded.spec
    tensors = _tensors("model.inputs", spec.model.inputs)
    for i, op in enumerate(spec.operators):
        where = f"operators[{i}]"
        tensors += _tensors(f"{where}.inputs", op.inputs) + _tensors(f"{where}.outputs", op.outputs)
        problem = _operator_problem(op, max_tensor_numel)
        if problem is not None:
            path, message = problem
            raise SpecError(loaded.source, f"{where}.{path}", message)
    for path, tensor in tensors:
        if tensor.numel > max_tensor_numel:
            raise SpecError(
                loaded.source, f"{path}.shape", _too_large(tensor.numel, max_tensor_numel)
            )
        if max_tensor_bytes is not None and tensor.nbytes > max_tensor_bytes:
            raise SpecError(
                loaded.source,
                f"{path}.shape",
                f"tensor of {tensor.nbytes} bytes ({tensor.dtype}), over the limit of "
                f"{max_tensor_bytes} (OPDB_MAX_TENSOR_BYTES)",
            )
    for i, op in enumerate(spec.operators):
        problem = _created_problem(op, limits)
        if problem is not None:
            path, message = problem
            raise SpecError(loaded.source, f"operators[{i}].{path}", message)
    return recompute_costs(loaded) if recompute else loaded


def _tensors(path: str, tensors: list[TensorSpec]) -> list[tuple[str, TensorSpec]]:
    return [(f"{path}[{j}]", t) for j, t in enumerate(tensors)]


def _over(limit: int) -> str:
    return f"over the limit of {limit} (OPDB_MAX_TENSOR_NUMEL)"


def _too_large(numel: int, limit: int) -> str:
    return f"tensor of {numel} elements, {_over(limit)}"


def _operator_problem(op: OperatorSpec, max_numel: int) -> tuple[str, str] | None:
    """Return (path inside the operator, message) of what a worker would refuse, or None."""
    try:
        if op.form == "module":
            check_module_args(op.op, op.args, max_numel=max_numel)
        elif op.form == "function":
            resolve_function(op.op)
    except UnknownOperatorError as exc:
        return "op", str(exc)
    except ArgumentError as exc:
        return ("args" if exc.name is None else f"args.{exc.name}"), f"{op.op}: {exc.detail}"
    if op.call is None:
        return None
    try:
        strides = input_strides(op.call.model_dump(mode="json"))
    except EncodingError as exc:
        return "call", str(exc)
    for i, stride in strides.items():
        if not 0 <= i < len(op.inputs) or len(stride) != len(op.inputs[i].shape):
            return "call", f"the stride {stride} does not fit input {i}"
        numel = storage_numel(op.inputs[i].shape, stride)
        if numel > max_numel:
            return "call", f"strided input {i}: storage of {numel} elements, over the limit of " + (
                f"{max_numel} (OPDB_MAX_TENSOR_NUMEL)"
            )
    return None


def _created_problem(op: OperatorSpec, limits: Limits) -> tuple[str, str] | None:
    """Return (path inside the operator, message) where its call creates or costs too much.

    A size that nothing bounds is too much.
    """
    if op.form == "opaque":
        return None
    created = largest_created(op)
    max_numel = limits.max_tensor_numel
    if created.unbounded:
        return "call", f"{op.op}: {created.failure}; a size it cannot bound is refused"
    if created.numel > max_numel:
        made = f"{op.op} creates a tensor of {created.numel} elements ({created.aten})"
        return "call", f"{made}, {_over(max_numel)}"
    if limits.max_tensor_bytes is not None and created.nbytes > limits.max_tensor_bytes:
        made = f"{op.op} creates a tensor of {created.nbytes} bytes"
        return (
            "call",
            f"{made}, over the limit of {limits.max_tensor_bytes} (OPDB_MAX_TENSOR_BYTES)",
        )
    if created.failure is None:
        if limits.max_call_flops is not None and created.flops > limits.max_call_flops:
            return "call", (
                f"{op.op}: a call of {created.flops:.3g} FLOPs, over the limit of "
                f"{limits.max_call_flops:.3g} (OPDB_MAX_CALL_FLOPS)"
            )
        return None
    if op.call is None:  # the inputs alone, already bounded
        return None
    size = largest_argument_size(op.call.args, dict(op.call.kwargs))
    if size <= max_numel:
        return None
    asked = f"{op.op} asks for a tensor of {size} elements in its arguments"
    return "call", f"{asked}, {_over(max_numel)}"


GIVEN = "given by the spec"
"""The ``flop_rule`` of an operator whose FLOPs and bytes could not be counted here (kept)."""


def recompute_costs(loaded: LoadedSpec) -> LoadedSpec:
    """Return ``loaded`` with each operator's FLOPs, bytes and parameters counted here.

    A spec's own figures were stored as given (``Linear 4096² flops: 1``), and the first upload
    of a configuration fixed them for every model sharing it. Each ``module`` and ``function``
    operator is counted on the meta device (``ops.cost.meta_cost``: the same rules as a harvest);
    where that cannot run, the spec's figures are kept and its ``flop_rule`` says they were
    ``GIVEN``. Opaque operators keep theirs (nothing can count them).

    Raises:
        SpecError: the counted figures break a limit of the format (a model's totals).
    """
    spec = loaded.spec
    data = spec.model_dump(mode="json")
    for i, op in enumerate(spec.operators):
        if op.form == "opaque":
            continue
        cost = meta_cost(op, spec.model.mode)
        target = data["operators"][i]
        if cost is None:
            if op.flops is not None or op.bytes is not None:
                target["flop_rule"] = GIVEN
            continue
        target.update(
            flops=cost.flops,
            flops_backward=cost.flops_backward,
            flop_rule=cost.flop_rule,
            bytes=cost.bytes,
            params=cost.params,
        )
    return parse_spec(data, loaded.source)


def load_admitted(
    paths: Iterable[str | Path],
    *,
    max_spec_bytes: int,
    max_tensor_numel: int,
    max_tensor_bytes: int | None = None,
    max_call_flops: float | None = None,
    recompute: bool = False,
) -> list[LoadedSpec]:
    """Load and validate spec files whole (files, directories or globs), and admit each.

    Raises:
        SpecError: the first file that is not valid, or asks what a worker may not run.
    """
    return [
        admit_spec(
            loaded,
            max_tensor_numel=max_tensor_numel,
            max_tensor_bytes=max_tensor_bytes,
            max_call_flops=max_call_flops,
            recompute=recompute,
        )
        for loaded in load_specs(paths, max_bytes=max_spec_bytes)
    ]
