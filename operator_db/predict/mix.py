"""A predictor's per-call costs for a model's configurations, as plain figures for the estimate.

``opdb estimate --predict``, ``GET /models/{name}/estimate?predict=true`` and the report's
Predictions section call :func:`predicted_costs` and hand its figures to
``estimate_model(..., EstimateOptions(predicted=...))`` (``estimate/predicted.py``), which
fills the configurations not measured on the kind with them: the predictor does not know what
an estimate is, nor the estimate how a prediction is made.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.models import as_utc
from operator_db.errors import NotFoundError
from operator_db.estimate.predicted import Predicted, PredictedCost
from operator_db.predict.model import Prediction, Predictor
from operator_db.predict.store import require_predictor


def predicted_costs(
    session: Session, model_name: str, device_kind: str, predictor: Predictor | None = None
) -> Predicted:
    """Return the per-call time and energy of each configuration of ``model_name`` on the kind.

    Every configuration the predictor can predict gets a figure (the estimate uses those it has
    not measured). ``predictor``: one already loaded for the kind (many estimates, one load);
    None loads the kind's newest.

    Raises:
        NotFoundError: unknown model or device kind, or no predictor was trained for the kind.
        InvalidInputError: the stored predictor needs another scikit-learn (retrain it).
    """
    model = queries.get_model(session, model_name)
    kind = queries.get_device_kind(session, device_kind)
    if predictor is None:
        predictor = require_predictor(session, kind)
    configs = [mc.config for mc in queries.model_configs(session, model.id)]
    todo = [cfg for cfg in configs if cfg.form != "opaque"]
    times = predictor.predict(todo, "time")
    energies = predictor.predict(todo, "energy")
    keys = [cfg.key for cfg in todo]
    return Predicted(
        time=_costs(keys, times),
        energy=_costs(keys, energies),
        source=describe(predictor),
    )


def _costs(keys: list[str], predictions: list[Prediction | None]) -> dict[str, PredictedCost]:
    return {
        key: PredictedCost(p.value, p.low, p.high)
        for key, p in zip(keys, predictions, strict=True)
        if p is not None
    }


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


def can_predict(session: Session, device_kind: str) -> bool:
    """Whether :func:`predicted_for` has a predictor for the kind, without loading one.

    The kind's own predictor, or the cross-device model for a GPU it can place (a spec sheet).

    Raises:
        NotFoundError: unknown kind.
    """
    from operator_db.predict.devices import gpu_facts

    kind = queries.get_device_kind(session, device_kind)
    if queries.has_predictor(session, kind.id):
        return True
    if gpu_facts(kind.name) is None:
        return False
    return queries.latest_cross_predictor(session, with_model=False) is not None


def predicted_for(
    session: Session, model_name: str, device_kind: str, *, required: bool = True
) -> Predicted | None:
    """Return the predicted costs of a model on a kind from the best predictor it has.

    The kind's own predictor (``opdb predict train``) where one was trained; else, for a GPU
    with a spec sheet, the cross-device model (``opdb predict across train``). ``required``
    False: None where neither exists, and only the cross-device model is tried (the call of an
    estimate on a kind that measured nothing of the model).

    Raises:
        NotFoundError: unknown model or kind; ``required`` and no predictor for the kind.
        InvalidInputError: a stored predictor needs another scikit-learn (retrain it).
    """
    from operator_db.predict.across.store import load as load_across
    from operator_db.predict.across.store import predicted_costs as across_costs
    from operator_db.predict.devices import gpu_facts
    from operator_db.predict.store import load_predictor

    kind = queries.get_device_kind(session, device_kind)
    if required:
        own = load_predictor(session, kind)
        if own is not None:
            return predicted_costs(session, model_name, kind.name, own)
    found = load_across(session) if gpu_facts(kind.name) is not None else None
    if found is not None:
        return across_costs(session, model_name, kind.name, found)
    if required:
        raise NotFoundError(
            f"no predictor for {kind.name}: train one with `opdb predict train --device-kind "
            f"'{kind.name}'` (from what is measured there) or, for a GPU, `opdb predict across "
            "train` (from other GPUs' results)"
        )
    return None
