"""The tables of stored cost models: a kind's predictors and the cross-device model."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, Float, ForeignKey, Integer, LargeBinary, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from operator_db.db.models import PREDICTOR_TARGETS, Base, _enum, utcnow


class Predictor(Base):
    """One fitted cost model of an operator type on a device kind (``opdb predict train``).

    A training run stores one row per (operator type, target) under one ``version`` per kind; the
    newest version is the one estimates use. ``op`` ``*`` is the fallback over every type. The
    estimator predicts ln(per-call cost / roofline bound) from the configuration's features
    (``predict/features.py``), with the bound drawn from ``peaks``; it is a pickled
    scikit-learn object, loaded only with the library version in ``library``.
    """

    __tablename__ = "predictors"

    id: Mapped[int] = mapped_column(primary_key=True)
    device_kind_id: Mapped[int] = mapped_column(ForeignKey("device_kinds.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    op: Mapped[str] = mapped_column(String(300))
    target: Mapped[str] = mapped_column(_enum(PREDICTOR_TARGETS, "predictor_target"))
    samples: Mapped[int] = mapped_column(Integer)
    """Configurations it was fitted on."""
    features: Mapped[list[Any]] = mapped_column(default=list)
    """The feature names, in the estimator's column order."""
    estimator: Mapped[bytes] = mapped_column(LargeBinary)
    interval_ln: Mapped[float] = mapped_column(Float)
    """Half-width of the conformal interval at ``level``, in ln units of the cost."""
    level: Mapped[float] = mapped_column(Float)
    """Nominal coverage of the interval (e.g. 0.9)."""
    cv_median_error: Mapped[float | None] = mapped_column(Float)
    """Median |predicted − measured| / measured over its cross-validation folds."""
    data_hash: Mapped[str] = mapped_column(String(64))
    """SHA-256 of the training data (configuration keys, figures, peaks): its identity."""
    peaks: Mapped[dict[str, Any]] = mapped_column(default=dict)
    """The roofs the bounds were drawn with, by dtype: ``{"float32": [FLOP/s, B/s]}``."""
    library: Mapped[dict[str, Any]] = mapped_column(default=dict)
    """Versions of what fitted it (``scikit-learn``, ``operator-db``)."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    __table_args__ = (UniqueConstraint("device_kind_id", "version", "op", "target"),)


class CrossPredictor(Base):
    """One fitted cross-device cost model (``opdb predict across train``): every GPU's results.

    It predicts an operator configuration's time on any GPU with a spec sheet, from what other
    GPUs measured (``predict/across/``): one row per training run, the newest used. ``model`` is
    the pickled fitted model, loaded only with the library versions in ``library``.
    """

    __tablename__ = "cross_predictors"

    id: Mapped[int] = mapped_column(primary_key=True)
    version: Mapped[int] = mapped_column(Integer, unique=True)
    kinds: Mapped[list[Any]] = mapped_column(default=list)
    """The device kinds (GPUs) it was fitted on."""
    families: Mapped[dict[str, Any]] = mapped_column(default=dict)
    """Per family: training rows per GPU, the intervals (ln) and the calibration set's size."""
    rows: Mapped[int] = mapped_column(Integer)
    """(Configuration, GPU) results it was fitted on."""
    seconds: Mapped[float] = mapped_column(Float)
    """How long fitting took, s."""
    level: Mapped[float] = mapped_column(Float)
    data_hash: Mapped[str] = mapped_column(String(64))
    library: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    model: Mapped[bytes] = mapped_column(LargeBinary)
    """The pickled model: last, so that SQLite reads the row's other columns without it."""
