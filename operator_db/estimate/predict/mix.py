"""Estimates that mix measured and predicted configurations (``estimate_model(predict=True)``).

Each configuration of the model that is not measured on the kind (and not opaque) gets the
kind's newest predictor's per-call cost and interval. The estimate then says how much of the
model is measured and how much predicted (calls and time), carries an interval on its total
(each predicted configuration at its interval's ends: errors taken as fully correlated, the
cautious reading), and names the predictor. A model with nothing measured on the kind is
predicted whole.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.models import DeviceKind, Model, as_utc
from operator_db.estimate.predict.model import Prediction, Predictor
from operator_db.estimate.predict.store import require_predictor
from operator_db.estimate.rows import by_op, coverage_warnings, sum_if_all_known, sum_known

if TYPE_CHECKING:
    from operator_db.estimate.compose import Estimate


def add_predictions(
    session: Session,
    est: Estimate,
    model: Model,
    kind: DeviceKind,
    predictor: Predictor | None = None,
) -> Estimate:
    """Return ``est`` with its unmeasured configurations predicted by the kind's predictor.

    ``predictor``: one already loaded for the kind (many estimates, one load); None loads the
    kind's newest.

    Raises:
        NotFoundError: no predictor was trained for the kind.
        InvalidInputError: the stored predictor needs another scikit-learn (retrain it).
    """
    if predictor is None:
        predictor = require_predictor(session, kind)
    configs = {mc.config.key: mc.config for mc in queries.model_configs(session, model.id)}
    todo = [r for r in est.config_rows if not r["measured"] and r["form"] != "opaque"]
    cfgs = [configs[r["key"]] for r in todo]
    times = predictor.predict(cfgs, "time")
    energies = predictor.predict(cfgs, "energy")
    return with_predictions(
        est,
        predictor,
        dict(zip([r["key"] for r in todo], zip(times, energies, strict=True), strict=True)),
    )


def with_predictions(
    est: Estimate,
    predictor: Predictor,
    predictions: dict[str, tuple[Prediction | None, Prediction | None]],
) -> Estimate:
    """Return ``est`` with rows filled from ``predictions`` (key → time, energy; None: none)."""
    rows = [dict(r) for r in est.config_rows]
    for r in rows:
        time, joules = predictions.get(r["key"], (None, None))
        if r["measured"] or time is None:
            continue
        r["source"] = "predicted"
        r["time_per_call_s"] = time.value
        r["time_low_per_call_s"] = time.low
        r["time_high_per_call_s"] = time.high
        r["time_s"] = r["count"] * time.value
        if joules is not None:
            r["energy_per_call_j"] = joules.value
            r["energy_j"] = r["count"] * joules.value
    predicted = [r for r in rows if r["source"] == "predicted"]
    known = [r for r in rows if r["source"] is not None]
    total = sum_known(r["time_s"] for r in known)
    for r in rows:
        r["time_share"] = r["time_s"] / total if r["time_s"] is not None and total > 0 else None
    measured_s = sum_known(r["time_s"] for r in rows if r["measured"])
    calls = sum(r["count"] for r in rows)
    share = sum(r["count"] for r in predicted) / calls if calls else 0.0
    return replace(
        est,
        config_rows=rows,
        op_rows=by_op(rows, total),
        time_s=total,
        energy_j=sum_if_all_known(r["energy_j"] for r in known),
        predicted=len(predicted),
        coverage_predicted=share,
        predicted_time_s=total - measured_s,
        time_low_s=measured_s + math.fsum(r["count"] * r["time_low_per_call_s"] for r in predicted),
        time_high_s=measured_s
        + math.fsum(r["count"] * r["time_high_per_call_s"] for r in predicted),
        predictor=describe(predictor),
        warnings=_warnings(est, rows, predicted, share, predictor),
    )


def describe(predictor: Predictor) -> dict[str, Any]:
    """Return what identifies a predictor: version, kind, when, on what, at which level."""
    fallback = predictor.models.get(("time", "*"))
    return {
        "version": predictor.version,
        "device_kind": predictor.device_kind,
        "trained_at": (
            None if predictor.created_at is None else as_utc(predictor.created_at).isoformat()
        ),
        "samples": predictor.samples,
        "data_hash": predictor.data_hash,
        "level": None if fallback is None else fallback.level,
    }


def _warnings(
    est: Estimate,
    rows: list[dict[str, Any]],
    predicted: list[dict[str, Any]],
    predicted_share: float,
    predictor: Predictor,
) -> list[str]:
    """Return the warnings with the coverage ones redone: predicted rows are not a gap."""
    opaque = [r for r in est.config_rows if r["form"] == "opaque"]
    old = coverage_warnings(est.coverage, est.coverage_roofline, est.unmeasured, opaque)
    kept = [w for w in est.warnings if w not in old]
    left = [r["key"] for r in rows if r["source"] is None and r["form"] != "opaque"]
    done = min(est.coverage + predicted_share, 1.0)
    gaps = coverage_warnings(done, None, left, opaque) if left or opaque else []
    if not predicted:
        return kept + gaps
    whole = (
        "the whole model is"
        if not any(r["measured"] for r in rows)
        else (f"{len(predicted)} configurations are")
    )
    version = "" if predictor.version is None else f" v{predictor.version}"
    return [
        f"{whole} predicted by the {predictor.device_kind or ''} predictor{version}, not "
        "measured: its interval says how far to trust it",
        *kept,
        *gaps,
    ]
