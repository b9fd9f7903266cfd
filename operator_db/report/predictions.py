"""The report's predictions section: each kind's predictor and the models it estimates."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.models import DeviceKind
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.predict.mix import predicted_costs
from operator_db.predict.model import interval_text
from operator_db.predict.store import load_predictor
from operator_db.report.columns import PREDICTION_DISPLAY
from operator_db.report.document import Document, display

PREDICTION_COLUMNS = [
    "model",
    "device_kind",
    "coverage",
    "coverage_predicted",
    "time_s",
    "predicted_time_s",
    "total_time_s",
    "total_time_low_s",
    "total_time_high_s",
    "full_run_time_s",
    "time_error",
    "predictor_version",
]


def prediction_table(
    session: Session, kinds: Sequence[DeviceKind], models: Sequence[str] | None
) -> pd.DataFrame:
    """Return one row per (model, kind with a predictor): the estimate with predictions.

    Sweeps (``opdb sweep``: grids, not models) are left out. Times in s; ``coverage`` the measured
    share of calls, ``coverage_predicted`` the predicted share.
    """
    chosen = queries.list_models(session, names=models)
    records: list[dict[str, Any]] = []
    for kind in kinds:
        predictor = load_predictor(session, kind)  # once per kind, not per model
        if predictor is None:
            continue
        for model in chosen:
            if (model.provenance or {}).get("tool") == "opdb sweep":
                continue
            predicted = predicted_costs(session, model.name, kind.name, predictor)
            est = estimate_model(
                session, model.name, kind.name, EstimateOptions(predicted=predicted)
            )
            low, high = est.total_time_bounds_s
            records.append(
                {
                    "model": model.name,
                    "device_kind": kind.name,
                    "coverage": est.coverage,
                    "coverage_predicted": est.coverage_predicted,
                    "time_s": est.time_s,
                    "predicted_time_s": est.predicted_time_s,
                    "total_time_s": est.total_time_s,
                    "total_time_low_s": low,
                    "total_time_high_s": high,
                    "full_run_time_s": est.full_run_time_s,
                    "time_error": est.time_error,
                    "predictor_version": (est.predictor or {}).get("version"),
                }
            )
    return pd.DataFrame.from_records(records, columns=PREDICTION_COLUMNS)


def predictions_section(
    doc: Document, session: Session, kinds: Sequence[DeviceKind], table: pd.DataFrame
) -> None:
    """Write each kind's predictor and the estimates that mix measured and predicted costs."""
    doc.heading("Predictions")
    rows = queries.list_predictors(session, [k.id for k in kinds])
    if not rows:
        doc.para(
            "No predictor is trained for these device kinds: `opdb predict train --device-kind "
            "KIND` fits one on what is measured there, `opdb predict evaluate` says how far to "
            "trust it, and estimates then fill what is not measured (docs/predict.md)."
        )
        return
    names = {k.id: k.name for k in kinds}
    newest: dict[int, int] = {}
    for r in rows:
        newest[r.device_kind_id] = max(newest.get(r.device_kind_id, 0), r.version)
    doc.para(
        "Configurations not measured on a kind are predicted by its newest predictor: per "
        "operator type, the per-call time as a multiple of the configuration's roofline bound "
        "(never below it), with a conformal interval. Estimates add the measured and predicted "
        "configurations; the interval takes every predicted configuration at its own interval's "
        "end. All rows: `predictions.csv`."
    )
    doc.bullets(
        [
            f"{names[r.device_kind_id]} v{r.version} ({r.created_at:%Y-%m-%d}): {r.target} of "
            f"{r.op}, {r.samples} configurations, {r.library.get('estimator', '')}, CV median "
            f"error {_pct(r.cv_median_error)}, {r.level:.0%} interval "
            f"{interval_text(r.interval_ln)}"
            for r in rows
            if r.version == newest[r.device_kind_id] and r.target == "time"
        ]
    )
    if table.empty:
        doc.para("No model to estimate on the kinds with a predictor.")
        return
    doc.table(display(table, PREDICTION_DISPLAY))


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"
