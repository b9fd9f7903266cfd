"""How the pages write numbers and sources: SI units, percentages, capacities, dashes, sources.

Numbers get SI prefixes, ratios signed percentages, capacities binary prefixes, the unknown a
dash; a figure's source says whether it is operator-db's own, imported or predicted (an imported
figure is never written as an own one).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup, escape

from operator_db.estimate.rows import OWN_SOURCE, is_imported
from operator_db.stats import format_ms

_PREFIXES: tuple[tuple[float, str], ...] = (
    (1e18, "E"),
    (1e15, "P"),
    (1e12, "T"),
    (1e9, "G"),
    (1e6, "M"),
    (1e3, "k"),
    (1.0, ""),
    (1e-3, "m"),
    (1e-6, "µ"),
    (1e-9, "n"),
    (1e-12, "p"),
)

DASH = "–"


def si(value: float | None, unit: str, digits: int = 3) -> str:
    """Write ``value`` (in ``unit``) with an SI prefix and ``digits`` significant digits.

    Never with an exponent: the value is rounded first, so that 999.6 µs is ``1 ms``, not
    ``1e+03 µs``; 120 s at two digits is ``120 s``, not ``1.2e+02 s``.
    """
    if value is None or not math.isfinite(value):
        return DASH
    rounded = float(f"{value:.{digits}g}")
    if rounded == 0:
        return f"0 {unit}"
    scale, prefix = next(
        ((scale, prefix) for scale, prefix in _PREFIXES if abs(rounded) >= scale), _PREFIXES[-1]
    )
    scaled = rounded / scale
    decimals = max(digits - 1 - math.floor(math.log10(abs(scaled))), 0)
    text = f"{scaled:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{text} {prefix}{unit}"


def plural(count: int | None, noun: str, nouns: str | None = None) -> str:
    """Write ``count noun``, the noun in the plural unless the count is one (``1 result``)."""
    if count is None:
        return f"{DASH} {nouns or noun + 's'}"
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"


def code(text: str | None) -> Markup:
    """Write a message of the library as HTML: escaped, its `backticked` parts as code."""
    escaped = str(escape(text or ""))
    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped))


def short_op(op: str) -> str:
    """Write an operator's name short: ``Linear``, ``F.relu``, ``matmul``."""
    for prefix, short in (("torch.nn.functional.", "F."), ("torch.nn.", ""), ("torch.", "")):
        if op.startswith(prefix):
            return short + op.removeprefix(prefix)
    return op


KEY_ARGS = 4
"""Arguments a configuration's one-line description names (the rest are on its page)."""


def shapes(inputs: str | list[dict[str, Any]] | None) -> str:
    """Write input shapes as ``8×784, 8×256`` (an estimate row's ``8x784 8x256`` or a spec's)."""
    if not inputs:
        return ""
    if isinstance(inputs, str):
        return ", ".join(part.replace("x", "×") for part in inputs.split())
    return ", ".join("×".join(str(d) for d in t.get("shape") or []) or "scalar" for t in inputs)


def _arg(name: str, value: Any) -> str | None:
    if value is None or value is False:
        return None
    if value is True:
        return name
    if isinstance(value, list | tuple):
        return f"{name}={','.join(str(v) for v in value)}"
    if isinstance(value, dict):
        return None
    return f"{name}={value}"


def describe_config(op: str, inputs: str | list[dict[str, Any]] | None, args: Any = None) -> str:
    """Write a configuration in a line: its operator, input shapes and first key arguments.

    ``Conv2d 1×64×56×56 · kernel_size=3,3 stride=1,1 padding=1,1`` (what a hash prefix hides).
    """
    text = short_op(op)
    found = shapes(inputs)
    if found:
        text += f" {found}"
    named = [a for a in (_arg(k, v) for k, v in (args or {}).items()) if a][:KEY_ARGS]
    if named:
        text += " · " + " ".join(named)
    return text


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


MEASURED = OWN_SOURCE
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
    return is_imported(value)


def ms(value: float | None) -> str:
    """Write a time in seconds as milliseconds, without an exponent (``76.5``, ``1,234``)."""
    return format_ms(value, DASH)


def interval_ms(low: float | None, high: float | None, level: float | None) -> str:
    """Write an interval in ms with its level: ``1.20 … 3.40 ms (90 %)``; a dash where none."""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return DASH
    text = f"{ms(low)} … {ms(high)} ms"
    return f"{text} ({level * 100:g} %)" if level is not None and math.isfinite(level) else text


def predictor(who: Mapping[str, Any] | None) -> str:
    """Name the predictor an estimate used: its version, mode, and each family's view.

    ``who``: the estimate's ``predictor`` (``predict.across.store.describe`` for the
    cross-device model), e.g. ``the cross-device model v3, zero-shot from 7 GPUs; linear by
    nearest × ratio``.
    """
    if not who:
        return DASH
    version = who.get("version")
    if who.get("method") != "across devices":
        kind = who.get("device_kind") or ""
        return f"the {kind} predictor v{version}, {who.get('samples')} configurations"
    kinds = who.get("from_kinds") or []
    text = f"the cross-device model v{version}, {who.get('mode')} from {plural(len(kinds), 'GPU')}"
    views = who.get("views") or {}
    if views:
        text += "; " + ", ".join(f"{family} by {view}" for family, view in views.items())
    return text


FILTERS: dict[str, Any] = {
    "si": si,
    "percent": percent,
    "ms": ms,
    "interval_ms": interval_ms,
    "when": when,
    "sort_key": sort_key,
    "iec": iec,
    "source": source,
    "imported": imported,
    "plural": plural,
    "predictor": predictor,
    "code": code,
    "describe": describe_config,
    "short_op": short_op,
}
"""The templates' filters by name (``api/ui/pages.py`` adds ``url``)."""
