"""How far ln predictions are from the truth: absolute percentage errors and their summary."""

from __future__ import annotations

import math

import numpy as np


def errors(ln_pred: np.ndarray, ln_true: np.ndarray) -> np.ndarray:
    """Return absolute percentage errors of ln predictions, %."""
    return np.asarray(np.abs(np.exp(ln_pred - ln_true) - 1) * 100)


def summary(ln_pred: np.ndarray, ln_true: np.ndarray, low: float, high: float) -> dict[str, float]:
    """Return n, median and mean absolute % error and interval coverage (%) of predictions."""
    if len(ln_true) == 0:
        return {"n": 0, "median": math.nan, "mean": math.nan, "coverage": math.nan}
    e = errors(ln_pred, ln_true)
    r = ln_true - ln_pred
    return {
        "n": float(len(e)),
        "median": float(np.median(e)),
        "mean": float(np.mean(e)),
        "coverage": float(np.mean((r >= low) & (r <= high)) * 100),
    }
