"""What a cost model reads of an operator configuration, and the roofline bound it scales.

A configuration's cost is predicted as a multiple of its roofline bound
max(FLOPs / peak FLOP/s, bytes / bandwidth) on the kind: the target is ln(time / bound), and a
predicted time is never below the bound. The features are the configuration's work (FLOPs,
bytes, arithmetic intensity, the bound itself, parameters), its tensors' shapes, its numeric
arguments (kernel sizes, strides, channels, heads ...) and its dtype, all from the canonical
configuration, so that a configuration never measured anywhere has them too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from operator_db.roofline.bounds import Peaks
from operator_db.specs.schema import DTYPE_BYTES

MIN_BOUND_S = 1e-9
"""The smallest roofline bound a target is scaled by, s: work of no FLOPs and no bytes (a view,
an identity) still takes time, which its model predicts as this many times 1 ns."""

GENERIC_FEATURES = (
    "ln_flops",
    "ln_bytes",
    "ln_intensity",
    "ln_bound",
    "compute_bound",
    "ln_params",
    "inputs",
    "ln_input0",
    "rank0",
    "ln_dim0_1",
    "ln_dim0_2",
    "ln_dim0_3",
    "ln_dim0_4",
    "ln_input1",
    "ln_dim1_1",
    "ln_dim1_2",
    "ln_output0",
    "ln_out0_1",
    "ln_out0_2",
    "training",
    "dtype_bytes",
)
"""Features every configuration has, whatever its operator type (``ln_dim0_k``: the k-th last
dimension of the first input, ``ln_dim1_k`` of the second, ``ln_out0_k`` of the first output; 0
where it has fewer)."""


class ConfigLike(Protocol):
    """What the features read of a configuration (an ``OperatorConfig`` row has it all)."""

    op: str
    mode: str
    dtype: str | None
    args: dict[str, Any]
    inputs: list[Any]
    outputs: list[Any]
    flops: int | None
    flops_backward: int | None
    bytes: int | None
    params: int


FLOATING = frozenset({"float16", "bfloat16", "float32", "float64"})
"""Element types a call computes in (whose peak bounds it)."""


def dtype_of(cfg: Any) -> str:
    """Return the element type a configuration computes in.

    Its own (a module's parameters), else its first floating input's (a function: ``x + y`` of
    two float16 tensors computes in float16), else float32.
    """
    if cfg.dtype:
        return str(cfg.dtype)
    for tensor in cfg.inputs or []:
        dtype = (
            tensor.get("dtype") if isinstance(tensor, Mapping) else getattr(tensor, "dtype", None)
        )
        if dtype in FLOATING:
            return str(dtype)
    return "float32"


def work_flops(cfg: ConfigLike) -> float:
    """Return the FLOPs of one measured call: forward, plus backward for a training config."""
    flops = float(cfg.flops or 0)
    if cfg.mode == "training":
        flops += float(cfg.flops_backward or 0)
    return flops


def bound_s(cfg: ConfigLike, peaks: Peaks) -> float:
    """Return the configuration's roofline bound on ``peaks``, in s (at least ``MIN_BOUND_S``)."""
    return max(peaks.bound_s(work_flops(cfg), float(cfg.bytes or 0)), MIN_BOUND_S)


def predictable(cfg: Any) -> bool:
    """Whether a cost model can predict the configuration: not opaque, with its work counted."""
    return getattr(cfg, "form", "module") != "opaque" and cfg.bytes is not None


def _ln(x: float) -> float:
    return math.log(x) if x > 0 else 0.0


def _shape(tensor: Any) -> list[int]:
    shape = tensor.get("shape", []) if isinstance(tensor, Mapping) else []
    return [int(d) for d in shape]


def _numel(tensor: Any) -> float:
    shape = _shape(tensor)
    return float(math.prod(shape)) if shape else 0.0


def generic_features(cfg: ConfigLike, peaks: Peaks) -> dict[str, float]:
    """Return the ``GENERIC_FEATURES`` of a configuration with its bound on ``peaks``."""
    flops = work_flops(cfg)
    nbytes = float(cfg.bytes or 0)
    shape0 = _shape(cfg.inputs[0]) if cfg.inputs else []
    out: dict[str, float] = {
        "ln_flops": math.log1p(flops),
        "ln_bytes": math.log1p(nbytes),
        "ln_intensity": math.log((flops + 1.0) / (nbytes + 1.0)),
        "ln_bound": math.log(bound_s(cfg, peaks)),
        "compute_bound": float(peaks.bound_type(flops, nbytes) == "compute"),
        "ln_params": math.log1p(float(cfg.params or 0)),
        "inputs": float(len(cfg.inputs)),
        "ln_input0": math.log1p(_numel(cfg.inputs[0])) if cfg.inputs else 0.0,
        "rank0": float(len(shape0)),
        "ln_input1": math.log1p(_numel(cfg.inputs[1])) if len(cfg.inputs) > 1 else 0.0,
        "ln_output0": math.log1p(_numel(cfg.outputs[0])) if cfg.outputs else 0.0,
        "training": float(cfg.mode == "training"),
        "dtype_bytes": float(DTYPE_BYTES.get(dtype_of(cfg), 4)),
    }
    for prefix, tensors, index, last in (
        ("ln_dim0", cfg.inputs, 0, 4),
        ("ln_dim1", cfg.inputs, 1, 2),
        ("ln_out0", cfg.outputs, 0, 2),
    ):
        dims = list(reversed(_shape(tensors[index]))) if len(tensors) > index else []
        for k in range(1, last + 1):
            out[f"{prefix}_{k}"] = _ln(float(dims[k - 1])) if k <= len(dims) else 0.0
    return out


def arg_features(args: Mapping[str, Any]) -> dict[str, float]:
    """Return the numeric arguments as ``arg_NAME`` features (a list: the product of its items).

    Booleans are 0 or 1; strings, None and nested values are left out.
    """
    out: dict[str, float] = {}
    for name, value in args.items():
        if isinstance(value, bool) or isinstance(value, int | float) and math.isfinite(value):
            out[f"arg_{name}"] = float(value)
        elif (
            isinstance(value, Sequence)
            and not isinstance(value, str)
            and value
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        ):
            out[f"arg_{name}"] = float(math.prod(value))
    return out


def features(cfg: ConfigLike, peaks: Peaks) -> dict[str, float]:
    """Return every feature of a configuration: the generic ones and its numeric arguments."""
    return {**generic_features(cfg, peaks), **arg_features(cfg.args or {})}


MISSING = -1.0
"""An argument a configuration does not have (one of another operator type's; every argument
feature is ≥ 0). A number, not NaN: scikit-learn's boosting cannot bin a column that is all NaN
in a fold. The generic features are always there."""


def matrix(rows: Sequence[Mapping[str, float]], names: Sequence[str]) -> list[list[float]]:
    """Return the rows as a matrix in ``names`` order, ``MISSING`` where a row lacks a feature."""
    return [[float(row.get(name, MISSING)) for name in names] for row in rows]
