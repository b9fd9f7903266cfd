"""What the cross-device predictor reads: a configuration's shape, and a GPU's spec sheet beside it.

A row is one (configuration, GPU) pair. Its configuration part (:func:`config_row`) is the same on
every GPU: the family the operator belongs to, its work (FLOPs, bytes) and shape (GEMM dimensions,
rows, the last dimensions of its tensors). Its device part (:func:`device_columns`) sets that work
against the GPU's spec sheet: roofline time, compute and DRAM time, where the ridge is, bytes per
L2, and how the work spreads over the SMs (GEMM tiles in waves; rows and threads per SM). No
feature reads a measurement: a GPU nobody has measured has them all.

The target is ln(time / base): ``base`` is the FP32 compute time for GEMMs and convolutions, the
DRAM time for the rest (``FAMILY_BASE``); the offset of a GPU is its typical ln(time / base).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd

from operator_db.predict.devices import GpuFacts
from operator_db.predict.features import dtype_of, generic_features, work_flops
from operator_db.roofline.bounds import Peaks

Base = Literal["compute", "memory"]

FAMILY_BASE: Mapping[str, Base] = {
    "bmm": "compute",
    "linear": "compute",
    "conv": "compute",
    "layernorm": "memory",
    "softmax": "memory",
    "elementwise": "memory",
    "other": "memory",
}
"""Each family's base: the time its ln(time / base) is measured against."""

GEMM_FAMILIES = ("bmm", "linear")
TILES = ((128, 128), (128, 64), (64, 64), (32, 128), (128, 32))
"""Candidate SIMT SGEMM tiles (along the output's columns, along its rows): cuBLAS's on every
NVIDIA generation since Maxwell (the kernel names of NeuSight's traces)."""
WAVE_TILES = TILES[:3]
SHAPE_COLUMNS = (
    "ln_flops",
    "ln_bytes",
    "ln_intensity",
    "ln_params",
    "inputs",
    "ln_input0",
    "rank0",
    "ln_dim0_1",
    "ln_dim0_2",
    "ln_dim0_3",
    "ln_dim0_4",
    "ln_dim1_1",
    "ln_dim1_2",
    "ln_out0_1",
    "ln_out0_2",
    "training",
)
"""The configuration's own features (``predict.features``), the same on every GPU."""
CONV_ARGS = ("arg_kernel_size", "arg_stride", "arg_padding", "arg_groups")
MIN_BASE_S = 1e-9
"""The smallest base a time is divided by, s (work of no FLOPs and no bytes)."""
_NO_PEAKS = Peaks(1.0, 1.0)


def family_of(op: str, flop_rule: str | None) -> str:
    """Return an operator's family: which of the predictor's models predicts it."""
    name = op.rsplit(".", 1)[-1].lower()
    rule = flop_rule or ""
    if name in ("bmm", "baddbmm", "matmul"):
        return "bmm"
    if name in ("linear", "addmm", "mm"):
        return "linear"
    if name.startswith("conv") and "transpose" not in name:
        return "conv"
    if any(n in name for n in ("layernorm", "layer_norm", "rmsnorm", "rms_norm")):
        return "layernorm"
    if "softmax" in name:
        return "softmax"
    if rule == "elementwise":
        return "elementwise"
    return "other"


def _shape(tensor: Any) -> list[int]:
    shape = tensor.get("shape", []) if isinstance(tensor, Mapping) else []
    return [int(d) for d in shape]


def _gemm(cfg: Any, family: str) -> tuple[float, float, float, float]:
    """Return (B, M, N, K): B products of (M × N) by (N × K); 0s where not a GEMM."""
    inputs = [_shape(t) for t in cfg.inputs]
    if family == "bmm" and len(inputs) >= 2 and len(inputs[0]) >= 2 and inputs[1]:
        a, b = inputs[0], inputs[1]
        batch = math.prod(a[:-2]) if len(a) > 2 else 1
        return float(batch), float(a[-2]), float(a[-1]), float(b[-1])
    if family == "linear" and inputs and inputs[0]:
        args = cfg.args or {}
        n = int(args.get("in_features") or inputs[0][-1])
        k = args.get("out_features")
        if k is None and len(inputs) > 1 and inputs[1]:
            k = inputs[1][0] if cfg.op.endswith("linear") else inputs[1][-1]
        m = math.prod(inputs[0]) // max(n, 1)
        return 1.0, float(m), float(n), float(k or 1)
    return 0.0, 0.0, 0.0, 0.0


