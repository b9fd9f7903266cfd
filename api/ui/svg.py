"""A small inline SVG chart: values over time, one line per series (no plotting library)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape

from api.ui.format import si, when

WIDTH, HEIGHT, PAD = 640, 200, 44
COLORS = ("#1b6ac9", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0f766e")


def time_series_svg(series: Mapping[str, Sequence[tuple[datetime, float]]], unit: str) -> str:
    """Return an SVG of each series' values (in ``unit``) against time, with its min and max.

    Accessible: ``role="img"`` with a label that says what is drawn; the page gives the numbers
    in a table beside it.
    """
    points = [(t.timestamp(), v) for values in series.values() for t, v in values]
    if not points:
        return ""
    t0, t1 = min(t for t, _ in points), max(t for t, _ in points)
    v0, v1 = min(v for _, v in points), max(v for _, v in points)
    span_t, span_v = (t1 - t0) or 1.0, (v1 - v0) or abs(v1) or 1.0
    if v1 == v0:
        v0, v1 = v0 - span_v / 2, v1 + span_v / 2
        span_v = v1 - v0

    def xy(t: float, v: float) -> str:
        x = PAD + (t - t0) / span_t * (WIDTH - 2 * PAD)
        y = HEIGHT - PAD - (v - v0) / span_v * (HEIGHT - 2 * PAD)
        return f"{x:.1f},{y:.1f}"

    label = f"{len(points)} results over time, from {si(v0, unit)} to {si(v1, unit)}"
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">',
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" '
        'class="axis"/>',
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{HEIGHT - PAD}" class="axis"/>',
        f'<text x="{PAD - 4}" y="{PAD + 4}" text-anchor="end">{escape(si(v1, unit, 2))}</text>',
        f'<text x="{PAD - 4}" y="{HEIGHT - PAD}" text-anchor="end">'
        f"{escape(si(v0, unit, 2))}</text>",
        f'<text x="{PAD}" y="{HEIGHT - PAD + 16}">{escape(when(_dt(t0)))}</text>',
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - PAD + 16}" text-anchor="end">'
        f"{escape(when(_dt(t1)))}</text>",
    ]
    for i, (name, values) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        ordered = sorted((t.timestamp(), v) for t, v in values)
        coords = " ".join(xy(t, v) for t, v in ordered)
        parts.append(
            f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2">'
            f"<title>{escape(name)}</title></polyline>"
        )
        for t, v in ordered:
            x, y = xy(t, v).split(",")
            parts.append(
                f'<circle cx="{x}" cy="{y}" r="3" fill="{color}">'
                f"<title>{escape(name)}: {escape(si(v, unit))}</title></circle>"
            )
        parts.append(
            f'<text x="{WIDTH - PAD}" y="{PAD + 14 * i}" text-anchor="end" fill="{color}">'
            f"{escape(name)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _dt(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=UTC)
