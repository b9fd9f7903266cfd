"""How the pages write numbers: SI-prefixed units, signed percentages, dashes for the unknown."""

from __future__ import annotations

import math
from datetime import UTC, datetime

_PREFIXES: tuple[tuple[float, str], ...] = (
    (1e12, "T"),
    (1e9, "G"),
    (1e6, "M"),
    (1e3, "k"),
    (1.0, ""),
    (1e-3, "m"),
    (1e-6, "µ"),
    (1e-9, "n"),
)

DASH = "–"


def si(value: float | None, unit: str, digits: int = 3) -> str:
    """Write ``value`` (in ``unit``) with an SI prefix and ``digits`` significant digits."""
    if value is None or not math.isfinite(value):
        return DASH
    if value == 0:
        return f"0 {unit}"
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def percent(value: float | None, *, signed: bool = False) -> str:
    """Write a ratio as a percentage with one decimal (``signed``: with its sign)."""
    if value is None or not math.isfinite(value):
        return DASH
    text = f"{value * 100:+.1f} %" if signed else f"{value * 100:.1f} %"
    return text.replace("-", "−")


def when(value: datetime | None) -> str:
    """Write a timestamp in UTC to the second."""
    if value is None:
        return DASH
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def sort_key(value: object) -> str:
    """Return the value a sortable table cell sorts by (``data-sort``): numbers as numbers."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return repr(value) if isinstance(value, int | float) else str(value)