def config_row(cfg: Any) -> dict[str, Any]:
    """Return a configuration's own columns: family, op, work, GEMM shape, rows, shape features."""
    family = family_of(cfg.op, getattr(cfg, "flop_rule", None))
    feats = generic_features(cfg, _NO_PEAKS)
    shape0 = _shape(cfg.inputs[0]) if cfg.inputs else []
    out0 = _shape(cfg.outputs[0]) if cfg.outputs else shape0
    numel = float(math.prod(out0)) if out0 else 0.0
    last = float(out0[-1]) if out0 else 1.0
    b, m, n, k = _gemm(cfg, family)
    row: dict[str, Any] = {
        "config_id": getattr(cfg, "id", None),
        "key": cfg.key,
        "family": family,
        "op": cfg.op,
        "dtype": dtype_of(cfg),
        "flops": work_flops(cfg),
        "bytes": float(cfg.bytes or 0),
        "B": b,
        "M": m,
        "N": n,
        "K": k,
        "elements": numel,
        "rows": numel / max(last, 1.0),
        "h_mod4": float(int(last) % 4 == 0),
    }
    row.update({c: feats[c] for c in SHAPE_COLUMNS})
    args = cfg.args or {}
    for name in CONV_ARGS:
        value = args.get(name.removeprefix("arg_"))
        if isinstance(value, Sequence) and not isinstance(value, str):
            value = math.prod(int(v) for v in value) if value else None
        row[name] = float(value) if isinstance(value, int | float) else -1.0
    return row


def config_frame(configs: Sequence[Any]) -> pd.DataFrame:
    """Return :func:`config_row` of each configuration that can be predicted, one row each."""
    rows = [config_row(c) for c in configs if getattr(c, "form", "") != "opaque" and c.bytes]
    return pd.DataFrame(rows)


def facts_columns(kinds: pd.Series, facts: Mapping[str, GpuFacts]) -> dict[str, np.ndarray]:
    """Return the spec-sheet facts of each row's GPU (``kinds``: names) as arrays."""
    codes, names = pd.factorize(kinds)
    found = [facts[str(k)] for k in names]
    return {
        n: np.asarray([float(getattr(f, n)) for f in found], dtype=np.float64)[codes]
        for n in ("sms", "flops_per_s", "bytes_per_s", "l2_bytes", "max_threads_per_sm")
    }


def base_s(frame: pd.DataFrame, facts: Mapping[str, GpuFacts], base: Base) -> np.ndarray:
    """Return each row's base time on its GPU (``frame.kind``), s: compute or DRAM time."""
    d = facts_columns(frame["kind"], facts)
    flops, nbytes = frame["flops"].to_numpy(), frame["bytes"].to_numpy()
    value = flops / d["flops_per_s"] if base == "compute" else nbytes / d["bytes_per_s"]
    roof = np.maximum(flops / d["flops_per_s"], nbytes / d["bytes_per_s"])
    return np.asarray(np.maximum(np.where(value > 0, value, roof), MIN_BASE_S), dtype=np.float64)


def roofline_s(frame: pd.DataFrame, facts: Mapping[str, GpuFacts]) -> np.ndarray:
    """Return each row's roofline bound on its GPU from the spec sheet, s."""
    d = facts_columns(frame["kind"], facts)
    flops, nbytes = frame["flops"].to_numpy(), frame["bytes"].to_numpy()
    roof = np.maximum(flops / d["flops_per_s"], nbytes / d["bytes_per_s"])
    return np.asarray(np.maximum(roof, MIN_BASE_S), dtype=np.float64)


