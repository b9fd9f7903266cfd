"""Few-shot: a GPU with a few results of a family, and which configurations those should be.

**Which** (:func:`design`): per family, ``CALIBRATION`` configurations chosen by farthest-point
sampling in standardized log-shape space among the configurations measured on several GPUs
(the data set's transformer-sized shapes), starting at the one nearest the median. The choice
depends on the stored data only, so every new GPU gets the same set (``opdb predict calibrate``).

**How** (:func:`calibrated`): the bases of the zero-shot model (every training GPU's profile
moved by the roofline, and the shared model without offset) are mixed by non-negative least
squares plus an intercept to fit the calibration results; then the residuals left at the
calibration shapes are smoothed over log-shape space (Gaussian, bandwidth 1 standard deviation,
shrunk toward 0 with a prior weight of 1); far from every calibration shape (in shape or in
roofline time) the prediction returns to the zero-shot one. With fewer than ``MIN_MIX`` results,
or for element-wise operators (one offset explains them), only the median offset is fitted.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from operator_db.predict.across.features import roofline_s, shape_space
from operator_db.predict.across.model import FamilyModel
from operator_db.predict.devices import GpuFacts

CALIBRATION: Mapping[str, int] = {
    "bmm": 14,
    "linear": 11,
    "softmax": 9,
    "layernorm": 7,
    "elementwise": 4,
    "conv": 5,
}
"""Calibration configurations per family: 50 in all."""
MIN_MIX = 3
OFFSET_ONLY = ("elementwise", "other")
GATE_ROOF_LN = 0.5
"""Beyond the calibrated range of ln roofline time, the weight of the calibrated prediction
falls as a Gaussian of this standard deviation (ln)."""
GATE_SHAPE_SD = 1.5
"""... and with the distance to the nearest calibration shape (standardized units)."""


def design(pool: pd.DataFrame, family: str, k: int | None = None) -> list[int]:
    """Return the positions in ``pool`` (one family's candidate configurations) to calibrate on."""
    k = CALIBRATION.get(family, 0) if k is None else k
    if k <= 0 or pool.empty:
        return []
    z = shape_space(pool, family)
    sd = z.std(axis=0)
    sd[sd == 0] = 1.0
    zs = (z - z.mean(axis=0)) / sd
    first = int(np.argmin(((zs - np.median(zs, axis=0)) ** 2).sum(1)))
    pick = [first]
    gap = ((zs - zs[first]) ** 2).sum(1)
    while len(pick) < min(k, len(zs)):
        j = int(np.argmax(gap))
        pick.append(j)
        gap = np.minimum(gap, ((zs - zs[j]) ** 2).sum(1))
    return pick


def _mix(a: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    from scipy.optimize import nnls

    mu = a.mean(axis=0)
    w, _ = nnls(a - mu, y - y.mean())
    if w.sum() == 0:
        w = np.full(a.shape[1], 1.0 / a.shape[1])
    return w, float(y.mean() - mu @ w)


def _smooth(res: np.ndarray, z_cal: np.ndarray, z_all: np.ndarray) -> np.ndarray:
    sd = z_all.std(axis=0)
    sd[sd == 0] = 1.0
    d2 = (((z_all[:, None, :] - z_cal[None, :, :]) / sd) ** 2).sum(-1)
    w = np.exp(-d2 / 2)
    return np.asarray((w @ res) / (w.sum(1) + 1.0))


def calibrated(
    model: FamilyModel,
    query: pd.DataFrame,
    calibration: pd.DataFrame,
    facts: Mapping[str, GpuFacts],
    source: str,
) -> np.ndarray:
    """Return ln time of ``query`` rows on a GPU fitted to its ``calibration`` rows' times.

    ``source``: the training GPU its zero-shot prediction takes (``FamilyModel.source_for``).
    """
    both = pd.concat([calibration, query], ignore_index=True)
    n = len(calibration)
    y = np.log(calibration["time_s"].to_numpy(np.float64))
    zero = model.zero_shot_ln(both, facts, source)
    if n < MIN_MIX or model.family in OFFSET_ONLY:
        return np.asarray(zero[n:] + float(np.median(y - zero[:n])))
    shared = model.shared_ln(both, facts)
    bases = np.column_stack([model.profile_ln(s, both, facts) for s in model.profiles] + [shared])
    w, b = _mix(bases[:n], y)
    p = bases @ w + b
    z = shape_space(both, model.family)
    p = p + _smooth(y - p[:n], z[:n], z)
    lroof = np.log(roofline_s(both, facts))
    lo, hi = lroof[:n].min(), lroof[:n].max()
    out = np.maximum(0.0, np.maximum(lo - lroof, lroof - hi))
    gate = np.exp(-(out**2) / (2 * GATE_ROOF_LN**2))
    sd = z.std(axis=0)
    sd[sd == 0] = 1.0
    near = ((((z[:, None, :] - z[None, :n, :]) / sd) ** 2).sum(-1)).min(1)
    gate = np.minimum(gate, np.exp(-near / (2 * GATE_SHAPE_SD**2)))
    return np.asarray((gate * p + (1 - gate) * zero)[n:])
