"""Cost models fitted on measured configurations: one per operator type, a fallback, intervals.

Each model predicts ln(cost / roofline bound) of a configuration (:mod:`.features`); a time is
never predicted below its bound. An operator type with at least ``MIN_PER_OP`` measured
configurations gets its own model, chosen by cross-validation between gradient-boosted trees and a
ridge regression; every type (one never measured included) falls back on one boosted model of all
configurations with the operator type as a category. The interval of a prediction is split
conformal over out-of-fold residuals: the ``level`` quantile of |ln measured − ln predicted| in
held-out folds, so that it covers ``level`` of unseen configurations like the ones fitted.

scikit-learn is imported inside the functions: estimates without predictions never load it.
"""

from __future__ import annotations

import hashlib
import math
import pickle
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from operator_db.errors import InvalidInputError
from operator_db.predict.features import (
    GENERIC_FEATURES,
    bound_s,
    dtype_of,
    features,
    matrix,
    predictable,
    work_flops,
)
from operator_db.roofline.bounds import Peaks

Target = Literal["time", "energy"]
TARGETS: tuple[Target, ...] = ("time", "energy")
LEVEL = 0.9
"""Default nominal coverage of a prediction's interval."""
MIN_PER_OP = 12
"""Measured configurations an operator type needs for a model of its own."""
MIN_SAMPLES = 5
"""Measured configurations a target needs at all (fewer: no model for it)."""
FOLDS = 5
FALLBACK = "*"
"""The ``op`` of the model over every operator type."""
OP_CODE = "op_code"


@dataclass(frozen=True)
class Sample:
    """One measured configuration: its per-call time (s) and energy (J, None where unknown)."""

    config: Any
    """The configuration (:class:`~.features.ConfigLike` with ``key`` and ``form``)."""
    time_s: float
    energy_j: float | None = None
    group: str = ""
    """Which family of models it comes from (a reference at every batch size, a sweep): the
    cross-validation holds out whole groups, as a new model would be (empty: no group)."""

    def cost(self, target: Target) -> float | None:
        """Return the measured cost of ``target``: s for time, J for energy."""
        return self.time_s if target == "time" else self.energy_j


@dataclass(frozen=True)
class Prediction:
    """A predicted per-call cost with its interval, in s (time) or J (energy)."""

    value: float
    low: float
    high: float
    bound_s: float
    """The configuration's roofline bound, s."""
    model: str
    """Which model predicted it: the operator type, or ``*`` (the fallback)."""


@dataclass
class OpModel:
    """One fitted model of ln(cost / bound), for an operator type or the fallback."""

    op: str
    target: Target
    features: list[str]
    estimator: Any
    categories: list[str]
    """Fallback only: the operator types it was fitted on, in their code order."""
    interval_ln: float
    level: float
    samples: int
    cv_median_error: float | None
    kind: str = ""
    """Which estimator was chosen: ``boosting`` or ``ridge``; ``fallback``: none of its own (the
    fallback predicted the type better out of fold and predicts it, with this interval)."""

    def predict_ln(self, rows: Sequence[dict[str, float]], ops: Sequence[str]) -> list[float]:
        """Return ln(cost / bound) for feature rows of configurations of operator types ``ops``."""
        import numpy as np

        x = np.asarray(
            matrix([self._row(r, op) for r, op in zip(rows, ops, strict=True)], self.features)
        )
        return [float(v) for v in self.estimator.predict(x)]

    def _row(self, row: dict[str, float], op: str) -> dict[str, float]:
        if not self.categories:
            return row
        code = self.categories.index(op) if op in self.categories else -1  # unseen: missing
        return {**row, OP_CODE: float(code)}

    def dump(self) -> bytes:
        """Return the estimator and its categories as bytes (pickle) for the database."""
        return pickle.dumps({"estimator": self.estimator, "categories": self.categories})

    @staticmethod
    def load_estimator(blob: bytes) -> tuple[Any, list[str]]:
        """Return (estimator, categories) from :meth:`dump`'s bytes (trusted: our database)."""
        data = pickle.loads(blob)  # noqa: S301 - written by `opdb predict train` into our store
        return data["estimator"], list(data["categories"])


