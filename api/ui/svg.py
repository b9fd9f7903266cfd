"""Small inline SVG charts, no plotting library: values over time; a model's time on each kind.

Values over time: one line per series; a model on each device kind: one bar per kind with its
interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from html import escape

from api.schemas_compare import CompareRowOut
from api.ui.format import interval_ms, ms, plural, si, when

WIDTH, HEIGHT, PAD = 640, 200, 44
LEFT = 72
"""Room left of a time series' plot for its axis labels (``12.3 µs``, ``1.23 ks``), px."""
COLORS = ("#1b6ac9", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0f766e")


def time_series_svg(series: Mapping[str, Sequence[tuple[datetime, float]]], unit: str) -> str:
    """Return an SVG of each series' values (in ``unit``) against time, with its min and max.

    Accessible: ``role="img"`` with a label that says what is drawn; the page gives the numbers
    in a table beside it.
    """
    timed = {n: [(t.timestamp(), v) for t, v in values] for n, values in series.items()}
    count = sum(len(v) for v in timed.values())
    return lines_svg(timed, unit, lambda t: when(_dt(t)), f"{plural(count, 'result')} over time")


def lines_svg(
    series: Mapping[str, Sequence[tuple[float, float]]],
    unit: str,
    x_text: Callable[[float], str],
    what: str,
) -> str:
    """Return an SVG of each series' (x, value in ``unit``) points as a line, with their range.

    ``x_text`` writes an x value under the axis' ends; ``what`` begins the accessible label
    (``role="img"``); the page gives the numbers in a table beside it.
    """
    points = [(t, v) for values in series.values() for t, v in values]
    if not points:
        return ""
    t0, t1 = min(t for t, _ in points), max(t for t, _ in points)
    v0, v1 = min(v for _, v in points), max(v for _, v in points)
    span_t, span_v = (t1 - t0) or 1.0, (v1 - v0) or abs(v1) or 1.0
    if v1 == v0:
        v0, v1 = v0 - span_v / 2, v1 + span_v / 2
        span_v = v1 - v0

    def xy(t: float, v: float) -> str:
        x = LEFT + (t - t0) / span_t * (WIDTH - LEFT - PAD)
        y = HEIGHT - PAD - (v - v0) / span_v * (HEIGHT - 2 * PAD)
        return f"{x:.1f},{y:.1f}"

    label = f"{what}, from {si(v0, unit)} to {si(v1, unit)}"
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">',
        f'<line x1="{LEFT}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" '
        'class="axis"/>',
        f'<line x1="{LEFT}" y1="{PAD}" x2="{LEFT}" y2="{HEIGHT - PAD}" class="axis"/>',
        f'<text x="{LEFT - 4}" y="{PAD + 4}" text-anchor="end">{escape(si(v1, unit, 2))}</text>',
        f'<text x="{LEFT - 4}" y="{HEIGHT - PAD}" text-anchor="end">'
        f"{escape(si(v0, unit, 2))}</text>",
        f'<text x="{LEFT}" y="{HEIGHT - PAD + 16}">{escape(x_text(t0))}</text>',
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - PAD + 16}" text-anchor="end">'
        f"{escape(x_text(t1))}</text>",
    ]
    for i, (name, values) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        ordered = sorted(values)
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


HOW_COLORS = {
    "measured": "#1b6ac9",
    "imported": "#6d28d9",
    "measured run": "#15803d",
    "imported run": "#0f766e",
    "predicted": "#c2410c",
}
"""A bar's colour by how its time is known (the legend's order)."""
BAR_WIDTH, LABEL_W, VALUE_W, ROW_H, TOP, AXIS_H = 740, 230, 80, 24, 30, 40
LEGEND_X, LEGEND_STEP = 10, 120
"""The legend's first entry and the step between entries (six fit: five hows and the run)."""
LABEL_CHARS = 30
"""A kind's name in the chart is cut past this (its whole name is in the bar's title)."""
PARTIAL_W = 100
"""Room beside the bars for a partial sum's "(79% of calls)"."""
PARTIAL_BELOW = 0.995
"""A bar whose coverage of the model's calls is below this says it is a partial sum."""
LOG_RATIO = 10.0
"""The axis is logarithmic where the largest figure is more than this times the smallest."""