def _shape_columns(frame: pd.DataFrame, family: str) -> dict[str, np.ndarray]:
    x = {c: frame[c].to_numpy(np.float64) for c in SHAPE_COLUMNS}
    if family in GEMM_FAMILIES:
        b, m, n, k = (frame[c].to_numpy(np.float64) for c in "BMNK")
        x["lB"], x["lM"], x["lN"], x["lK"] = (np.log2(np.maximum(v, 1)) for v in (b, m, n, k))
        for t1, t2 in TILES:
            padded = np.ceil(k / t1) * t1 * np.ceil(m / t2) * t2
            x[f"pad{t1}x{t2}"] = m * k / np.maximum(padded, 1)
        x["n_mod4"] = (n % 4 == 0).astype(float)
    elif family == "conv":
        for name in CONV_ARGS:
            x[name] = frame[name].to_numpy(np.float64)
    else:
        x["lrows"] = np.log2(np.maximum(frame["rows"].to_numpy(np.float64), 1))
        x["h_mod4"] = frame["h_mod4"].to_numpy(np.float64)
    return x


def shape_features(frame: pd.DataFrame, family: str) -> pd.DataFrame:
    """Return the device-independent features of a family's rows."""
    return pd.DataFrame(_shape_columns(frame, family), index=frame.index)


def device_features(
    frame: pd.DataFrame, family: str, facts: Mapping[str, GpuFacts]
) -> pd.DataFrame:
    """Return the shape features and the features relating them to each row's GPU."""
    x = _shape_columns(frame, family)
    d = facts_columns(frame["kind"], facts)
    flops = np.maximum(frame["flops"].to_numpy(np.float64), 1.0)
    nbytes = np.maximum(frame["bytes"].to_numpy(np.float64), 1.0)
    sms = d["sms"]
    tc, tm = flops / d["flops_per_s"], nbytes / d["bytes_per_s"]
    x["lroof"] = np.log2(np.maximum(tc, tm))
    x["ltc"], x["ltm"] = np.log2(tc), np.log2(tm)
    x["ridge"] = np.log2(flops / nbytes) - np.log2(d["flops_per_s"] / d["bytes_per_s"])
    x["lbytes_l2"] = np.log2(nbytes / d["l2_bytes"])
    if family in GEMM_FAMILIES:
        b, m, k = (frame[c].to_numpy(np.float64) for c in "BMK")
        for t1, t2 in WAVE_TILES:
            tiles = np.maximum(b * np.ceil(k / t1) * np.ceil(m / t2), 1)
            x[f"lw{t1}x{t2}"] = np.log2(tiles / sms)
            x[f"q{t1}x{t2}"] = tiles / (np.ceil(tiles / sms) * sms)
        x["lflops_sm"] = np.log2(flops / sms)
    else:
        rows = np.maximum(frame["rows"].to_numpy(np.float64), 1.0)
        elements = np.maximum(frame["elements"].to_numpy(np.float64), 1.0)
        x["lrows_sm"] = np.log2(rows / sms)
        x["lthr_waves"] = np.log2(elements / 4 / (sms * d["max_threads_per_sm"]))
    return pd.DataFrame(x, index=frame.index)


def shape_space(frame: pd.DataFrame, family: str) -> np.ndarray:
    """Return the rows in log-shape space: where calibration points are chosen and smoothed."""
    if family in GEMM_FAMILIES:
        cols = ["B", "M", "N", "K"] if family == "bmm" else ["M", "N", "K"]
        return np.asarray(np.log2(np.maximum(frame[cols].to_numpy(np.float64), 1)))
    return np.column_stack(
        [
            np.log2(np.maximum(frame["rows"].to_numpy(np.float64), 1)),
            np.log2(np.maximum(frame["elements"].to_numpy(np.float64), 1)),
            frame["ln_flops"].to_numpy(np.float64),
        ]
    )