@dataclass
class Predictor:
    """A kind's fitted cost models and the roofs their bounds are drawn with."""

    peaks: dict[str, Peaks]
    """Roofs by dtype."""
    models: dict[tuple[Target, str], OpModel]
    data_hash: str
    version: int | None = None
    device_kind: str | None = None
    created_at: datetime | None = None

    @property
    def samples(self) -> int:
        """Configurations the time fallback was fitted on (all measured ones)."""
        fallback = self.models.get(("time", FALLBACK))
        return 0 if fallback is None else fallback.samples

    def predict(self, configs: Sequence[Any], target: Target = "time") -> list[Prediction | None]:
        """Predict the per-call cost of each configuration (None: cannot be predicted).

        A configuration cannot be predicted where it is opaque, its bytes are unknown, its dtype
        has no roofs, or no model of ``target`` exists.
        """
        out: list[Prediction | None] = [None] * len(configs)
        groups: dict[str, list[tuple[int, dict[str, float], float]]] = {}
        for i, cfg in enumerate(configs):
            peaks = self.peaks.get(dtype_of(cfg))
            if peaks is None or not predictable(cfg):
                continue
            model = self.models.get((target, cfg.op)) or self.models.get((target, FALLBACK))
            if model is None:
                continue
            groups.setdefault(model.op, []).append((i, features(cfg, peaks), bound_s(cfg, peaks)))
        for op, items in groups.items():
            model = self.models[(target, op)]  # grouped by the op of the model found above
            fitted = model if model.estimator is not None else self.models[(target, FALLBACK)]
            rows = [row for _, row, _ in items]
            ln = fitted.predict_ln(rows, [configs[i].op for i, _, _ in items])
            for (i, _, bound), y in zip(items, ln, strict=True):
                out[i] = _prediction(y, model, bound, floor=target == "time")
        return out


def _prediction(y: float, model: OpModel, bound: float, *, floor: bool) -> Prediction:
    """Turn ln(cost / bound) into a cost with its interval; a time is never below its bound."""

    def cost(ln: float) -> float:
        return bound * math.exp(max(ln, 0.0) if floor else ln)

    q = model.interval_ln
    return Prediction(cost(y), cost(y - q), cost(y + q), bound, model.op)


def interval_text(interval_ln: float) -> str:
    """Return an interval's half-width as the factor it is: ``÷/× 1.43`` (``÷/× ∞``: unbounded)."""
    return f"÷/× {math.exp(interval_ln):.2f}" if math.isfinite(interval_ln) else "÷/× ∞"


def conformal_half_width(residuals: Sequence[float], level: float) -> float:
    """Return the split-conformal half-width: the ⌈(n+1)·level⌉-th smallest |residual|.

    With too few residuals for that rank, the largest one (the interval then covers less than
    ``level`` promises; evaluation shows it).
    """
    magnitudes = sorted(abs(r) for r in residuals)
    if not magnitudes:
        return math.inf
    rank = math.ceil((len(magnitudes) + 1) * level)
    return magnitudes[min(rank, len(magnitudes)) - 1]


def data_hash(samples: Iterable[Sample], peaks: dict[str, Peaks]) -> str:
    """Return the SHA-256 identity of training data: keys, measured costs and the roofs."""
    digest = hashlib.sha256()
    for s in sorted(samples, key=lambda s: str(s.config.key)):
        digest.update(f"{s.config.key}:{s.time_s!r}:{s.energy_j!r}\n".encode())
    for dtype in sorted(peaks):
        digest.update(
            f"{dtype}:{peaks[dtype].flops_per_s!r}:{peaks[dtype].bytes_per_s!r}\n".encode()
        )
    return digest.hexdigest()


