"""One model on every known device kind: which GPU for this model, at a glance.

One row per kind: the model's time (and energy where known) on it, how it is known — measured
(composed from the kind's own results, or a measured run of the whole model), or predicted
across devices (``store.predicted_costs``, zero- or few-shot) — its interval, what bounds it on
the roofline, and where the figures come from. A kind is listed where the model has results on
it, or where it is a GPU the cross-device model can place (a spec sheet in the chips table).

Where a kind has a measured run of the whole model, the run ranks it, not the estimate, and the
row says how far its estimate is from the run (with the interval where both have spread) and
with which kinds the estimates alone would put the runs in the wrong order (``flips_with``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.errors import OperatorDBError
from operator_db.estimate.compose import Estimate, estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.estimate.rows import OWN_SOURCE, is_imported
from operator_db.predict.across.store import gpu_kinds, load, predicted_costs_many
from operator_db.stats import LEVEL, Interval, describe_error, noise_verdict

MIN_MEASURED = 0.5
"""Share of a model's calls a kind must have measured for its estimate to count as measured."""


@dataclass(frozen=True)
class KindRow:
    """The model on one device kind."""

    device_kind: str
    how: str
    """Who gave the figure: ``measured`` (operator-db's own results), ``imported`` (a data
    set's), ``measured run`` / ``imported run`` (only the whole model, own or imported), or
    ``predicted`` (the cross-device model)."""
    time_s: float | None
    """Per forward (training: step) of the model, s."""
    low_s: float | None
    high_s: float | None
    """The interval (None where measured without one)."""
    energy_j: float | None
    bound_by: str | None
    """What bounds the model on the kind's roofline (``compute`` / ``memory``), where roofs are
    (``Estimate.roofline_bound``)."""
    coverage: float
    """Share of the model's calls with a figure (measured or predicted)."""
    source: str
    """Where the figures come from, in words."""
    full_run_s: float | None = None
    """A measured run of the whole model on the kind, s."""
    level: float | None = None
    """Nominal coverage of the interval."""
    run_error: float | None = None
    """(estimate − run) / run, a signed fraction, where the kind has both."""
    run_error_low: float | None = None
    run_error_high: float | None = None
    """The error's 95 % interval where both sides have a spread (None: one is a single figure)."""
    flips_with: tuple[str, ...] = ()
    """Kinds whose runs are in the other order than the two estimates say."""

    @property
    def rank_s(self) -> float | None:
        """What ranks the kind, s: its whole-model run where measured, else its estimate."""
        return self.full_run_s if self.full_run_s is not None else self.time_s

    @property
    def run_verdict(self) -> str | None:
        """``within noise``, ``beyond noise`` or ``no interval`` for the error against the run."""
        if self.run_error is None:
            return None
        if self.run_error_low is None or self.run_error_high is None:
            return "no interval"
        return noise_verdict(self._run_error_interval())

    def _run_error_interval(self) -> Interval:
        assert self.run_error is not None
        low, high = self.run_error_low, self.run_error_high
        return Interval(
            self.run_error,
            self.run_error if low is None else low,
            self.run_error if high is None else high,
            LEVEL,
            "ratio, log scale (quadrature)",
        )

    @property
    def run_error_text(self) -> str | None:
        """The error against the run in words, as the CLI, the page and the API give it.

        ``+35.5 % (+30.1 … +41.0 %, 95 %), beyond noise``, or ``+35.5 % (no interval: imported
        as one figure)``; None without a run.
        """
        if self.run_error is None:
            return None
        if self.run_verdict == "no interval":
            sign = f"{self.run_error * 100:+.1f}".replace("-", "−")
            return f"{sign} % (no interval: imported as one figure)"
        return describe_error(self._run_error_interval())

    def as_dict(self) -> dict[str, Any]:
        """Return the row as JSON-ready data."""
        return {
            **asdict(self),
            "rank_s": self.rank_s,
            "run_verdict": self.run_verdict,
            "run_error_text": self.run_error_text,
        }


def _estimate(session: Session, model: str, kind: str, predicted: Any = None) -> Estimate | str:
    """Return the model's estimate on the kind, or why there is none (in words)."""
    try:
        return estimate_model(
            session,
            model,
            kind,
            EstimateOptions(aggregate="median", peaks="best", predicted=predicted),
        )
    except OperatorDBError as exc:
        return str(exc)


def _source_text(name: str) -> str:
    return "own measurements" if name == OWN_SOURCE else f"imported: {name}"


