"""Bytes of one call of a configuration, read off its stored shapes, and a model's totals.

A configuration stores its inputs and outputs (shape and dtype each) and ``bytes``, the compulsory
traffic of one forward call: every input, parameter, buffer and output once (0 for a view, which
moves nothing). From them:

- **activation bytes**: what a call writes as its outputs (Σ numel × element size), 0 for a view
  (its output aliases its input). Summed over a model (× count), the memory its forward writes as
  activations: an upper bound of the peak, since a framework frees most of them as it goes
  (inference) and keeps most of them for the backward (training).
- **state bytes**: parameters and buffers, ``bytes − inputs − outputs`` (never below 0).
- **backward bytes**: an estimate of the compulsory traffic of one backward call from the same
  shapes: it reads the gradient of each floating-point output, the saved inputs and the state, and
  writes the gradient of each floating-point input and of the state. That is outputs + 2 × inputs
  + 2 × state for float tensors (integer inputs, such as token ids, get no gradient but are read).
  An operator saving its output rather than its input (ReLU, softmax) reads as many bytes, since
  the two have the same size; what the estimate leaves out is scratch space and recomputation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from operator_db.db.models import Model
from operator_db.db.queries import ModelConfig
from operator_db.specs.schema import DTYPE_BYTES

_FLOATING = frozenset({"float64", "float32", "float16", "bfloat16", "complex64", "complex128"})
"""Dtypes that carry gradients (float8 formats are stored, not trained in)."""


def tensor_bytes(tensor: Mapping[str, Any]) -> int:
    """Return the bytes of one stored tensor (``{"shape": [...], "dtype": ...}``; float32 default).

    An unknown dtype counts 4 bytes per element.
    """
    numel = 1
    for dim in tensor.get("shape", []):
        numel *= int(dim)
    return numel * DTYPE_BYTES.get(str(tensor.get("dtype", "float32")), 4)


def _total(tensors: Iterable[Any], *, floating_only: bool = False) -> int:
    return sum(
        tensor_bytes(t)
        for t in tensors
        if isinstance(t, Mapping)
        and (not floating_only or str(t.get("dtype", "float32")) in _FLOATING)
    )


def is_view(nbytes: int | None) -> bool:
    """Say whether a configuration moves no bytes (a view: stored ``bytes`` of 0)."""
    return nbytes == 0


def activation_bytes(outputs: Iterable[Any], nbytes: int | None) -> int:
    """Return the bytes one call writes as outputs (0 for a view, or where none are stored)."""
    return 0 if is_view(nbytes) else _total(outputs)


def state_bytes(inputs: Iterable[Any], outputs: Iterable[Any], nbytes: int | None) -> int:
    """Return the bytes of parameters and buffers one call reads: bytes − inputs − outputs, ≥ 0."""
    if not nbytes:
        return 0
    return max(0, nbytes - _total(inputs) - _total(outputs))


def backward_bytes(inputs: Iterable[Any], outputs: Iterable[Any], nbytes: int | None) -> int:
    """Return the estimated compulsory bytes of one backward call (see the module docstring).

    Gradient of the float outputs read, saved inputs and state read, gradient of the float inputs
    and of the state written; 0 for a view.
    """
    if is_view(nbytes):
        return 0
    ins, outs = list(inputs), list(outputs)
    state = state_bytes(ins, outs, nbytes)
    return (
        _total(outs, floating_only=True) + _total(ins) + _total(ins, floating_only=True) + 2 * state
    )


# --- a model's totals ------------------------------------------------------------------------


def _unique_calls(count: int, locations: Sequence[Any]) -> int:
    """How many distinct modules run a configuration: its locations, else its count."""
    return min(count, len(set(map(str, locations)))) if locations else count


@dataclass
class ModelTotals:
    """Per-call totals of one model over its configurations (count × per call each)."""

    flops: int = 0
    """Forward FLOPs."""
    flops_backward: int | None = None
    """Backward FLOPs (None when no configuration has a backward count)."""
    params: int = 0
    """Distinct parameters, elements: Σ params × distinct modules running each configuration."""
    activation_bytes: int = 0
    """Bytes the forward writes as outputs (:func:`activation_bytes`)."""
    bytes_forward: int = 0
    """Compulsory bytes of the forward (the stored ``bytes``)."""
    bytes_backward: int = 0
    """Estimated compulsory bytes of the backward (:func:`backward_bytes`)."""


def model_totals(model: Model, configs: Sequence[ModelConfig]) -> ModelTotals:
    """Sum a model's configurations into :class:`ModelTotals` (opaque ones included).

    ``params`` is the parameter count the model's harvest recorded (``provenance["params"]``,
    elements) where it is an integer, since the sum over the configurations misses the weights of
    traced custom leaves (inputs of their calls); specs from before that get the sum.
    """
    params = (model.provenance or {}).get("params")
    t = ModelTotals()
    for mc in configs:
        cfg, count = mc.config, mc.count
        t.flops += count * (cfg.flops or 0)
        if cfg.flops_backward is not None:
            t.flops_backward = (t.flops_backward or 0) + count * cfg.flops_backward
        t.params += cfg.params * _unique_calls(count, mc.locations)
        t.activation_bytes += count * activation_bytes(cfg.outputs, cfg.bytes)
        t.bytes_forward += count * (cfg.bytes or 0)
        t.bytes_backward += count * backward_bytes(cfg.inputs, cfg.outputs, cfg.bytes)
    if isinstance(params, int) and not isinstance(params, bool):
        t.params = params
    return t


def step_figures(mode: str, totals: ModelTotals) -> tuple[int, int]:
    """Return (FLOPs, compulsory bytes) of one measured call: forward, + backward in training."""
    if mode != "training":
        return totals.flops, totals.bytes_forward
    return (
        totals.flops + (totals.flops_backward or 0),
        totals.bytes_forward + totals.bytes_backward,
    )
