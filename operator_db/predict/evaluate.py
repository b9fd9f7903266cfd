"""Leave-one-model-out evaluation of the predictors (``opdb predict evaluate``).

For each model with a measured full run on the kind (or each family of models: every batch size
of one reference), a predictor is fitted on every measured configuration except those the held-out
models run, shared ones included, so it never sees them. It then predicts all of the held-out
model's configurations. Per configuration, the prediction is compared with its measurement and its
interval checked; per model, the predicted estimate (Σ count × predicted per-call time, plus the
measured time between operators where the estimate adds it) is compared with the measured full
run, beside the measured estimate's own error.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.errors import InvalidInputError
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.predict.model import LEVEL, MIN_PER_OP, fit_predictor
from operator_db.predict.store import training_data
from operator_db.study.analysis.models import family_label

HoldOut = Literal["model", "family"]


@dataclass(frozen=True)
class ConfigResult:
    """One held-out configuration: measured and predicted per-call time (s), its interval."""

    group: str
    key: str
    op: str
    measured_s: float
    predicted_s: float
    low_s: float
    high_s: float

    @property
    def error(self) -> float:
        """(predicted − measured) / measured."""
        return (self.predicted_s - self.measured_s) / self.measured_s

    @property
    def covered(self) -> bool:
        """Whether the interval holds the measured value."""
        return self.low_s <= self.measured_s <= self.high_s


@dataclass(frozen=True)
class ModelResult:
    """One held-out model: its full run, measured estimate and predicted estimate, in s."""

    model: str
    group: str
    full_run_s: float
    measured_estimate_s: float | None
    """The estimate from measured operators (None where some are not measured)."""
    predicted_s: float
    """Σ count × predicted per-call time, plus the measured time between operators where added."""
    low_s: float
    high_s: float
    predicted_calls: float
    """Share of the model's calls predicted (opaque ones cannot be)."""
    measured_operators_s: float | None = None
    """Σ count × measured per-call time over the configurations predicted (None where one of
    them is not measured)."""
    predicted_operators_s: float = 0.0
    """Σ count × predicted per-call time: the prediction alone, without the time between."""

    @property
    def operators_error(self) -> float | None:
        """(Σ predicted − Σ measured) / Σ measured over its configurations.

        The predictor's own error on the model, without the composition's (the time between
        operators, interference between them).
        """
        if not self.measured_operators_s:
            return None
        return self.predicted_operators_s / self.measured_operators_s - 1

    @property
    def error(self) -> float:
        """(predicted estimate − full run) / full run."""
        return (self.predicted_s - self.full_run_s) / self.full_run_s

    @property
    def measured_error(self) -> float | None:
        """(measured estimate − full run) / full run, the bar the prediction is held to."""
        if self.measured_estimate_s is None:
            return None
        return (self.measured_estimate_s - self.full_run_s) / self.full_run_s


@dataclass
class Evaluation:
    """The held-out results of every group, and what it cost."""

    device_kind: str
    hold_out: HoldOut
    level: float
    configs: list[ConfigResult] = field(default_factory=list)
    models: list[ModelResult] = field(default_factory=list)
    groups: int = 0
    samples: int = 0
    seconds: float = 0.0
    """Wall-clock time of the whole evaluation (one fit per group), s."""

    def summary(self) -> dict[str, float | int | str | None]:
        """Return the headline figures: median |error| per configuration and model, coverage."""

        def median_abs(values: Sequence[float | None]) -> float | None:
            known = [abs(v) for v in values if v is not None]
            return statistics.median(known) if known else None

        return {
            "device_kind": self.device_kind,
            "hold_out": self.hold_out,
            "groups": self.groups,
            "samples": self.samples,
            "configs": len(self.configs),
            "models": len(self.models),
            "config_median_error": median_abs([c.error for c in self.configs]),
            "model_median_error": median_abs([m.error for m in self.models]),
            "measured_estimate_median_error": median_abs([m.measured_error for m in self.models]),
            "operators_median_error": median_abs([m.operators_error for m in self.models]),
            "level": self.level,
            "interval_coverage": (
                statistics.fmean(c.covered for c in self.configs) if self.configs else None
            ),
            "model_interval_coverage": (
                statistics.fmean(m.low_s <= m.full_run_s <= m.high_s for m in self.models)
                if self.models
                else None
            ),
            "seconds": self.seconds,
        }