def _who(est: Estimate) -> tuple[str, str]:
    """Return ``how`` and the sources in words (``own measurements, imported: neusight``).

    ``how``: ``measured`` or ``imported``, whichever gave more of the configurations.
    """
    counts = {s: n for s, n in (est.sources or {}).items() if s == OWN_SOURCE or is_imported(s)}
    own = counts.get(OWN_SOURCE, 0)
    how = "imported" if sum(counts.values()) - own > own else "measured"
    names = sorted(counts, key=lambda s: (s != OWN_SOURCE, s))
    return how, ", ".join(_source_text(s) for s in names) or "own measurements"


def compare(
    session: Session, model_name: str, *, on_error: Callable[[str, str], None] | None = None
) -> list[KindRow]:
    """Return the model on every kind it has results on or that can be predicted, fastest first.

    ``on_error(kind, why)`` hears of each kind left out, with why: measured too little of the
    model (under ``MIN_MEASURED`` of its calls) without a whole-model run and not predicted,
    no estimate, or a GPU the cross-device model could not predict.

    Raises:
        NotFoundError: unknown model.
    """
    model = queries.get_model(session, model_name)
    measured_on = queries.kinds_measuring_model(session, model.id)
    rows: list[KindRow] = []
    left: dict[str, str] = {}
    for kind in sorted(measured_on):
        est = _estimate(session, model.name, kind)
        if isinstance(est, str):
            left[kind] = f"no estimate: {est}"
        elif est.coverage >= MIN_MEASURED:
            rows.append(_row(est, *_who(est)))
        elif est.full_run_time_s is not None:
            run_source = est.full_run_source or OWN_SOURCE
            rows.append(
                KindRow(
                    kind,
                    "measured run" if run_source == OWN_SOURCE else "imported run",
                    est.full_run_time_s,
                    None,
                    None,
                    est.full_run_energy_j,
                    est.roofline_bound,
                    1.0,
                    _source_text(run_source),
                    est.full_run_time_s,
                )
            )
        else:
            left[kind] = (
                f"measured {est.coverage:.0%} of its calls (a comparison needs "
                f"{MIN_MEASURED:.0%}) and no whole-model run"
            )
    found = load(session)
    done = {r.device_kind for r in rows}
    if found is not None:
        names = sorted(n for n in gpu_kinds(session) if n not in done)
        for name, predicted in predicted_costs_many(session, model.name, names, found).items():
            if isinstance(predicted, OperatorDBError):
                left.setdefault(name, f"not predicted: {predicted}")
                continue
            est = _estimate(session, model.name, name, predicted)
            if isinstance(est, str) or not est.predicted:
                left.setdefault(name, "the cross-device model predicts none of its configurations")
                continue
            left.pop(name, None)
            who = predicted.source
            source = (
                f"predicted {who.get('mode')} from {', '.join(who.get('from_kinds') or [])} "
                f"(cross-device model v{who.get('version')})"
            )
            rows.append(_row(est, "predicted", source, who.get("level")))
    if on_error is not None:
        for kind, why in sorted(left.items()):
            on_error(kind, why)
    return ranked(rows)


def ranked(rows: list[KindRow]) -> list[KindRow]:
    """Return the rows fastest first by ``rank_s``, each with the kinds its estimate flips.

    Two kinds flip where both have an estimate and a run, and the estimates order them the
    other way than the runs do.
    """
    both = [r for r in rows if not r.how.endswith(" run") and r.time_s and r.full_run_s]
    flips: dict[str, list[str]] = {}
    for i, a in enumerate(both):
        for b in both[i + 1 :]:
            assert a.time_s and b.time_s and a.full_run_s and b.full_run_s
            if (a.time_s - b.time_s) * (a.full_run_s - b.full_run_s) < 0:
                flips.setdefault(a.device_kind, []).append(b.device_kind)
                flips.setdefault(b.device_kind, []).append(a.device_kind)
    out = [replace(r, flips_with=tuple(flips.get(r.device_kind, ()))) for r in rows]
    return sorted(out, key=lambda r: (r.rank_s is None, r.rank_s or 0.0))


def _run_error(est: Estimate) -> tuple[float | None, float | None, float | None]:
    """Return the estimate's error against the kind's run, and its interval where it has one."""
    if est.time_error is None:
        return None, None, None
    found: Interval | None = est.time_error_interval
    if found is None:
        return est.time_error, None, None
    return est.time_error, found.low, found.high


def _row(est: Estimate, how: str, source: str, level: float | None = None) -> KindRow:
    error, low, high = _run_error(est)
    return KindRow(
        device_kind=est.device_kind,
        how=how,
        time_s=est.total_time_s,
        low_s=est.time_low_s,
        high_s=est.time_high_s,
        energy_j=est.energy_j,
        bound_by=est.roofline_bound,
        coverage=est.coverage + est.coverage_predicted,
        source=source,
        full_run_s=est.full_run_time_s,
        level=level,
        run_error=error,
        run_error_low=low,
        run_error_high=high,
    )
