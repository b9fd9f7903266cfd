"""One model on every known device kind: which GPU for this model, at a glance.

One row per kind: the model's time (and energy where known) on it, how it is known — measured
(composed from the kind's own results, or a measured run of the whole model), or predicted
across devices (``store.predicted_costs``, zero- or few-shot) — its interval, what bounds it on
the roofline, and where the figures come from. A kind is listed where the model has results on
it, or where it is a GPU the cross-device model can place (a spec sheet in the chips table).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.errors import OperatorDBError
from operator_db.estimate.compose import Estimate, estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.predict.across.store import gpu_kinds, load, predicted_costs_many

MIN_MEASURED = 0.5
"""Share of a model's calls a kind must have measured for its estimate to count as measured."""


@dataclass(frozen=True)
class KindRow:
    """The model on one device kind."""

    device_kind: str
    how: str
    """``measured``, ``measured run`` (only the whole model was measured), ``predicted``."""
    time_s: float | None
    """Per forward (training: step) of the model, s."""
    low_s: float | None
    high_s: float | None
    """The interval (None where measured without one)."""
    energy_j: float | None
    bound_by: str | None
    """What bounds the model on the kind's roofline (``compute`` / ``memory``), where roofs are."""
    coverage: float
    """Share of the model's calls with a figure (measured or predicted)."""
    source: str
    """Where the figures come from, in words."""
    full_run_s: float | None = None
    """A measured run of the whole model on the kind, s."""
    level: float | None = None
    """Nominal coverage of the interval."""

    def as_dict(self) -> dict[str, Any]:
        """Return the row as JSON-ready data."""
        return asdict(self)


def _estimate(session: Session, model: str, kind: str, predicted: Any = None) -> Estimate | None:
    try:
        return estimate_model(
            session,
            model,
            kind,
            EstimateOptions(aggregate="median", peaks="best", predicted=predicted),
        )
    except OperatorDBError:
        return None


def _sources(est: Estimate) -> str:
    names = sorted({str(s) for s in (est.sources or {}) if s})
    return ", ".join(names) if names else "own measurements"


def compare(
    session: Session, model_name: str, *, on_error: Callable[[str, str], None] | None = None
) -> list[KindRow]:
    """Return the model on every kind it has results on or that can be predicted, fastest first.

    ``on_error(kind, message)`` hears of a kind that could not be predicted (it is left out).

    Raises:
        NotFoundError: unknown model.
    """
    model = queries.get_model(session, model_name)
    measured_on = queries.kinds_measuring_model(session, model.id)
    rows: list[KindRow] = []
    for kind in sorted(measured_on):
        est = _estimate(session, model.name, kind)
        if est is None:
            continue
        if est.coverage >= MIN_MEASURED:
            rows.append(_row(est, "measured", _sources(est)))
        elif est.full_run_time_s is not None:
            rows.append(
                KindRow(
                    kind,
                    "measured run",
                    est.full_run_time_s,
                    None,
                    None,
                    est.full_run_energy_j,
                    est.bound_by,
                    1.0,
                    est.full_run_source or "own measurements",
                    est.full_run_time_s,
                )
            )
    found = load(session)
    done = {r.device_kind for r in rows}
    if found is not None:
        names = sorted(n for n in gpu_kinds(session) if n not in done)
        for name, predicted in predicted_costs_many(session, model.name, names, found).items():
            if isinstance(predicted, OperatorDBError):
                if on_error:
                    on_error(name, str(predicted))
                continue
            est = _estimate(session, model.name, name, predicted)
            if est is None or not est.predicted:
                continue
            who = predicted.source
            source = (
                f"predicted {who.get('mode')} from {', '.join(who.get('from_kinds') or [])} "
                f"(cross-device model v{who.get('version')})"
            )
            rows.append(_row(est, "predicted", source, who.get("level")))
    return sorted(rows, key=lambda r: (r.time_s is None, r.time_s or 0.0))


def _roof_bound(est: Estimate) -> str | None:
    """Return ``compute`` or ``memory``: which roof bounds most of the model's roofline time."""
    if est.peaks is None:
        return None
    shares = {"compute": 0.0, "memory": 0.0}
    for r in est.config_rows:
        flops, nbytes = float(r.get("flops") or 0), float(r.get("bytes") or 0)
        if flops or nbytes:
            shares[est.peaks.bound_type(flops, nbytes)] += float(r.get("roofline_time_s") or 0)
    if not any(shares.values()):
        return None
    return max(shares, key=lambda k: shares[k])


def _row(est: Estimate, how: str, source: str, level: float | None = None) -> KindRow:
    return KindRow(
        device_kind=est.device_kind,
        how=how,
        time_s=est.total_time_s,
        low_s=est.time_low_s,
        high_s=est.time_high_s,
        energy_j=est.energy_j,
        bound_by=_roof_bound(est),
        coverage=est.coverage + est.coverage_predicted,
        source=source,
        full_run_s=est.full_run_time_s,
        level=level,
    )
