"""Drawing roofs: a figure on the Agg canvas and roof lines over a log axis of intensities.

No pyplot and no global backend change; matplotlib is imported only when a figure is made. The
model's plot (:mod:`.model`), the chips' plot (:mod:`.chip_plot`) and the report's plots share
these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from operator_db.errors import OperatorDBError
from operator_db.roofline.bounds import CacheRoof, Peaks
from operator_db.roofline.explain import RoofClass, RoofCounts, cache_levels, class_labels, times

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


def cache_label(cache: CacheRoof) -> str:
    """Return a cache roof's legend: ``L2 roof, 224 GB/s (measured copy; holds 2 MiB)``."""
    size = f"{cache.capacity_bytes / (1 << 20):g} MiB"
    return f"{cache.level} roof, {cache.bytes_per_s / 1e9:.4g} GB/s ({cache.source}; holds {size})"


def above_dram(cache: CacheRoof, roofs: Sequence[Peaks]) -> bool:
    """Whether a cache roof is faster than every DRAM roof drawn beside it (else it is none).

    An L2 roof attained above the measured DRAM bandwidth but below the spec sheet's would be
    drawn, and listed, under a DRAM roof of the same figure.
    """
    return all(cache.bytes_per_s > r.bytes_per_s for r in roofs)


def draw_roofs(ax: Any, xs: Sequence[float], *, spec: Peaks | None, measured: Peaks | None) -> None:
    """Draw a kind's spec roof (solid), measured roof (dashed) and cache roofs (dotted).

    Each is labelled by its source; a cache level's roof by its level, how it was found (a
    measured copy, or attained by the kind's configurations) and what it holds; one that both
    roofs carry (an attained one) once.
    """
    if spec is not None:
        draw_roof(ax, spec, xs, color="black", lw=2, label=f"roof, {spec.source}")
    if measured is not None:
        draw_roof(ax, measured, xs, color="black", lw=2, ls="--", label=f"roof, {measured.source}")
    drawn: set[CacheRoof] = set()
    roofs = [r for r in (spec, measured) if r is not None]
    for roof in roofs:
        for cache in roof.caches:
            if cache in drawn or not above_dram(cache, roofs):
                continue
            drawn.add(cache)
            level = Peaks(roof.flops_per_s, cache.bytes_per_s, cache.level)
            draw_roof(ax, level, xs, color="dimgray", lw=1.5, ls=":", label=cache_label(cache))


def mark_classes(
    ax: Any,
    xs: Sequence[float],
    ys: Sequence[float],
    classes: Sequence[RoofClass | None],
    peaks: Peaks | None,
    counts: RoofCounts,
) -> None:
    """Mark the points above the plain roof by what explains them.

    A cache roof: ringed; a Winograd or FFT kernel: purple diamonds; nothing: red crosses.

    ``xs``, ``ys`` and ``classes`` are the points' intensities, achieved FLOP/s and classes
    (:func:`~operator_db.roofline.explain.roof_class`); ``counts`` their counts, for the legend.
    """
    labels = class_labels(peaks)
    cached = [(x, y) for x, y, c in zip(xs, ys, classes, strict=True) if c == "cache"]
    if cached:
        ax.scatter(
            *zip(*cached, strict=True),
            s=60,
            facecolors="none",
            edgecolors="darkorange",
            linewidths=1.4,
            zorder=6,
            label=f"{labels['cache']}: above the DRAM roof, within the {cache_levels(peaks)} "
            f"roof ({counts.cache})",
        )
    fewer = [(x, y) for x, y, c in zip(xs, ys, classes, strict=True) if c == "algorithm"]
    if fewer:
        most = "" if counts.algorithm_most is None else f", up to {times(counts.algorithm_most)}"
        ax.scatter(
            *zip(*fewer, strict=True),
            s=16,
            marker="D",
            facecolors="none",
            edgecolors="purple",
            linewidths=0.7,
            zorder=6,
            label=f"{labels['algorithm']}: a Winograd/FFT kernel ran fewer FLOPs than counted "
            f"({counts.algorithm}{most})",
        )
    lost = [(x, y) for x, y, c in zip(xs, ys, classes, strict=True) if c == "unexplained"]
    if lost:
        most = "" if counts.most_above is None else f", up to {times(counts.most_above)}"
        ax.scatter(
            *zip(*lost, strict=True),
            s=36,
            marker="x",
            color="red",
            linewidths=1.2,
            zorder=7,
            label=f"unexplained: above every roof ({counts.unexplained}{most})",
        )