def _candidates(n: int, categorical: list[bool] | None) -> dict[str, Any]:
    """Return the estimators to choose from for ``n`` samples (the fallback: boosting only)."""
    import numpy as np
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    # Absolute error: the median error is what is judged, and a few noisy measurements (a view of
    # 2 µs that once took 4) pull a squared loss; small trees: fewer splits on noise. Against
    # squared error and 31 leaves, 12.8 % → 10.1 % median per-configuration error out of fold
    # (families held out, docs/predict.md).
    boosting = HistGradientBoostingRegressor(
        loss="absolute_error",
        max_iter=80,
        max_leaf_nodes=15,
        learning_rate=0.15,
        min_samples_leaf=max(2, min(20, n // 10)),
        l2_regularization=1e-3,
        categorical_features=categorical,
        random_state=0,
    )
    if categorical is not None:
        return {"boosting": boosting}
    ridge = make_pipeline(
        SimpleImputer(strategy="median", keep_empty_features=True),
        StandardScaler(),
        RidgeCV(alphas=np.logspace(-4, 3, 15)),
    )
    return {"boosting": boosting, "ridge": ridge}


def fit_op_model(
    op: str,
    target: Target,
    rows: Sequence[dict[str, float]],
    ops: Sequence[str],
    y: Sequence[float],
    *,
    level: float = LEVEL,
    groups: Sequence[str] | None = None,
) -> tuple[OpModel, list[float]]:
    """Fit one model of ln(cost / bound) ``y`` on feature ``rows`` (their types ``ops``).

    ``op`` ``*`` fits the fallback, with the operator type as a category; otherwise the features
    are the generic ones and the arguments the rows have, and the estimator with the smaller
    out-of-fold mean |residual| is kept. The interval is conformal over those residuals, which
    come back with the model (ln predicted − ln measured, in ``y``'s order). With ``groups`` of
    at least two distinct values, the folds hold out whole groups (a family of models, a sweep),
    so the residuals are those of configurations of models the fold never saw.
    """
    import numpy as np
    from sklearn.base import clone
    from sklearn.model_selection import GroupKFold, KFold, cross_val_predict
    from threadpoolctl import threadpool_limits

    fallback = op == FALLBACK
    categories = sorted(set(ops)) if fallback else []
    names = list(GENERIC_FEATURES) + _arg_names(rows) + ([OP_CODE] if fallback else [])
    model = OpModel(op, target, names, None, categories, math.inf, level, len(y), None)
    x = np.asarray(matrix([model._row(r, o) for r, o in zip(rows, ops, strict=True)], names))
    target_y = np.asarray(y, dtype=float)
    mask = [name == OP_CODE for name in names] if fallback else None
    folds: Any = KFold(n_splits=min(FOLDS, len(y)), shuffle=True, random_state=0)
    split = None
    distinct = len(set(groups or ()))
    if distinct >= 2:  # whole groups out, where every fold still trains on enough of them
        by_group = GroupKFold(n_splits=min(FOLDS, distinct))
        train_sizes = [len(t) for t, _ in by_group.split(x, target_y, list(groups or []))]
        if min(train_sizes) >= MIN_SAMPLES:
            folds, split = by_group, list(groups or [])
    best: tuple[float, str, Any, Any] | None = None
    with threadpool_limits(1):  # small data: one thread is several times faster than many
        for label, estimator in _candidates(len(y), mask).items():
            oof = cross_val_predict(estimator, x, target_y, groups=split, cv=folds)
            if target == "time":  # as predicted: never below the bound
                oof = np.maximum(oof, 0.0)
            score = float(np.mean(np.abs(oof - target_y)))
            if best is None or score < best[0]:
                best = (score, label, estimator, oof)
        assert best is not None
        _, label, estimator, oof = best
        model.estimator = clone(estimator).fit(x, target_y)
    residuals = [float(r) for r in oof - target_y]
    model.kind = label
    _set_interval(model, residuals, level)
    return model, residuals


def _set_interval(model: OpModel, residuals: Sequence[float], level: float) -> None:
    """Set a model's conformal half-width and cross-validated median error from residuals."""
    model.interval_ln = conformal_half_width(residuals, level)
    model.cv_median_error = statistics.median(abs(math.expm1(r)) for r in residuals)


def _arg_names(rows: Sequence[dict[str, float]]) -> list[str]:
    generic = set(GENERIC_FEATURES)
    return sorted({name for row in rows for name in row if name not in generic})


def fit_predictor(
    samples: Sequence[Sample],
    peaks: dict[str, Peaks],
    *,
    level: float = LEVEL,
    min_per_op: int = MIN_PER_OP,
) -> Predictor:
    """Fit time (and, where measured, energy) models on measured configurations.

    Samples whose dtype has no roofs, opaque ones and those without bytes are left out.

    Raises:
        InvalidInputError: fewer than ``MIN_SAMPLES`` usable samples, or ``level`` not in (0, 1).
    """
    if not 0 < level < 1:
        raise InvalidInputError(f"interval level must be between 0 and 1, not {level}")
    usable = [
        s for s in samples if predictable(s.config) and dtype_of(s.config) in peaks and s.time_s > 0
    ]
    if len(usable) < MIN_SAMPLES:
        raise InvalidInputError(
            f"{len(usable)} measured configurations with roofs and counted bytes: a predictor "
            f"needs at least {MIN_SAMPLES}"
        )
    roofs = effective_peaks(usable, peaks)
    predictor = Predictor(peaks=roofs, models={}, data_hash=data_hash(usable, peaks))
    for target in TARGETS:
        rows, ops, y, groups = _training_rows(usable, roofs, target)
        if len(y) < MIN_SAMPLES:
            continue
        fallback, fallback_residuals = fit_op_model(
            FALLBACK, target, rows, ops, y, level=level, groups=groups
        )
        predictor.models[(target, FALLBACK)] = fallback
        by_op: dict[str, list[int]] = {}
        for i, op in enumerate(ops):
            by_op.setdefault(op, []).append(i)
        for op, idx in sorted(by_op.items()):
            if len(idx) < min_per_op:
                continue
            own, residuals = fit_op_model(
                op,
                target,
                [rows[i] for i in idx],
                [op] * len(idx),
                [y[i] for i in idx],
                level=level,
                groups=[groups[i] for i in idx],
            )
            shared = [fallback_residuals[i] for i in idx]
            if _mean_abs(residuals) >= _mean_abs(shared):
                # The fallback predicts this type better out of fold: it keeps predicting it,
                # with the type's own interval (Mondrian conformal: its residuals only).
                own = OpModel(op, target, [], None, [], math.inf, level, len(idx), None, "fallback")
                _set_interval(own, shared, level)
            predictor.models[(target, op)] = own
    return predictor


ROOF_QUANTILE = 0.99
"""Which quantile of the rates the measured configurations reached raises a roof (see
:func:`effective_peaks`): the highest ones belong to configurations whose counted bytes are not
all moved (an embedding's whole table)."""


def effective_peaks(samples: Sequence[Sample], peaks: dict[str, Peaks]) -> dict[str, Peaks]:
    """Return each dtype's roofs raised to what its measured configurations reached.

    A CPU's caches move small tensors faster than its memory bandwidth, so the measured
    bandwidth is not a bound for them (on the 2-core EPYC of docs/predict.md, 28 % of the
    configurations ran faster than it). Each roof becomes the larger of the peak and the
    ``ROOF_QUANTILE`` quantile of the FLOP/s and bytes/s the dtype's configurations reached, so
    that a prediction never beats a roof the device has been seen to reach.
    """
    out: dict[str, Peaks] = {}
    for dtype, peak in peaks.items():
        mine = [s for s in samples if dtype_of(s.config) == dtype and s.time_s > 0]
        flops = [work_flops(s.config) / s.time_s for s in mine]
        nbytes = [float(s.config.bytes or 0) / s.time_s for s in mine]
        fast_flops = _quantile(flops, ROOF_QUANTILE)
        fast_bytes = _quantile(nbytes, ROOF_QUANTILE)
        raised = fast_flops > peak.flops_per_s or fast_bytes > peak.bytes_per_s
        out[dtype] = Peaks(
            max(peak.flops_per_s, fast_flops),
            max(peak.bytes_per_s, fast_bytes),
            peak.source + (", raised to what measured configurations reached" if raised else ""),
        )
    return out


def _quantile(values: Sequence[float], q: float) -> float:
    """Return the ``q`` quantile (the nearest rank at or above it), 0 for none."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def _mean_abs(values: Sequence[float]) -> float:
    return math.fsum(abs(v) for v in values) / len(values)


def _training_rows(
    samples: Sequence[Sample], peaks: dict[str, Peaks], target: Target
) -> tuple[list[dict[str, float]], list[str], list[float], list[str]]:
    """Return the features, operator types, ln(cost / bound) and groups of a target's samples."""
    rows: list[dict[str, float]] = []
    ops: list[str] = []
    y: list[float] = []
    groups: list[str] = []
    for s in samples:
        cost = s.cost(target)
        if cost is None or cost <= 0:
            continue
        p = peaks[dtype_of(s.config)]
        rows.append(features(s.config, p))
        ops.append(s.config.op)
        y.append(math.log(cost / bound_s(s.config, p)))
        groups.append(s.group)
    return rows, ops, y, groups
