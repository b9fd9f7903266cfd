"""Measurement: timing blocks, energy windows, trials, statistics, provenance."""

from operator_db.measure.engine import MeasureResult, idle_power_w, measure, measure_interleaved
from operator_db.measure.settings import MeasureSettings, fast_settings
from operator_db.measure.timing import Timing

__all__ = [
    "MeasureResult",
    "MeasureSettings",
    "Timing",
    "fast_settings",
    "idle_power_w",
    "measure",
    "measure_interleaved",
]
