"""Measurement settings: METHODOLOGY.md's defaults live in config; fast ones for tests here."""

from __future__ import annotations

from operator_db.config import MeasureSettings

__all__ = ["MeasureSettings", "fast_settings"]


def fast_settings(**overrides: object) -> MeasureSettings:
    """Return settings that measure in milliseconds (tests, CI).

    The method itself is unchanged, but its energy windows are timed ones of 20 ms, which need
    no counter update to close (the aligned ones are tested on their own, with a manual clock).
    """
    values: dict[str, object] = {
        "warmup_s": 0.0,
        "warmup_min_calls": 1,
        "block_min_s": 0.0005,
        "blocks": 5,
        "retries_when_unstable": 0,
        "energy_windows": "timed",
        "energy_window_s": 0.02,
        "energy_window_min_calls": 2,
        "energy_window_min_periods": 0,
        "operator_min_time_s": 0.0,
        "energy_warmup_s": 0.0,
        "trials": 2,
        "max_gap_s": 0.0,
        "idle_window_s": 0.02,
        "cooldown_s": 0.0,
        "tight_ratio": 0.0,
    }
    values.update(overrides)
    return MeasureSettings.model_validate(values)
