"""An estimate's unmeasured configurations filled with predicted costs (``predicted=``).

The estimate does not know how a prediction is made: it is handed plain figures, a per-call cost
with its interval for each configuration key (:class:`Predicted`; ``operator_db.predict`` makes
them from a stored predictor). Each configuration of the model that is not measured on the kind
(and not opaque) takes its predicted cost. The estimate then says how much of the model is
measured and how much predicted (calls and time), carries an interval on its total (each
predicted configuration at its interval's ends: errors taken as fully correlated, the cautious
reading), and names the predictor. A model with nothing measured on the kind is predicted whole.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from operator_db.estimate.rows import by_op, coverage_warnings, sum_if_all_known, sum_known


@dataclass(frozen=True)
class PredictedCost:
    """A predicted per-call cost and its interval: s for a time, J for an energy."""

    value: float
    low: float
    high: float


@dataclass(frozen=True)
class Predicted:
    """Predicted per-call costs by configuration key, and what made them."""

    time: Mapping[str, PredictedCost]
    """Per-call time, s; a configuration that cannot be predicted is absent."""
    energy: Mapping[str, PredictedCost] = field(default_factory=dict)
    """Per-call energy, J (absent: no energy predicted)."""
    source: dict[str, Any] = field(default_factory=dict)
    """What identifies the predictor: ``version``, ``device_kind``, ``trained_at``, ``samples``,
    ``data_hash``, ``level``; the estimate's ``predictor``."""

    def label(self) -> str:
        """Return how a warning names the predictor ("the KIND predictor vN")."""
        version = self.source.get("version")
        suffix = "" if version is None else f" v{version}"
        if self.source.get("method") == "across devices":
            return f"the cross-device model{suffix}"
        return f"the {self.source.get('device_kind') or ''} predictor{suffix}"


def predicted_fields(
    rows: list[dict[str, Any]],
    predicted: Predicted,
    *,
    coverage: float,
    coverage_roofline: float | None,
    unmeasured: list[str],
    warnings: list[str],
) -> dict[str, Any]:
    """Return the estimate's fields with its unmeasured rows filled from ``predicted``.

    ``rows`` are the estimate's configuration rows (left as they are: new ones are returned);
    ``coverage``, ``coverage_roofline``, ``unmeasured`` and ``warnings`` its measured figures,
    whose coverage warnings are redone (a predicted row is not a gap).
    """
    rows = [dict(r) for r in rows]
    for r in rows:
        time = predicted.time.get(r["key"])
        if r["measured"] or r["form"] == "opaque" or time is None:
            continue
        r["source"] = "predicted"
        r["time_per_call_s"] = time.value
        r["time_low_per_call_s"] = time.low
        r["time_high_per_call_s"] = time.high
        r["time_s"] = r["count"] * time.value
        joules = predicted.energy.get(r["key"])
        if joules is not None:
            r["energy_per_call_j"] = joules.value
            r["energy_j"] = r["count"] * joules.value
    filled = [r for r in rows if r["source"] == "predicted"]
    known = [r for r in rows if r["source"] is not None]
    total = sum_known(r["time_s"] for r in known)
    for r in rows:
        r["time_share"] = r["time_s"] / total if r["time_s"] is not None and total > 0 else None
    measured_s = sum_known(r["time_s"] for r in rows if r["measured"])
    calls = sum(r["count"] for r in rows)
    share = sum(r["count"] for r in filled) / calls if calls else 0.0
    opaque = [r for r in rows if r["form"] == "opaque"]
    old = coverage_warnings(coverage, coverage_roofline, unmeasured, opaque)
    kept = [w for w in warnings if w not in old]
    left = [r["key"] for r in rows if r["source"] is None and r["form"] != "opaque"]
    gaps = (
        coverage_warnings(min(coverage + share, 1.0), None, left, opaque) if left or opaque else []
    )
    if filled:
        whole = (
            "the whole model is"
            if not any(r["measured"] for r in rows)
            else f"{len(filled)} configurations are"
        )
        first = [
            f"{whole} predicted by {predicted.label()}, not measured: its interval says how far "
            "to trust it"
        ]
    else:
        first = []
    return {
        "config_rows": rows,
        "op_rows": by_op(rows, total),
        "time_s": total,
        "energy_j": sum_if_all_known(r["energy_j"] for r in known),
        "predicted": len(filled),
        "coverage_predicted": share,
        "predicted_time_s": total - measured_s,
        "time_low_s": measured_s + math.fsum(r["count"] * r["time_low_per_call_s"] for r in filled),
        "time_high_s": measured_s
        + math.fsum(r["count"] * r["time_high_per_call_s"] for r in filled),
        "predictor": predicted.source,
        "warnings": first + kept + gaps,
    }
