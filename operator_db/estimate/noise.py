"""An estimate's noise: the interval of its total and of its error against the measured run.

Every measured figure carries the interval of its median (``operator_db.stats``; revision 0013);
this module composes them the way the estimate composes the figures:

- **operators timed in a replay of the model's calls**: one interval for their whole sum, the
  replay's own (the exact interval of its median pass, which holds whatever moved every call
  of a pass together);
- **operators timed alone**: count × each one's interval, summed in quadrature (their jobs' noise
  independent of one another);
- **predicted operators**: each at its predictor's interval, summed linearly (one predictor's
  bias moves them all), then with the measured part in quadrature;
- the time between operators (CPU) is added as it is; on a GPU the total (a pipeline of host and
  device) takes the operators' relative interval.

A figure stored without an interval (imported, or measured before revision 0013) counts as
exact, and the estimate says how many did. The error (estimate − run) / run combines the total's
interval with the run's (``stats.error_interval``): where it holds 0, the difference is within
the noise of the measurements.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from operator_db.stats import LEVEL, Interval, exact, sum_interval

REPLAY_MATCH = 1e-6
"""Relative difference under which the replayed rows' sum is the replay's own total."""


@dataclass(frozen=True)
class Noise:
    """The interval of an estimate's operators, and how many figures had none."""

    operators: Interval
    """Σ count × per-call time (measured and predicted), s."""
    exact_rows: int
    """Measured configurations whose figure has no interval (taken as exact)."""
    replay: bool
    """Whether the replayed operators took the replay's interval of its median pass."""


def _row_interval(r: Mapping[str, Any], level: float) -> Interval | None:
    low, high = r.get("time_low_per_call_s"), r.get("time_high_per_call_s")
    value = r.get("time_per_call_s")
    if value is None or low is None or high is None:
        return None
    held = r.get("time_ci_level")
    return Interval(value, low, high, float(held) if held is not None else level, "row").scaled(
        float(r["count"])
    )


def operators_noise(
    rows: Sequence[Mapping[str, Any]],
    replay_total: Mapping[str, Any] | None,
    predictor_level: float | None,
    level: float = LEVEL,
) -> Noise | None:
    """Return the interval of Σ count × per-call time over ``rows`` (None: nothing known).

    ``replay_total``: the model run's replay total (``Interval.as_dict``), used where the rows
    timed in the replay sum to it; ``predictor_level``: the level of predicted rows' intervals.
    """
    known = [r for r in rows if r.get("time_s") is not None]
    if not known:
        return None
    measured = [r for r in known if r.get("source") != "predicted"]
    predicted = [r for r in known if r.get("source") == "predicted"]
    terms: list[Interval] = []
    replayed = [r for r in measured if r.get("timing") == "replay"]
    used_replay = False
    if replayed and replay_total is not None:
        total = math.fsum(float(r["time_s"]) for r in replayed)
        value = float(replay_total.get("value") or 0.0)
        if value > 0 and abs(total - value) <= REPLAY_MATCH * value:
            terms.append(
                Interval(
                    total,
                    float(replay_total["low"]),
                    float(replay_total["high"]),
                    float(replay_total["level"]),
                    str(replay_total.get("method") or "replay"),
                    replay_total.get("n"),
                )
            )
            measured = [r for r in measured if r.get("timing") != "replay"]
            used_replay = True
    missing = 0
    for r in measured:
        iv = _row_interval(r, level)
        if iv is None:
            missing += 1
            iv = exact(float(r["time_s"]))
        terms.append(iv)
    noise = sum_interval(terms, level)
    if predicted:
        at = predictor_level if predictor_level is not None else 0.9
        parts = [
            replace(iv, level=at, method="predicted")
            for r in predicted
            if (iv := _row_interval(r, at)) is not None
        ]
        spread = sum_interval(parts, level, correlated=True)
        noise = sum_interval([noise, spread], level)
    return Noise(noise, missing, used_replay)


def energy_noise(
    rows: Sequence[Mapping[str, Any]], static: Interval | None, level: float = LEVEL
) -> Interval | None:
    """Return the interval of the estimate's energy, J (None where no row has energy).

    Each configuration's energy (count × per call) at its trials' interval, independent of the
    others (each from its own energy trials): in quadrature; a figure without one counts as
    exact. ``static``: the idle power × the estimate's time with its interval, where the total
    energy adds it.
    """
    terms: list[Interval] = []
    for r in rows:
        value = r.get("energy_j")
        if value is None:
            continue
        low, high = r.get("energy_low_per_call_j"), r.get("energy_high_per_call_j")
        if low is None or high is None or r.get("energy_per_call_j") is None:
            terms.append(exact(float(value)))
            continue
        held = r.get("energy_ci_level")
        per_call = Interval(
            float(r["energy_per_call_j"]),
            float(low),
            float(high),
            float(held) if held is not None else level,
            "energy trials",
        )
        terms.append(per_call.scaled(float(r["count"])))
    if not terms:
        return None
    if static is not None:
        terms.append(static)
    return sum_interval(terms, level)


def total_interval(
    operators: Interval, operators_s: float, total_s: float, adds_between: bool
) -> Interval:
    """Return the interval of the estimate's total from its operators' interval, s.

    Where the time between operators is added (a CPU) it shifts the interval as it is; elsewhere
    (a GPU pipeline) the total takes the operators' relative interval.
    """
    if adds_between or operators_s <= 0:
        shift = total_s - operators_s
        return Interval(
            total_s,
            operators.low + shift,
            operators.high + shift,
            operators.level,
            operators.method,
        )
    return operators.scaled(total_s / operators_s)


def run_interval(
    value: float | None, low: float | None, high: float | None, held: float | None
) -> Interval | None:
    """Return a measured run's time with its interval (exact where none was stored)."""
    if value is None:
        return None
    if low is None or high is None:
        return exact(value, "run without an interval")
    return Interval(value, low, high, held if held is not None else LEVEL, "median of blocks")
