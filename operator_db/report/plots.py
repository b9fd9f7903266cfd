"""The report's plots, drawn with matplotlib's object API on the Agg canvas.

No pyplot and no global backend change; matplotlib is imported only when a plot is drawn.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from operator_db.roofline.figure import new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

VARIABLE_NAMES = {
    "cpu_latency_s": "CPU latency",
    "gpu_latency_s": "GPU latency",
    "flops": "FLOPs",
    "params": "parameters",
}

# --- plots ------------------------------------------------------------------------------------


def palette(n: int) -> list[Any]:
    """Return ``n`` distinct colours: tab10, or past ten the twenty of tab20, dark ones first."""
    from matplotlib import colormaps

    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    # tab20 pairs a dark and a light shade of each hue: the ten dark ones first, then the light.
    cmap = colormaps["tab20"]
    order = [*range(0, 20, 2), *range(1, 20, 2)]
    return [cmap(order[i % 20]) for i in range(n)]


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def shorten(label: str, limit: int = 60) -> str:
    """Shorten a long label in its middle, keeping both ends readable."""
    if len(label) <= limit:
        return label
    keep = (limit - 1) // 2
    return label[:keep] + "…" + label[-keep:]


def _natural(text: str) -> list[Any]:
    """Sort key that orders embedded numbers by value (``w32`` before ``w128``)."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text)]


def spans_decades(values: pd.Series) -> bool:
    """Say whether positive ``values`` span a factor of 10 or more (then a log axis reads best)."""
    values = values.dropna()
    return bool(len(values)) and float(values.min()) > 0 and values.max() / values.min() >= 10


def _legend(ax: Axes, entries: int, title: str | None = None, *, outside: bool = False) -> None:
    """Add a legend: inside the axes when small, else beside them in small type and columns."""
    if entries <= 8 and not outside:
        ax.legend(fontsize=8, title=title, title_fontsize=8, framealpha=0.8)
    else:
        ax.legend(
            fontsize=7,
            title=title,
            title_fontsize=7,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            ncols=max(1, math.ceil(entries / 28)),
            frameon=False,
        )


def save_png(fig: Figure, path: Path) -> None:
    """Write ``fig`` to ``path`` as PNG."""
    fig.savefig(path, format="png")


def plot_spearman(matrix: pd.DataFrame, pairs: pd.DataFrame, path: Path) -> None:
    """Heatmap of Spearman's ρ in [−1, 1], each cell annotated with ρ and its number of models."""
    import numpy as np
    from matplotlib import colormaps

    names = [VARIABLE_NAMES.get(str(c), str(c)) for c in matrix.columns]
    values = matrix.to_numpy(dtype=float)
    cmap = colormaps["RdBu_r"].with_extremes(bad="#dddddd")
    fig = new_figure(1.6 * len(names) + 2.2, 1.3 * len(names) + 1.4)
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=-1, vmax=1)
    for i in range(len(names)):
        for j in range(len(names)):
            v = values[i, j]
            n = int(pairs.iloc[i, j])
            text = "n/a" if math.isnan(v) else f"{v:+.2f}"
            ax.text(
                j,
                i,
                f"{text}\nn={n}",
                ha="center",
                va="center",
                fontsize=9,
                color="white" if not math.isnan(v) and abs(v) > 0.6 else "black",
            )
    ax.set_xticks(range(len(names)), labels=names, rotation=20, ha="right")
    ax.set_yticks(range(len(names)), labels=names)
    ax.set_title("Spearman rank correlation across models")
    cbar = fig.colorbar(image, ax=ax, shrink=0.85)
    cbar.set_label("Spearman ρ (−1 … +1)")
    save_png(fig, path)