def evaluate(
    session: Session,
    kind_name: str,
    *,
    hold_out: HoldOut = "model",
    level: float = LEVEL,
    min_per_op: int = MIN_PER_OP,
    models: Sequence[str] | None = None,
) -> Evaluation:
    """Hold out each model (or family) with a full run on the kind in turn; see the module.

    ``models`` restricts which models are held out (the others still train every fold).

    Raises:
        NotFoundError: unknown device kind or model.
        InvalidInputError: no model with a full run and measured configurations on the kind.
    """
    started = time.perf_counter()
    kind = queries.get_device_kind(session, kind_name)
    data = training_data(session, kind)
    runs = queries.model_figures(session, None, [kind.id], timing="eager", aggregate="median")
    run_of = {model_id: f for (model_id, _, _), f in runs.items()}
    if models is not None:
        named = queries.list_models(session, names=models)  # unknown names: NotFoundError
        idle = [m.name for m in named if m.id not in run_of]
        if idle:
            raise InvalidInputError(
                f"{', '.join(idle)}: no full run on {kind.name} to compare a prediction with"
            )
    candidates = queries.list_models(session, ids=sorted(run_of), names=models)
    links = data.links  # every model's configurations, read once with the training data
    measured = {s.config.id: s for s in data.samples}
    groups: dict[str, list[int]] = {}
    for m in candidates:
        if any(mc.config.id in measured for mc in links[m.id]):
            label = m.name if hold_out == "model" else family_label(m, with_mode=False)
            groups.setdefault(label, []).append(m.id)
    if not groups:
        raise InvalidInputError(
            f"no model with a full run and measured configurations on {kind.name} to hold out"
        )
    by_id = {m.id: m for m in candidates}
    result = Evaluation(kind.name, hold_out, level, groups=len(groups), samples=len(data.samples))
    for label, ids in sorted(groups.items()):
        held = {mc.config.id for i in ids for mc in links[i]}
        train = [s for s in data.samples if s.config.id not in held]
        predictor = fit_predictor(train, data.peaks, level=level, min_per_op=min_per_op)
        cfgs = {mc.config.id: mc.config for i in ids for mc in links[i]}
        order = sorted(cfgs)
        predicted = dict(zip(order, predictor.predict([cfgs[c] for c in order]), strict=True))
        for config_id in order:
            p, s = predicted[config_id], measured.get(config_id)
            if p is not None and s is not None:
                c = cfgs[config_id]
                result.configs.append(
                    ConfigResult(label, c.key, c.op, s.time_s, p.value, p.low, p.high)
                )
        for model_id in ids:
            model = by_id[model_id]
            est = estimate_model(
                session, model.name, kind.name, EstimateOptions(aggregate="median")
            )
            between = max(est.between_ops_s or 0.0, 0.0) if est.adds_between else 0.0
            total = low = high = calls = 0.0
            seen: float | None = 0.0
            for mc in links[model_id]:
                p = predicted.get(mc.config.id)
                if p is not None:  # None: opaque, no bytes, or no roofs for its dtype
                    total += mc.count * p.value
                    low += mc.count * p.low
                    high += mc.count * p.high
                    calls += mc.count
                    s = measured.get(mc.config.id)
                    seen = None if s is None or seen is None else seen + mc.count * s.time_s
            all_calls = sum(mc.count for mc in links[model_id]) or 1
            result.models.append(
                ModelResult(
                    model=model.name,
                    group=label,
                    full_run_s=run_of[model_id].time_median_s,
                    measured_estimate_s=est.total_time_s if not est.unmeasured else None,
                    predicted_s=total + between,
                    low_s=low + between,
                    high_s=high + between,
                    predicted_calls=calls / all_calls,
                    measured_operators_s=seen,
                    predicted_operators_s=total,
                )
            )
    result.seconds = time.perf_counter() - started
    return result