def compare_svg(model: str, rows: Sequence[CompareRowOut]) -> str:
    """Return a horizontal bar chart of the model's time on each kind, with interval whiskers.

    One bar per kind with a time, in the order given (fastest first), coloured by how it is known
    (a predicted bar also dashed), with a legend; the axis is logarithmic (a tick per decade)
    where the figures span more than ``LOG_RATIO``, else linear from zero. Accessible:
    ``role="img"`` with a label; each bar has a title, and the page's table gives the numbers.
    """
    timed = [r for r in rows if r.time_s is not None and r.time_s > 0]
    if not timed:
        return ""
    values = [
        v
        for r in timed
        for v in (r.time_s, r.low_s, r.high_s, r.full_run_s)
        if v is not None and v > 0
    ]
    ticks, position, scale = _axis(min(values), max(values))
    partial = any(_partial(r) for r in timed)
    x0, x1 = LABEL_W, BAR_WIDTH - VALUE_W - (PARTIAL_W if partial else 0)
    axis_y = TOP + len(timed) * ROW_H + 4
    height = axis_y + AXIS_H

    def x(value: float) -> float:
        return x0 + min(max(position(value), 0.0), 1.0) * (x1 - x0)

    fastest = timed[0]
    label = (
        f"Time per forward of {model} on {len(timed)} device kinds, fastest first: "
        f"{fastest.device_kind} {ms(fastest.time_s)} ms ({fastest.how}); {scale} axis"
    )
    parts = [
        f'<svg class="chart compare" viewBox="0 0 {BAR_WIDTH} {height}" role="img" '
        f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">'
    ]
    hows = [h for h in HOW_COLORS if any(r.how == h for r in timed)]
    for i, how in enumerate(hows):
        lx = LEGEND_X + LEGEND_STEP * i
        parts.append(
            f'<g class="legend" data-how="{escape(how)}"><rect x="{lx}" y="8" width="12" '
            f'height="12" {_bar_style(how)}/><text x="{lx + 17}" y="18" class="label">'
            f"{escape(how)}</text></g>"
        )
    if any(_run_marked(r) for r in timed):
        lx = LEGEND_X + LEGEND_STEP * len(hows)
        parts.append(
            f'<g class="legend" data-how="run"><path class="run-marker" d="M{lx + 6},6V22"/>'
            f'<text x="{lx + 17}" y="18" class="label">whole-model run</text></g>'
        )
    for tick in ticks:
        tx = x(tick)
        parts.append(
            f'<line x1="{tx:.1f}" y1="{TOP}" x2="{tx:.1f}" y2="{axis_y}" class="grid"/>'
            f'<text x="{tx:.1f}" y="{axis_y + 15}" text-anchor="middle">'
            f"{escape(si(tick, 's'))}</text>"
        )
    parts.append(f'<line x1="{x0}" y1="{axis_y}" x2="{x1}" y2="{axis_y}" class="axis"/>')
    parts.append(
        f'<text x="{x1}" y="{axis_y + 32}" text-anchor="end">time per forward '
        f"({scale} scale{'; a bar under 100 % of calls is a partial sum' if partial else ''})"
        "</text>"
    )
    for i, row in enumerate(timed):
        parts.append(_bar(row, TOP + i * ROW_H, x))
    parts.append("</svg>")
    return "".join(parts)


def _bar(row: CompareRowOut, y: int, x: Callable[[float], float]) -> str:
    """One kind's bar, whisker, name and figure."""
    assert row.time_s is not None
    mid = y + ROW_H / 2
    end = x(row.time_s)
    interval = interval_ms(row.low_s, row.high_s, row.level)
    title = f"{row.device_kind}: {ms(row.time_s)} ms, {row.how}"
    if _partial(row):
        title += f"; a partial sum: {row.coverage:.1%} of the model's calls"
    if row.low_s is not None and row.high_s is not None:
        title += f"; {interval}"
    name = row.device_kind
    if len(name) > LABEL_CHARS:
        name = name[: LABEL_CHARS - 1] + "…"
    parts = [
        f'<g data-kind="{escape(row.device_kind)}" data-how="{escape(row.how)}">'
        f"<title>{escape(title)}</title>",
        f'<text x="{LABEL_W - 6}" y="{mid + 4:.1f}" text-anchor="end" class="label">'
        f"{escape(name)}</text>",
        f'<rect x="{LABEL_W}" y="{y + 5}" width="{max(end - LABEL_W, 1.0):.1f}" '
        f'height="{ROW_H - 10}" {_bar_style(row.how)}/>',
    ]
    right = end
    if row.low_s is not None and row.high_s is not None:
        lo, hi = x(row.low_s), x(row.high_s)
        right = max(right, hi)
        parts.append(
            f'<path class="whisker" d="M{lo:.1f},{mid:.1f}H{hi:.1f}'
            f"M{lo:.1f},{mid - 5:.1f}V{mid + 5:.1f}M{hi:.1f},{mid - 5:.1f}V{mid + 5:.1f}"
            '"/>'
        )
    if _run_marked(row):
        assert row.full_run_s is not None
        rx = x(row.full_run_s)
        right = max(right, rx)
        parts.append(
            f'<path class="run-marker" d="M{rx:.1f},{y + 1}V{y + ROW_H - 1}">'
            f"<title>{escape(row.device_kind)}: whole-model run {ms(row.full_run_s)} ms"
            f"{'; ' + escape(row.run_error_text) if row.run_error_text else ''}</title></path>"
        )
    covered = f" ({row.coverage:.0%} of calls)" if _partial(row) else ""
    parts.append(
        f'<text x="{right + 6:.1f}" y="{mid + 4:.1f}" class="label">'
        f"{escape(ms(row.time_s))} ms{covered}</text></g>"
    )
    return "".join(parts)


def _partial(row: CompareRowOut) -> bool:
    """Whether the bar is a partial sum: some of the model's calls have no figure."""
    return row.coverage < PARTIAL_BELOW


def _run_marked(row: CompareRowOut) -> bool:
    """Whether the bar gets a marker at the kind's whole-model run (not where it is the bar)."""
    return row.full_run_s is not None and row.full_run_s > 0 and not row.how.endswith(" run")


def _bar_style(how: str) -> str:
    color = HOW_COLORS.get(how, "#5b6575")
    if how == "predicted":  # not by colour alone: a predicted bar is also lighter and dashed
        return f'fill="{color}" fill-opacity="0.45" stroke="{color}" stroke-dasharray="4 2"'
    return f'fill="{color}"'


def _axis(low: float, high: float) -> tuple[list[float], Callable[[float], float], str]:
    """Return the ticks, the position (0 to 1) of a value and the scale's name for the figures."""
    if high / low > LOG_RATIO:
        first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
        last = max(last, first + 1)
        return (
            [10.0**d for d in range(first, last + 1)],
            lambda v: (math.log10(v) - first) / (last - first) if v > 0 else 0.0,
            "log",
        )
    step = _nice(high / 4)
    count = math.ceil(high / step - 1e-9)
    top = count * step
    return [i * step for i in range(count + 1)], lambda v: v / top, "linear"


def _nice(value: float) -> float:
    """Return 1, 2 or 5 times a power of ten, the least at or above ``value``."""
    power = 10.0 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= value * (1 - 1e-9))
