"""Measurement: timing blocks, energy windows, trials, statistics, flags, provenance."""

from operator_db.measure.energy import idle_power_w
from operator_db.measure.engine import MeasureResult, Target, measure, measure_interleaved
from operator_db.measure.flags import Flag
from operator_db.measure.settings import MeasureSettings, fast_settings
from operator_db.measure.timing import Timing

__all__ = [
    "Flag",
    "MeasureResult",
    "MeasureSettings",
    "Target",
    "Timing",
    "fast_settings",
    "idle_power_w",
    "measure",
    "measure_interleaved",
]
