"""The report's bar and pie charts: complexity per model, and shares per layer type.

Drawn like :mod:`.plots` (object API, Agg canvas, matplotlib imported when drawing).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from operator_db.report import plots
from operator_db.report.plots import (
    batch_colors,
    palette,
    shorten,
    spans_decades,
)
from operator_db.roofline.figure import new_figure

COMPLEXITY_PANELS = (
    ("step_flops", "FLOPs per call (training: step)"),
    ("params", "parameters (elements)"),
    ("activation_bytes", "activation memory (bytes)"),
    ("intensity", "arithmetic intensity (FLOP/byte)"),
)


def plot_complexity_bars(table: pd.DataFrame, path: Path) -> None:
    """Horizontal bars of FLOPs, parameters, activation memory and intensity per model.

    One row per family and mode (training rows marked), sorted by FLOPs at the largest batch
    size; one bar per batch size, coloured by batch size (parameters: one bar, they do not depend
    on the batch). Log axes where a panel's values span a decade or more.
    """
    import numpy as np
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    table = table.assign(
        row=[
            f"{n} (train)" if m == "training" else str(n)
            for n, m in zip(table["family_name"], table["mode"], strict=True)
        ],
        batch=table["batch_size"].fillna(0).astype(int),
    )
    largest = table.sort_values("batch").groupby("row")["step_flops"].last()
    rows = list(largest.sort_values(ascending=False).index)
    sizes = sorted(table["batch"].unique())
    colors = batch_colors(sizes)
    height = max(3.0, 0.1 * len(rows) * max(1, len(sizes)) + 0.22 * len(rows) + 1.5)
    fig = new_figure(13.5, height)
    axes = [fig.add_subplot(1, len(COMPLEXITY_PANELS), i + 1) for i in range(4)]
    y = np.arange(len(rows))
    for ax, (column, title) in zip(axes, COMPLEXITY_PANELS, strict=True):
        per_batch = column != "params"
        bar = 0.8 / (len(sizes) if per_batch else 1)
        for j, size in enumerate(sizes if per_batch else [sizes[-1]]):
            values = []
            for r in rows:
                cell = table[(table["row"] == r) & ((table["batch"] == size) | (not per_batch))]
                values.append(float(cell[column].iloc[-1]) if not cell.empty else math.nan)
            offset = (j - ((len(sizes) if per_batch else 1) - 1) / 2) * bar
            ax.barh(
                y + offset,
                np.nan_to_num(values, nan=0.0),
                height=bar,
                color=colors[size] if per_batch else "#4c72b0",
                label=f"batch {size}" if per_batch else None,
            )
        ax.set_title(title, fontsize=9)
        ax.set_yticks(y, labels=[shorten(r, 26) for r in rows] if ax is axes[0] else [])
        ax.tick_params(axis="y", labelsize=7)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_axisbelow(True)
        ax.grid(True, axis="x", which="major", alpha=0.3)
        values = table[column].astype(float).replace(0, np.nan).dropna()
        if spans_decades(values):
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            if values.max() / values.min() < 100:  # under two decades: label 1, 2 and 5 too
                ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    handles, labels = axes[0].get_legend_handles_labels()
    if len(sizes) > 1 or sizes != [0]:
        fig.legend(handles, labels, loc="outside lower center", ncols=len(sizes), fontsize=8)
    fig.suptitle("Complexity per model, by batch size (sorted by FLOPs at the largest batch)")
    plots.save_png(fig, path)


PIE_TITLES = {"latency": "latency", "flops": "FLOPs", "memory": "memory traffic"}


def plot_layer_pies(shares: pd.DataFrame, title: str, path: Path) -> None:
    """Draw one family's pies: forward and backward (rows, those present) × latency, FLOPs, memory.

    ``shares`` are the family's rows of :attr:`~operator_db.study.analysis.LayerStudy.shares`;
    each pie's title names its source. A layer type keeps one colour across the six pies.
    """
    types = list(shares.groupby("op_type")["share"].sum().sort_values(ascending=False).index)
    if "other" in types:
        types.remove("other")
        types.append("other")
    hues = palette(len(types))
    colors = {t: ("#bbbbbb" if t == "other" else hues[i]) for i, t in enumerate(types)}
    passes = [p for p in ("forward", "backward") if (shares["pass"] == p).any()]
    fig = new_figure(12.5, 3.9 * len(passes) + 0.4)
    wedges: dict[str, Any] = {}
    for i, pass_ in enumerate(passes):
        for j, quantity in enumerate(("latency", "flops", "memory")):
            ax = fig.add_subplot(len(passes), 3, 3 * i + j + 1)
            pie = shares[(shares["pass"] == pass_) & (shares["quantity"] == quantity)]
            if pie.empty:
                ax.text(0.5, 0.5, f"no {pass_} {PIE_TITLES[quantity]}", ha="center", va="center")
                ax.set_axis_off()
                continue
            patches, _texts, _autotexts = ax.pie(
                pie["share"].astype(float),
                colors=[colors[t] for t in pie["op_type"]],
                autopct=lambda p: f"{p:.0f}%" if p >= 5 else "",
                pctdistance=0.75,
                startangle=90,
                counterclock=False,
                wedgeprops={"linewidth": 0.6, "edgecolor": "white"},
                textprops={"fontsize": 7},
            )
            for t, patch in zip(pie["op_type"], patches, strict=True):
                wedges.setdefault(str(t), patch)
            source = str(pie["source"].iloc[0])
            ax.set_title(f"{pass_} {PIE_TITLES[quantity]}\n({shorten(source, 44)})", fontsize=8.5)
    ordered = [t for t in types if t in wedges]
    fig.legend(
        [wedges[t] for t in ordered],
        [shorten(t, 30) for t in ordered],
        loc="outside right upper",
        fontsize=8,
        frameon=False,
        title="layer type",
        title_fontsize=8,
    )
    if "backward" not in passes:
        title += "\nno training spec at this batch size: no backward pies"
    fig.suptitle(title, fontsize=10)
    plots.save_png(fig, path)
