"""The report's plots, drawn with matplotlib's object API on the Agg canvas.

No pyplot and no global backend change; matplotlib is imported only when a plot is drawn.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from operator_db.errors import OperatorDBError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

LABEL_LIMIT = 15
"""Scatter points are labelled with their model up to this many; beyond, the table names them."""

VARIABLE_NAMES = {
    "cpu_latency_s": "CPU latency",
    "gpu_latency_s": "GPU latency",
    "flops": "FLOPs",
    "params": "parameters",
}

# --- plots ------------------------------------------------------------------------------------


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


def _colors(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", ":", "-.")


def _short(label: str, limit: int = 60) -> str:
    """Shorten a long label in its middle, keeping both ends readable."""
    if len(label) <= limit:
        return label
    keep = (limit - 1) // 2
    return label[:keep] + "…" + label[-keep:]


def _natural(text: str) -> list[Any]:
    """Sort key that orders embedded numbers by value (``w32`` before ``w128``)."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text)]


def _spans_decades(values: pd.Series) -> bool:
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


def _save(fig: Figure, path: Path) -> None:
    fig.savefig(path, format="png")


def plot_batch(batch: pd.DataFrame, column: str, ylabel: str, title: str, path: Path) -> None:
    """Plot ``column`` against batch size: one line per (family, device kind), log₂ x axis."""
    families = sorted(batch["family_name"].unique(), key=_natural)
    groups = sorted(
        batch.groupby(["family_name", "device_kind"], sort=True),
        key=lambda item: (_natural(str(item[0][0])), str(item[0][1])),
    )
    kinds = sorted(batch["device_kind"].unique())
    colors = dict(zip(families, _colors(len(families)), strict=True))
    width = 8.5 if len(groups) <= 8 else 11.0
    fig = new_figure(width, 5.0)
    ax = fig.add_subplot()
    for (family, kind), group in groups:
        k = kinds.index(kind)
        label = _short(str(family), 50) + ("" if len(kinds) == 1 else f" — {kind}")
        ax.plot(
            group["batch_size"].astype(float),
            group[column].astype(float),
            marker=MARKERS[k % len(MARKERS)],
            linestyle=LINESTYLES[k % len(LINESTYLES)],
            color=colors[family],
            markersize=4,
            linewidth=1.3,
            alpha=0.85,
            label=label,
        )
    sizes = sorted({int(b) for b in batch["batch_size"]})
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, labels=[str(s) for s in sizes])
    ax.minorticks_off()
    if _spans_decades(batch[column].astype(float)):
        ax.set_yscale("log")
    ax.set_xlabel("batch size (samples, log₂ scale)")
    ax.set_ylabel(ylabel)
    suffix = "" if len(kinds) > 1 else f" on {kinds[0]}"
    ax.set_title(title + suffix)
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax, len(groups), "family" + (" — device kind" if len(kinds) > 1 else ""))
    _save(fig, path)


def plot_complexity(points: pd.DataFrame, x: str, xlabel: str, title: str, path: Path) -> int:
    """Scatter latency against ``x`` (log-log), colour by device kind; return points drawn.

    Points with ``x <= 0`` (a model without parameters) cannot sit on a log axis and are left out.
    Points are labelled with their model when there are at most ``LABEL_LIMIT``.
    """
    shown = points[(points[x].astype(float) > 0) & (points["latency_s"] > 0)]
    kinds = sorted(shown["device_kind"].unique())
    colors = _colors(len(kinds))
    modes = sorted(shown["mode"].unique())
    fig = new_figure(8.5, 5.5)
    ax = fig.add_subplot()
    entries = 0
    for i, kind in enumerate(kinds):
        for mode in modes:
            group = shown[(shown["device_kind"] == kind) & (shown["mode"] == mode)]
            if group.empty:
                continue
            entries += 1
            label = kind if len(modes) == 1 else f"{kind} ({mode})"
            ax.scatter(
                group[x].astype(float),
                group["latency_s"].astype(float),
                s=24,
                alpha=0.75,
                color=colors[i],
                marker="o" if mode == "inference" else "^",
                edgecolors="none",
                label=label,
            )
    if 0 < len(shown) <= LABEL_LIMIT:
        for row in shown.itertuples():
            ax.annotate(
                str(row.model),
                (float(getattr(row, x)), float(row.latency_s)),
                xytext=(4, 3),
                textcoords="offset points",
                fontsize=7,
                alpha=0.9,
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("latency per call (s, log scale)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if entries:
        _legend(ax, entries, "device kind")
    _save(fig, path)
    return len(shown)


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
    _save(fig, path)


def plot_forward_backward(models: pd.DataFrame, path: Path) -> None:
    """Horizontal bars per training model: backward:forward in FLOPs and in time per device kind."""
    import numpy as np

    names = sorted(models["model"].unique())
    kinds = sorted(models["device_kind"].dropna().unique())
    series: list[tuple[str, list[float]]] = []
    flops = models.drop_duplicates("model").set_index("model")["flops_ratio"]
    series.append(("FLOPs", [float(flops.get(n, math.nan)) for n in names]))
    for kind in kinds:
        ratio = models[models["device_kind"] == kind].set_index("model")["time_ratio"]
        series.append((f"time on {kind}", [float(ratio.get(n, math.nan)) for n in names]))
    bar = 0.8 / len(series)
    fig = new_figure(8.5, max(2.8, 0.32 * len(names) * len(series) + 1.6))
    ax = fig.add_subplot()
    y = np.arange(len(names))
    colors = _colors(len(series))
    for i, (label, values) in enumerate(series):
        offsets = y + (i - (len(series) - 1) / 2) * bar
        ax.barh(offsets, np.nan_to_num(values, nan=0.0), height=bar, color=colors[i], label=label)
        for offset, value in zip(offsets, values, strict=True):
            if math.isnan(value):
                ax.text(0.02, offset, "n/a", va="center", fontsize=7, color=colors[i])
    ax.axvline(2.0, color="grey", linestyle="--", linewidth=1, label="2× (rule of thumb)")
    ax.set_yticks(y, labels=[_short(n, 40) for n in names], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("backward : forward ratio (×)")
    ax.set_ylabel("training model")
    ax.set_title("Backward against forward, per training model")
    ax.grid(True, axis="x", alpha=0.3)
    _legend(ax, len(series) + 1, outside=True)
    _save(fig, path)
