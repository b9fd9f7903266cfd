"""Drawing roofs: a figure on the Agg canvas and roof lines over a log axis of intensities.

No pyplot and no global backend change; matplotlib is imported only when a figure is made. The
model's plot (:mod:`.model`), the chips' plot (:mod:`.chip_plot`) and the report's plots share
these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from operator_db.errors import OperatorDBError
from operator_db.roofline.bounds import Peaks

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def new_figure(width: float, height: float) -> Figure:
    """Return a figure on the Agg canvas.

    Raises:
        OperatorDBError: matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise OperatorDBError(
            "the report's plots need matplotlib: pip install 'operator-db[plot]'"
        ) from None
    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def roof_intensities(lo: float, hi: float, points: int = 201) -> list[float]:
    """Return ``points`` intensities (FLOP/byte) evenly spaced on a log axis, ``lo`` to ``hi``."""
    return [lo * (hi / lo) ** (i / (points - 1)) for i in range(points)]


def draw_roof(ax: Any, peaks: Peaks, xs: Sequence[float], **style: Any) -> None:
    """Draw the roof min(peak, intensity × bandwidth) of ``peaks`` over intensities ``xs``."""
    ys = [peaks.attainable_flops_per_s(x) for x in xs]
    ax.plot(xs, ys, **style)


def draw_roofs(ax: Any, xs: Sequence[float], *, spec: Peaks | None, measured: Peaks | None) -> None:
    """Draw a kind's spec roof (solid), measured roof (dashed) and cache roofs (dotted).

    Each is labelled by its source; a cache level's roof by its level and what it holds.
    """
    if spec is not None:
        draw_roof(ax, spec, xs, color="black", lw=2, label=f"roof, {spec.source}")
    if measured is not None:
        draw_roof(ax, measured, xs, color="black", lw=2, ls="--", label=f"roof, {measured.source}")
    for roof in (r for r in (spec, measured) if r is not None):
        for cache in roof.caches:
            level = Peaks(roof.flops_per_s, cache.bytes_per_s, cache.level)
            size = f"{cache.capacity_bytes / (1 << 20):g} MiB"
            label = f"{cache.level} roof (measured copy; holds {size})"
            draw_roof(ax, level, xs, color="dimgray", lw=1.5, ls=":", label=label)
