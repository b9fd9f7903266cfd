"""The cross-device cost model: an operator's time on a GPU from other GPUs' results and its spec.

Per family (``features.family_of``), two views of how a time moves from GPU to GPU, averaged in
log space (the leave-one-GPU-out study in ``research/cross-device`` chose them, on the data set's
five training GPUs only):

- **shared**: ln(time / base) = a_GPU + g(shape, shape against the GPU's spec sheet), one
  gradient-boosted model ``g`` over every training GPU's rows, and one offset ``a`` per GPU (its
  median residual over its large configurations);
- **profile**: one boosted model per training GPU of ln(time / roofline) on the shape alone,
  moved to another GPU by its roofline (the GPU's time × the peak ratio, learned per shape).

A GPU with no results of the family (**zero-shot**) takes the offset and the profile of the
training GPU nearest it (``devices.nearest``). A GPU with a few (**few-shot**,
``fewshot.calibrated``) mixes the bases to fit them. A training GPU predicts with its own.

The interval of a prediction is split conformal over leave-one-GPU-out residuals (each training
GPU predicted by the model of the others, zero-shot and few-shot): zero-shot, ± the largest of
the GPUs' own ``level`` quantiles of |residual| (a new GPU may be as far off as the worst, either
way); few-shot, the pooled quantiles. scikit-learn is imported inside functions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from operator_db.predict.across.features import (
    FAMILY_BASE,
    base_s,
    device_features,
    roofline_s,
    shape_features,
)
from operator_db.predict.across.views import LEARNED, Score, View, view_ln
from operator_db.predict.devices import GpuFacts, nearest

GBT: Mapping[str, Any] = {
    "max_iter": 300,
    "learning_rate": 0.08,
    "max_leaf_nodes": 31,
    "min_samples_leaf": 40,
    "l2_regularization": 1.0,
}
"""Boosting settings of every model (the study's; 300 rounds)."""
MIN_KIND_ROWS = 100
"""Results of a family a GPU needs to train on it (fewer: they calibrate it, few-shot)."""
LARGE_ROOF_S = 20e-6
"""A configuration is large on a GPU where its roofline bound is at least this, s: a GPU's offset
is its median over these (launch overhead does not decide them), all its rows where too few."""
CAP = 3000
"""Rows per GPU and family a model is fitted on at most (a fixed random sample beyond)."""
LEVEL = 0.9


@dataclass
class FamilyModel:
    """One family's shared model, offsets, profiles and intervals."""

    family: str
    ops: list[str]
    """The operator names seen in training, in code order (a categorical feature)."""
    g: Any
    g_columns: list[str]
    offsets: dict[str, float]
    """a_GPU of each training GPU, ln."""
    profiles: dict[str, Any]
    """Each training GPU's model of ln(time / roofline) on the shape."""
    p_columns: list[str]
    rows: dict[str, int] = field(default_factory=dict)
    """Training rows per GPU."""
    zero_interval: tuple[float, float] = (-math.inf, math.inf)
    """ln residual bounds (low, high) of zero-shot predictions (symmetric)."""
    few_interval: tuple[float, float] = (-math.inf, math.inf)
    """ln residual quantiles (low, high) of few-shot predictions."""
    view: View = LEARNED
    """The zero-shot view chosen by leave one GPU out (``views.choose``)."""
    scores: list[Score] = field(default_factory=list)
    """Every candidate view's median |error| on each fold, beside the baseline's."""
    times: dict[str, dict[str, float]] = field(default_factory=dict)
    """Each training GPU's time by configuration key, s (the nearest × ratio views)."""
    floors: dict[str, dict[str, float]] = field(default_factory=dict)
    """Each training GPU's fastest time of each operator of the family, s."""

    @property
    def base(self) -> str:
        """``compute`` or ``memory``: the time ln(time / base) is measured against."""
        return FAMILY_BASE[self.family]

    def _x(self, frame: pd.DataFrame, facts: Mapping[str, GpuFacts], columns: list[str]) -> Any:
        x = device_features(frame, self.family, facts)
        if "op_code" in columns:
            codes = {op: i for i, op in enumerate(self.ops)}
            x["op_code"] = frame["op"].map(lambda o: codes.get(o, np.nan)).to_numpy(np.float64)
        return x[columns].to_numpy(np.float64)

    def shared_ln(self, frame: pd.DataFrame, facts: Mapping[str, GpuFacts]) -> np.ndarray:
        """Return g(x) + ln base: ln time without the GPU's offset."""
        g = self.g.predict(self._x(frame, facts, self.g_columns))
        return np.asarray(g + np.log(base_s(frame, facts, FAMILY_BASE[self.family])))

    def profile_ln(
        self, source: str, frame: pd.DataFrame, facts: Mapping[str, GpuFacts]
    ) -> np.ndarray:
        """Return ln time on each row's GPU from ``source``'s profile moved by the roofline."""
        p = self.profiles[source].predict(self._x(frame, facts, self.p_columns))
        return np.asarray(p + np.log(roofline_s(frame, facts)))

    def zero_shot_ln(
        self, frame: pd.DataFrame, facts: Mapping[str, GpuFacts], source: str
    ) -> np.ndarray:
        """Return ln time on the rows' GPU: shared with ``source``'s offset, and its profile."""
        shared = self.shared_ln(frame, facts) + self.offsets[source]
        return np.asarray(0.5 * shared + 0.5 * self.profile_ln(source, frame, facts))

    def chosen_ln(
        self,
        frame: pd.DataFrame,
        facts: Mapping[str, GpuFacts],
        source: str,
        learned: np.ndarray | None = None,
    ) -> np.ndarray:
        """Return zero-shot ln time on the rows' GPU by the chosen view (:attr:`view`).

        ``learned``: :meth:`zero_shot_ln` of the same rows, where already computed.
        """
        view = getattr(self, "view", LEARNED)  # a model pickled before views: learned
        return view_ln(self, view, frame, facts, source, learned)

    def source_for(self, target: GpuFacts, facts: Mapping[str, GpuFacts]) -> str:
        """Return the training GPU whose offset and profile ``target`` takes."""
        return nearest(target, [facts[k] for k in self.offsets])


def _sample(frame: pd.DataFrame, cap: int, seed: int = 0) -> pd.DataFrame:
    """Return at most ``cap`` rows per GPU (a fixed random sample), and every ``test`` row.

    Rows marked ``test`` are an evaluation's scored rows: all are kept.
    """
    if cap <= 0:
        return frame
    test = frame["test"].astype(bool) if "test" in frame else pd.Series(False, index=frame.index)
    parts = [frame[test]]
    for _, g in frame[~test].groupby("kind"):
        parts.append(g if len(g) <= cap else g.sample(cap, random_state=seed))
    return pd.concat(parts).sort_index()


def _gbt(x: Any, y: np.ndarray, categorical: list[int] | None) -> Any:
    from sklearn.ensemble import HistGradientBoostingRegressor

    model = HistGradientBoostingRegressor(
        categorical_features=categorical or None, random_state=0, **GBT
    )
    model.fit(x, y)  # threads: fit_across limits them (one per fit, fits in parallel)
    return model


def target_ln(frame: pd.DataFrame) -> np.ndarray:
    """Return ln time of rows with a ``time_s``."""
    return np.asarray(np.log(frame["time_s"].to_numpy(np.float64)), dtype=np.float64)


def large(frame: pd.DataFrame, facts: Mapping[str, GpuFacts]) -> np.ndarray:
    """Return which rows are large configurations on their GPU (``LARGE_ROOF_S``)."""
    return np.asarray(roofline_s(frame, facts) >= LARGE_ROOF_S)


def fit_family(
    family: str,
    frame: pd.DataFrame,
    facts: Mapping[str, GpuFacts],
    profiles: Mapping[str, Any] | None = None,
) -> FamilyModel:
    """Fit a family's shared model and offsets on ``frame`` (rows of its training GPUs).

    ``profiles``: per-GPU profiles already fitted (a leave-one-GPU-out fold reuses them; each is
    fitted on its GPU alone); the missing ones are fitted here.
    """
    ops = sorted(set(frame["op"]))
    shape_cols = list(shape_features(frame.head(1), family).columns)
    dev_cols = list(device_features(frame.head(1), family, facts).columns)
    categorical = len(ops) > 1
    g_cols = dev_cols + (["op_code"] if categorical else [])
    p_cols = shape_cols + (["op_code"] if categorical else [])
    model = FamilyModel(family, ops, None, g_cols, {}, dict(profiles or {}), p_cols)
    model.rows = {str(k): len(v) for k, v in frame.groupby("kind")}
    y = target_ln(frame) - np.log(base_s(frame, facts, FAMILY_BASE[family]))
    kinds = frame["kind"].to_numpy()
    big = large(frame, facts)
    picks = {}
    for kind in model.rows:
        mine = kinds == kind
        picks[kind] = mine & big if (mine & big).sum() >= 20 else mine
    a = {kind: float(np.median(y[pick])) for kind, pick in picks.items()}
    shift = np.array([a[k] for k in kinds])
    x = model._x(frame, facts, g_cols)
    cat = [len(g_cols) - 1] if categorical else None
    model.g = _gbt(x, y - shift, cat)
    rest = y - shift - model.g.predict(x)
    for kind, pick in picks.items():
        model.offsets[kind] = a[kind] + float(np.median(rest[pick]))
    roof = np.log(roofline_s(frame, facts))
    xp = model._x(frame, facts, p_cols)
    pcat = [len(p_cols) - 1] if categorical else None
    for kind in model.rows:
        if kind not in model.profiles:
            mine = kinds == kind
            model.profiles[kind] = _gbt(xp[mine], target_ln(frame)[mine] - roof[mine], pcat)
    return model


def conformal(residuals: Sequence[float] | np.ndarray, level: float) -> tuple[float, float]:
    """Return the (low, high) quantiles of ln residuals holding ``level`` of them between."""
    if len(residuals) == 0:
        return (-math.inf, math.inf)
    lo, hi = np.quantile(np.asarray(residuals), [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)
