"""Cost models and the database: what they are fitted on, storing them, loading a kind's newest.

The training data of a kind are its measured configurations (median of their eager, warm
results) with the kind's best-known roofs per dtype (measured, else spec-sheet). A training run is
stored as one version (one row per operator type and target); estimates use the newest version
and say which. Nothing retrains by itself: ``opdb predict train`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy.orm import Session

import operator_db
from operator_db.db import queries
from operator_db.db.models import DeviceKind, Model
from operator_db.db.predictor_tables import Predictor as PredictorRow
from operator_db.db.queries import ModelConfig
from operator_db.errors import InvalidInputError, NotFoundError
from operator_db.predict.features import dtype_of
from operator_db.predict.model import (
    LEVEL,
    MIN_PER_OP,
    OpModel,
    Predictor,
    Sample,
    fit_predictor,
)
from operator_db.roofline.bounds import Peaks
from operator_db.roofline.peaks import best_peaks, kind_peaks


@dataclass
class TrainingData:
    """A kind's measured configurations and the roofs their bounds are drawn with."""

    samples: list[Sample]
    peaks: dict[str, Peaks]
    """Roofs by dtype (the dtypes of the samples that have some)."""
    links: dict[int, list[ModelConfig]]
    """Every stored model's configurations, by model id (their groups come from these)."""


def training_data(session: Session, kind: DeviceKind) -> TrainingData:
    """Return every configuration measured on ``kind`` (median per-call time and energy)."""
    figures = queries.config_figures(
        session, None, [kind.id], timing="eager", aggregate="median", cache_mode="warm"
    )
    by_id = {config_id: f for (config_id, _, _), f in figures.items()}
    configs = queries.configs_by_ids(session, list(by_id))
    known = kind_peaks(session, kind, kind.name)
    peaks: dict[str, Peaks] = {}
    for dtype in sorted({dtype_of(c) for c in configs}):
        found = best_peaks(known, dtype)
        if found is not None:
            # The plain roof: the fit raises it to the rates its configurations reached
            # (caches included), and a stored predictor keeps its roofs as three numbers.
            peaks[dtype] = replace(found, caches=())
    models = queries.list_models(session)
    links = queries.models_configs(session, [m.id for m in models])
    group = _groups(models, links)
    samples = [
        Sample(c, by_id[c.id].time_median_s, by_id[c.id].energy_per_call_j, group.get(c.id, ""))
        for c in configs
    ]
    return TrainingData(samples, peaks, links)


def _groups(models: list[Model], links: dict[int, list[ModelConfig]]) -> dict[int, str]:
    """Return each configuration's group: the family of the first model (by name) running it."""
    from operator_db.study.analysis.models import family_label

    out: dict[int, str] = {}
    for m in models:
        label = family_label(m, with_mode=False)
        for mc in links[m.id]:
            out.setdefault(mc.config.id, label)
    return out


def library_versions() -> dict[str, str]:
    """Return the versions a stored model is fitted with (``scikit-learn``, ``operator-db``)."""
    import sklearn

    return {"scikit-learn": sklearn.__version__, "operator-db": operator_db.__version__}


def check_library(stored: dict[str, str], what: str, retrain: str) -> None:
    """Refuse a stored model fitted with another scikit-learn than this one.

    Raises:
        InvalidInputError: ``what`` was fitted with another scikit-learn; ``retrain`` says how.
    """
    ours, theirs = library_versions()["scikit-learn"], stored.get("scikit-learn")
    if theirs != ours:
        raise InvalidInputError(
            f"{what} was fitted with scikit-learn {theirs}, this is {ours}: retrain it with "
            f"`{retrain}`"
        )


def train(
    session: Session,
    kind_name: str,
    *,
    level: float = LEVEL,
    min_per_op: int = MIN_PER_OP,
) -> Predictor:
    """Fit a kind's cost models on what is measured there and store them as a new version.

    Raises:
        NotFoundError: unknown device kind.
        InvalidInputError: no roofs for the kind, or too few measured configurations.
    """
    kind = queries.get_device_kind(session, kind_name)
    data = training_data(session, kind)
    if not data.peaks:
        raise InvalidInputError(
            f"no roofs for {kind.name}: a predictor scales the roofline bound; measure them "
            "with `opdb peaks` on a host of the kind"
        )
    predictor = fit_predictor(data.samples, data.peaks, level=level, min_per_op=min_per_op)
    version = queries.next_predictor_version(session, kind.id)
    library = library_versions()
    peaks = {d: [p.flops_per_s, p.bytes_per_s, p.source] for d, p in predictor.peaks.items()}
    rows = [
        PredictorRow(
            device_kind_id=kind.id,
            version=version,
            op=m.op,
            target=m.target,
            samples=m.samples,
            features=m.features,
            estimator=m.dump(),
            interval_ln=m.interval_ln,
            level=m.level,
            cv_median_error=m.cv_median_error,
            data_hash=predictor.data_hash,
            peaks=peaks,
            library={**library, "estimator": m.kind},
        )
        for m in predictor.models.values()
    ]
    queries.add_predictors(session, rows)
    predictor.version = version
    predictor.device_kind = kind.name
    predictor.created_at = rows[0].created_at
    return predictor


def load_predictor(session: Session, kind: DeviceKind) -> Predictor | None:
    """Return the newest stored predictor of ``kind``, or None where none was trained.

    Raises:
        InvalidInputError: it was fitted with another scikit-learn than this one (retrain it).
    """
    rows = queries.latest_predictors(session, kind.id)
    if not rows:
        return None
    check_library(
        rows[0].library,
        f"predictor v{rows[0].version} of {kind.name}",
        f"opdb predict train --device-kind '{kind.name}'",
    )
    peaks = {d: Peaks(float(v[0]), float(v[1]), str(v[2])) for d, v in rows[0].peaks.items()}
    models = {}
    for r in rows:
        estimator, categories = OpModel.load_estimator(r.estimator)
        model = OpModel(
            op=r.op,
            target="energy" if r.target == "energy" else "time",
            features=list(r.features),
            estimator=estimator,
            categories=categories,
            interval_ln=r.interval_ln,
            level=r.level,
            samples=r.samples,
            cv_median_error=r.cv_median_error,
            kind=str(r.library.get("estimator", "")),
        )
        models[(model.target, model.op)] = model
    return Predictor(
        peaks=peaks,
        models=models,
        data_hash=rows[0].data_hash,
        version=rows[0].version,
        device_kind=kind.name,
        created_at=rows[0].created_at,
    )


def require_predictor(session: Session, kind: DeviceKind) -> Predictor:
    """Return :func:`load_predictor`'s predictor.

    Raises:
        NotFoundError: none was trained for the kind.
    """
    predictor = load_predictor(session, kind)
    if predictor is None:
        raise NotFoundError(
            f"no predictor for {kind.name}: train one with "
            f"`opdb predict train --device-kind '{kind.name}'`"
        )
    return predictor
