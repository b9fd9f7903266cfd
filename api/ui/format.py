"""How the pages write numbers and sources: SI units, percentages, capacities, dashes, sources.

Numbers get SI prefixes, ratios signed percentages, capacities binary prefixes, the unknown a
dash; a figure's source says whether it is operator-db's own, imported or predicted (an imported
figure is never written as an own one).
"""

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


_IEC: tuple[tuple[float, str], ...] = (
    (2**40, "TiB"),
    (2**30, "GiB"),
    (2**20, "MiB"),
    (2**10, "KiB"),
)


def iec(value: float | None) -> str:
    """Write a capacity in bytes with a binary prefix (``24 GiB``, ``48 MiB``), as chips count."""
    if value is None or not math.isfinite(value):
        return DASH
    for scale, unit in _IEC:
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


MEASURED = "measured"
"""What the API's ``source`` says of operator-db's own figure."""


def source(value: str | None) -> str:
    """Write where a figure comes from: own, imported from a data set, predicted, or none."""
    if value is None:
        return DASH
    if value == MEASURED:
        return "own measurement"
    if value == "predicted":
        return "predicted"
    return f"imported: {value}"


def imported(value: str | None) -> bool:
    """Whether a figure's ``source`` names a data set (imported, not operator-db's own)."""
    return value not in (None, MEASURED, "predicted")


def ms(value: float | None) -> str:
    """Write a time in seconds as milliseconds, without an exponent (``76.5``, ``1,234``)."""
    if value is None or not math.isfinite(value):
        return DASH
    milli = value * 1e3
    if milli == 0:
        return "0"
    if abs(milli) >= 100:
        return f"{milli:,.0f}"
    digits = 2 - math.floor(math.log10(abs(milli)))  # three significant digits
    return f"{milli:.{digits}f}"


def interval_ms(low: float | None, high: float | None, level: float | None) -> str:
    """Write an interval in ms with its level: ``1.20 … 3.40 ms (90 %)``; a dash where none."""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return DASH
    text = f"{ms(low)} … {ms(high)} ms"
    return f"{text} ({level * 100:g} %)" if level is not None and math.isfinite(level) else text
