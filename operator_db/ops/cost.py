"""The cost of one operator configuration from the spec alone: FLOPs, bytes, parameters, outputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from operator_db.errors import OperatorDBError
from operator_db.ops.build import (
    BuiltOp,
    OperatorBuildError,
    build_op,
    first_line,
    output_specs,
)
from operator_db.ops.flops import FlopTally, Tally
from operator_db.ops.resolve import UnknownOperatorError
from operator_db.specs.schema import DTYPE_BYTES, Mode, OperatorSpec, TensorSpec


@dataclass(frozen=True)
class OpCost:
    """What one call of an op costs and produces; FLOPs are FLOPs (never MACs), bytes are bytes."""

    flops: int
    """Forward FLOPs per call."""
    flops_backward: int | None
    """Backward FLOPs per call (training mode only)."""
    flop_rule: str
    """The rule that counted :attr:`flops` (``operator_db.ops.flops``)."""
    bytes: int
    """Compulsory bytes per call: inputs, parameters, buffers and outputs once; 0 for views."""
    params: int
    """Parameter count of the module (elements)."""
    outputs: list[TensorSpec]
    device: str
    """Where it was counted: ``meta`` (shapes only), or ``cpu`` for an op that needs data."""
    unclassified: frozenset[str] = frozenset()
    """ATen ops that ran but no FLOP rule knows (counted as 0)."""


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _state_bytes(
    inputs: list[TensorSpec], module: torch.nn.Module | None, mode: Mode = "inference"
) -> int:
    """Bytes of a module's parameters and buffers one call reads, B.

    An ``nn.Embedding`` lookup at inference reads the rows it gathers (one per index, at most the
    table), not the table: Llama 2's 262 MB table for a few tokens' rows. Training writes the
    table's dense gradient, so it counts the table.
    """
    if module is None:
        return 0
    table = sum(_nbytes(t) for t in (*module.parameters(), *module.buffers()))
    if isinstance(module, torch.nn.Embedding) and mode == "inference" and inputs:
        row = module.embedding_dim * module.weight.element_size()
        return min(inputs[0].numel * row, table)
    return table


def compulsory_bytes(
    inputs: list[TensorSpec],
    module: torch.nn.Module | None,
    outputs: list[TensorSpec],
    mode: Mode = "inference",
) -> int:
    """Bytes of every input, parameter, buffer and output of one call, each counted once, B.

    Parameters and buffers: what the call reads of them (``_state_bytes``).
    """
    return (
        sum(t.nbytes for t in inputs)
        + _state_bytes(inputs, module, mode)
        + sum(t.numel * DTYPE_BYTES[t.dtype] for t in outputs)
    )


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def measure_cost(built: BuiltOp) -> tuple[Tally, Tally | None, Any]:
    """Run a built op once under FLOP tallies: (forward tally, backward tally or None, output)."""
    if built.mode == "inference":
        with torch.no_grad(), FlopTally() as forward:
            out = built.forward()
        return forward.result, None, out
    with FlopTally() as forward:
        out = built.forward()
    outputs = [t for t in _tensors(out) if t.requires_grad]
    with FlopTally() as backward:
        if outputs and built.grad_targets:
            torch.autograd.grad(
                outputs, built.grad_targets, built.grad_outputs[: len(outputs)], allow_unused=True
            )
    return forward.result, backward.result, out


def _cost_on(op: OperatorSpec, mode: Mode, device: str) -> OpCost:
    built = build_op(op, mode=mode, device=device)
    forward, backward, out = measure_cost(built)
    outputs = output_specs(out)
    params = 0 if built.module is None else sum(p.numel() for p in built.module.parameters())
    moved = forward.moves_data or (backward is not None and backward.moves_data)
    nbytes = compulsory_bytes(list(op.inputs), built.module, outputs, mode) if moved else 0
    unclassified = forward.unclassified | (backward.unclassified if backward else set())
    return OpCost(
        flops=forward.flops,
        flops_backward=None if backward is None else backward.flops,
        flop_rule=forward.rule,
        bytes=nbytes,
        params=params,
        outputs=outputs,
        device=device,
        unclassified=frozenset(unclassified),
    )


def meta_cost(op: OperatorSpec, mode: Mode = "inference") -> OpCost | None:
    """Count one configuration's cost on the meta device alone, or None where it cannot run there.

    Never allocates: the doors of untrusted specs (``ops.admission.recompute_costs``) use it.
    """
    if op.form == "opaque":
        return None
    try:
        return _cost_on(op, mode, "meta")
    except Exception:  # noqa: BLE001 - meta kernels may be missing, an op may raise anything
        return None


def op_cost(op: OperatorSpec, mode: Mode = "inference") -> OpCost:
    """Count one configuration's cost by rebuilding it from the spec alone.

    It runs on the meta device (shapes only: no memory, no arithmetic). An op the meta device
    cannot run (one that needs data) is built and run once on the CPU instead, with random inputs.

    Raises:
        UnknownOperatorError: the op is opaque or not an allowed operator.
        OperatorBuildError: the op cannot be built or run on either device.
    """
    try:
        return _cost_on(op, mode, "meta")
    except UnknownOperatorError:
        raise
    except Exception as exc:  # noqa: BLE001 - meta kernels may be missing; the CPU decides
        meta_error = exc
    try:
        return _cost_on(op, mode, "cpu")
    except OperatorDBError:
        raise
    except Exception as exc:  # noqa: BLE001 - an op may raise anything; one line for the user
        raise OperatorBuildError(
            f"cannot run {op.op} on meta ({type(meta_error).__name__}) nor on cpu "
            f"({first_line(exc)})"
        ) from None