def plot_forward_backward(models: pd.DataFrame, path: Path) -> None:
    """Horizontal bars per training model: backward:forward in FLOPs and in time per device kind."""
    import numpy as np

    names = sorted(models["model"].unique(), key=_natural)
    kinds = sorted(models["device_kind"].dropna().unique())
    series: list[tuple[str, list[float]]] = []
    flops = models.drop_duplicates("model").set_index("model")["flops_ratio"]
    series.append(("FLOPs", [float(flops.get(n, math.nan)) for n in names]))
    for kind in kinds:
        ratio = models[models["device_kind"] == kind].set_index("model")["time_ratio"]
        series.append((f"time on {kind}", [float(ratio.get(n, math.nan)) for n in names]))
    bar = 0.8 / len(series)
    fig = new_figure(8.5, max(2.8, 0.22 * len(names) * len(series) + 1.6))
    ax = fig.add_subplot()
    y = np.arange(len(names))
    colors = palette(len(series))
    for i, (label, values) in enumerate(series):
        offsets = y + (i - (len(series) - 1) / 2) * bar
        ax.barh(offsets, np.nan_to_num(values, nan=0.0), height=bar, color=colors[i], label=label)
        for offset, value in zip(offsets, values, strict=True):
            if math.isnan(value):
                ax.text(0.02, offset, "n/a", va="center", fontsize=7, color=colors[i])
    ax.axvline(2.0, color="grey", linestyle="--", linewidth=1, label="2× (rule of thumb)")
    ax.set_yticks(y, labels=[shorten(n, 40) for n in names], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("backward : forward ratio (×)")
    ax.set_ylabel("training model")
    ax.set_title("Backward against forward, per training model")
    ax.grid(True, axis="x", alpha=0.3)
    _legend(ax, len(series) + 1, outside=True)
    save_png(fig, path)


# --- the study plots: families by marker, batch sizes by colour -------------------------------

FAMILY_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
"""One marker per model family (they repeat past 12; the families' names are written beside)."""

FAMILY_LABEL_LIMIT = 24
"""Families named beside their points up to this many per panel; beyond, only the legend."""


def family_markers(names: Any) -> dict[str, str]:
    """Return a marker per family name, in natural order."""
    ordered = sorted({str(n) for n in names}, key=_natural)
    return {n: FAMILY_MARKERS[i % len(FAMILY_MARKERS)] for i, n in enumerate(ordered)}


def batch_colors(sizes: Any) -> dict[int, Any]:
    """Return a colour per batch size: a sequential scale from small (dark) to large (light)."""
    from matplotlib import colormaps

    ordered = sorted({int(s) for s in sizes})
    cmap = colormaps["viridis"]
    if len(ordered) == 1:
        return {ordered[0]: cmap(0.35)}
    return {s: cmap(0.05 + 0.85 * i / (len(ordered) - 1)) for i, s in enumerate(ordered)}


def _style_legends(
    fig: Figure, markers: dict[str, str], colors: dict[int, Any], modes: set[str]
) -> None:
    """Add the figure's legends: families (markers), batch sizes (colours), modes (fill)."""
    from matplotlib.lines import Line2D

    def handle(marker: str, color: Any, filled: bool = True) -> Line2D:
        return Line2D(
            [],
            [],
            marker=marker,
            linestyle="none",
            markersize=6,
            markerfacecolor=color if filled else "none",
            markeredgecolor=color,
        )

    handles = [handle(m, "#444444") for m in markers.values()]
    labels = [shorten(n, 28) for n in markers]
    handles += [handle("o", c) for c in colors.values()]
    labels += [f"batch {s}" for s in colors]
    if len(modes) > 1:
        handles += [handle("o", "#444444", True), handle("o", "#444444", False)]
        labels += ["inference (filled)", "training step (hollow)"]
    fig.legend(
        handles,
        labels,
        loc="outside right upper",
        fontsize=7,
        frameon=False,
        ncols=max(1, math.ceil(len(handles) / 34)),
    )


def _scatter_styled(
    ax: Axes,
    frame: pd.DataFrame,
    x: str,
    y: str,
    markers: dict[str, str],
    colors: dict[int, Any],
    label_at: str = "x",
) -> None:
    """Scatter ``frame`` by family marker and batch colour; hollow markers for training specs.

    Each family is named once, beside its point of largest ``label_at`` (``x`` by default; ``-y``
    for its lowest ``y``), while the panel has at most ``FAMILY_LABEL_LIMIT`` families.
    """
    for row in frame.itertuples(index=False):
        color = colors.get(int(row.batch_size), "grey") if pd.notna(row.batch_size) else "grey"
        training = row.mode == "training"
        ax.scatter(
            [float(getattr(row, x))],
            [float(getattr(row, y))],
            s=42,
            marker=markers[str(row.family_name)],
            facecolors="none" if training else [color],
            edgecolors=[color],
            linewidths=1.3,
            alpha=0.9,
            zorder=3,
        )
    if frame["family_name"].nunique() <= FAMILY_LABEL_LIMIT:
        for name, group in frame.groupby("family_name"):
            if label_at == "-y":
                top = group.loc[group[y].astype(float).idxmin()]
            else:
                top = group.loc[group[x].astype(float).idxmax()]
            ax.annotate(
                shorten(str(name), 24),
                (float(top[x]), float(top[y])),
                xytext=(5, -3),
                textcoords="offset points",
                fontsize=6.5,
                color="#333333",
                alpha=0.9,
            )


def _kinds_grid(n: int, width: float, height: float) -> tuple[Figure, list[Axes]]:
    """Return a figure with one panel per device kind (up to 3 a row)."""
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = new_figure(width * cols + 2.0, height * rows)
    axes = [fig.add_subplot(rows, cols, i + 1) for i in range(n)]
    return fig, axes


def plot_latency_scatter(points: pd.DataFrame, x: str, xlabel: str, path: Path) -> int:
    """Scatter latency against ``x`` (log-log), one panel per device kind; return points drawn.

    ``points`` has ``device_kind``, ``family_name``, ``mode``, ``batch_size``, ``latency_s`` and
    ``x``. Marker per family, colour per batch size, hollow for training steps. Points with
    ``x <= 0`` cannot sit on a log axis and are left out.
    """
    shown = points[(points[x].astype(float) > 0) & (points["latency_s"].astype(float) > 0)]
    kinds = sorted(shown["device_kind"].unique())
    markers = family_markers(points["family_name"])
    colors = batch_colors(points["batch_size"].dropna())
    fig, axes = _kinds_grid(max(1, len(kinds)), 5.2, 4.6)
    for ax, kind in zip(axes, kinds, strict=False):
        group = shown[shown["device_kind"] == kind]
        _scatter_styled(ax, group, x, "latency_s", markers, colors)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("latency per call (s, log scale)")
        ax.set_title(f"{shorten(str(kind), 40)} ({len(group)} runs)", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    _style_legends(fig, markers, colors, set(shown["mode"]))
    save_png(fig, path)
    return len(shown)


def plot_batch(batch: pd.DataFrame, column: str, ylabel: str, title: str, path: Path) -> None:
    """Plot ``column`` against batch size: one panel per device kind, one line per family.

    A base family (``base_family_name``) has one colour and marker in every panel; its inference
    line is solid, its training line dashed. Log₂ batch axis with the measured sizes as ticks; log
    y axis where a panel spans a decade or more.
    """
    from matplotlib.lines import Line2D

    kinds = sorted(batch["device_kind"].unique())
    names = sorted(batch["base_family_name"].unique(), key=_natural)
    colors = dict(zip(names, palette(len(names)), strict=True))
    markers = family_markers(names)
    fig, axes = _kinds_grid(len(kinds), 5.0, 4.2)
    for ax, kind in zip(axes, kinds, strict=True):
        rows = batch[batch["device_kind"] == kind]
        for (name, mode), group in rows.groupby(["base_family_name", "mode"], sort=True):
            ax.plot(
                group["batch_size"].astype(float),
                group[column].astype(float),
                marker=markers[str(name)],
                linestyle="--" if mode == "training" else "-",
                color=colors[name],
                markersize=4.5,
                linewidth=1.3,
                alpha=0.9,
            )
        sizes = sorted({int(b) for b in rows["batch_size"]})
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, labels=[str(s) for s in sizes])
        ax.minorticks_off()
        if spans_decades(rows[column].astype(float)):
            ax.set_yscale("log")
        ax.set_xlabel("batch size (samples, log₂ scale)")
        ax.set_ylabel(ylabel)
        ax.set_title(shorten(str(kind), 40), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    handles = [
        Line2D([], [], color=colors[n], marker=markers[n], markersize=4.5, linewidth=1.3)
        for n in names
    ]
    labels = [shorten(str(n), 28) for n in names]
    if batch["mode"].nunique() > 1:
        handles += [
            Line2D([], [], color="#444444", linestyle="-"),
            Line2D([], [], color="#444444", linestyle="--"),
        ]
        labels += ["inference", "training step"]
    fig.legend(
        handles,
        labels,
        loc="outside right upper",
        fontsize=7,
        frameon=False,
        title="family",
        title_fontsize=7,
        ncols=max(1, math.ceil(len(labels) / 34)),
    )
    fig.suptitle(title, fontsize=10)
    save_png(fig, path)


def plot_achieved_roofline(
    points: pd.DataFrame,
    kind: str,
    spec: Any,
    measured: Any,
    path: Path,
    *,
    markers: dict[str, str],
    colors: dict[int, Any],
) -> int:
    """Draw a kind's roofs and every measured model × batch on them; return the points drawn.

    ``points`` has ``intensity`` (FLOP/byte), ``achieved_flops_per_s``, ``family_name``,
    ``mode`` and ``batch_size``; ``spec``/``measured`` are the kind's
    :class:`~operator_db.roofline.bounds.Peaks` (either may be None), drawn by
    :func:`~operator_db.roofline.figure.draw_roofs`; with a ``roof`` column (and ``above``:
    :func:`~operator_db.report.roofs.classify_runs`), the runs a cache roof explains are ringed
    and those above every roof crossed.
    """
    from operator_db.roofline.explain import count_classes
    from operator_db.roofline.figure import draw_roofs, mark_classes, roof_intensities

    shown = points[
        (points["intensity"].astype(float) > 0) & (points["achieved_flops_per_s"].astype(float) > 0)
    ]
    fig = new_figure(8.8, 5.6)
    ax = fig.add_subplot()
    if not shown.empty:
        lo = max(min(float(shown["intensity"].min()) / 4, 0.1), 1e-3)
        hi = max(float(shown["intensity"].max()) * 4, 1e3)
    else:
        lo, hi = 0.1, 1e3
    draw_roofs(ax, roof_intensities(lo, hi), spec=spec, measured=measured)
    _scatter_styled(ax, shown, "intensity", "achieved_flops_per_s", markers, colors, label_at="-y")
    if "roof" in shown:  # the runs a cache roof explains ringed, those above every roof crossed
        mark_classes(
            ax,
            list(shown["intensity"].astype(float)),
            list(shown["achieved_flops_per_s"].astype(float)),
            list(shown["roof"]),
            measured or spec,
            count_classes(shown["roof"], shown.get("above")),
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte of compulsory traffic)")
    ax.set_ylabel("achieved performance (FLOP/s)")
    roofless = spec is None and measured is None
    ax.set_title(
        f"Whole models on the roofline of {shorten(kind, 50)} ({len(shown)} runs)"
        + ("\nno peaks known for this kind: no roofs drawn" if roofless else ""),
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.25)
    if not roofless:
        ax.legend(fontsize=7, loc="lower right", framealpha=0.9)
    _style_legends(fig, markers, colors, set(shown["mode"]))
    save_png(fig, path)
    return len(shown)
