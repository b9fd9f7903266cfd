"""The study report: the batch, complexity, correlation and backward studies as Markdown or HTML.

:func:`build_report` writes ``report.md`` (or ``report.html``), its PNG plots and every study table
in full as CSV into one folder. Plots are drawn with matplotlib's object API on the Agg canvas
(no pyplot, no global backend change); matplotlib is imported only here, when a report is built.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd
from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.engine import safe_url
from operator_db.errors import OperatorDBError
from operator_db.estimate import studies

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ReportFormat = Literal["md", "html"]

PLOT_FILES = (
    "batch_latency.png",
    "batch_throughput.png",
    "latency_vs_flops.png",
    "latency_vs_params.png",
    "spearman.png",
    "forward_backward.png",
)
"""Every plot a report may write; stale ones from an earlier report in the folder are removed."""

TABLE_FILES = (
    "models.csv",
    "batch.csv",
    "correlation_data.csv",
    "correlation_matrix.csv",
    "forward_backward_models.csv",
    "forward_backward_configs.csv",
)
"""Every table a report writes in full."""

LABEL_LIMIT = 15
"""Scatter points are labelled with their model up to this many; beyond, the table names them."""

CONFIG_ROWS = 40
"""Rows of the per-configuration forward:backward table shown in the report (all are in the CSV)."""

VARIABLE_NAMES = {
    "cpu_latency_s": "CPU latency",
    "gpu_latency_s": "GPU latency",
    "flops": "FLOPs",
    "params": "parameters",
}

# --- formatting -------------------------------------------------------------------------------


def _missing(x: Any) -> bool:
    return x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x))


def _num(scale: float = 1.0, digits: int = 4) -> Callable[[Any], str]:
    """Format with ``digits`` significant digits; large values in full with thousands commas."""

    def fmt(x: Any) -> str:
        if _missing(x):
            return "—"
        v = float(x) * scale
        return f"{v:,.0f}" if 10**digits <= abs(v) < 1e15 else f"{v:.{digits}g}"

    return fmt


def _fixed(digits: int, suffix: str = "") -> Callable[[Any], str]:
    def fmt(x: Any) -> str:
        return "—" if _missing(x) else f"{float(x):.{digits}f}{suffix}"

    return fmt


def _percent(x: Any) -> str:
    return "—" if _missing(x) else f"{float(x) * 100:.0f} %"


def _signed_percent(x: Any) -> str:
    return "—" if _missing(x) else f"{float(x) * 100:+.1f} %"


def _text(x: Any) -> str:
    return "—" if _missing(x) else str(x)


def _int(x: Any) -> str:
    return "—" if _missing(x) else str(int(x))


Columns = Sequence[tuple[str, str, Callable[[Any], str]]]
"""(source column, header, formatter) for a displayed table."""

MODEL_DISPLAY: Columns = [
    ("model", "model", _text),
    ("device_kind", "device kind", _text),
    ("mode", "mode", _text),
    ("batch_size", "batch", _int),
    ("latency_s", "latency (ms)", _num(1e3)),
    ("throughput_per_s", "throughput (samples/s)", _num()),
    ("energy_per_call_j", "energy/call (J)", _num()),
    ("step_flops", "GFLOPs/call", _num(1e-9)),
    ("params", "params (M)", _num(1e-6)),
    ("achieved_flops_per_s", "achieved GFLOP/s", _num(1e-9)),
    ("estimate_s", "composed (ms)", _num(1e3)),
    ("coverage", "coverage", _percent),
    ("estimate_error", "composed error", _signed_percent),
]

BATCH_DISPLAY: Columns = [
    ("family_name", "family", _text),
    ("device_kind", "device kind", _text),
    ("batch_size", "batch", _int),
    ("model", "model", _text),
    ("latency_s", "latency (ms)", _num(1e3)),
    ("latency_per_sample_s", "latency/sample (ms)", _num(1e3)),
    ("throughput_per_s", "throughput (samples/s)", _num()),
    ("throughput_gain", "gain vs smallest batch (×)", _fixed(2)),
]

CORRELATION_DATA_DISPLAY: Columns = [
    ("model", "model", _text),
    ("mode", "mode", _text),
    ("batch_size", "batch", _int),
    ("cpu_latency_s", "CPU latency (ms)", _num(1e3)),
    ("gpu_latency_s", "GPU latency (ms)", _num(1e3)),
    ("flops", "GFLOPs/call", _num(1e-9)),
    ("params", "params (M)", _num(1e-6)),
]

FB_MODEL_DISPLAY: Columns = [
    ("model", "model", _text),
    ("device_kind", "device kind", _text),
    ("calls", "op calls", _int),
    ("flops_forward", "forward GFLOPs", _num(1e-9)),
    ("flops_backward", "backward GFLOPs", _num(1e-9)),
    ("flops_ratio", "FLOPs bwd:fwd", _fixed(2)),
    ("flops_coverage", "FLOPs coverage", _percent),
    ("time_forward_s", "forward (ms)", _num(1e3)),
    ("time_backward_s", "backward (ms)", _num(1e3)),
    ("time_ratio", "time bwd:fwd", _fixed(2)),
    ("time_coverage", "time coverage", _percent),
]

FB_CONFIG_DISPLAY: Columns = [
    ("model", "model", _text),
    ("op", "op", _text),
    ("inputs", "inputs", _text),
    ("count", "count", _int),
    ("device_kind", "device kind", _text),
    ("flops_ratio", "FLOPs bwd:fwd", _fixed(2)),
    ("time_forward_s", "forward (µs)", _num(1e6)),
    ("time_training_s", "fwd+bwd (µs)", _num(1e6)),
    ("time_ratio", "time bwd:fwd", _fixed(2)),
    ("status", "status", _text),
]


def display(frame: pd.DataFrame, columns: Columns) -> pd.DataFrame:
    """Return ``frame`` as strings with human units in the headers (missing values as ``—``)."""
    return pd.DataFrame(
        {header: [fmt(v) for v in frame[name]] for name, header, fmt in columns if name in frame},
        dtype=object,
    )


def markdown_table(frame: pd.DataFrame) -> str:
    """Render a DataFrame of strings as a GitHub Markdown table (``|`` escaped)."""

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    header = "| " + " | ".join(cell(c) for c in frame.columns) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(False)]
    return "\n".join([header, rule, *rows])


def _inline_html(text: str) -> str:
    """Escape ``text`` for HTML, turning Markdown code spans (backticks) into ``<code>``."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


# --- the document -----------------------------------------------------------------------------


@dataclass
class _Doc:
    """A report as a list of blocks, rendered to Markdown or HTML."""

    title: str
    blocks: list[tuple[str, Any]] = field(default_factory=list)

    def heading(self, text: str) -> None:
        self.blocks.append(("h2", text))

    def para(self, text: str) -> None:
        self.blocks.append(("p", text))

    def bullets(self, items: Sequence[str]) -> None:
        if items:
            self.blocks.append(("ul", list(items)))

    def table(self, frame: pd.DataFrame) -> None:
        self.blocks.append(("table", frame))

    def image(self, name: str, alt: str) -> None:
        self.blocks.append(("img", (name, alt)))

    def markdown(self) -> str:
        out = [f"# {self.title}"]
        for kind, value in self.blocks:
            if kind == "h2":
                out.append(f"## {value}")
            elif kind == "p":
                out.append(value)
            elif kind == "ul":
                out.append("\n".join(f"- {item}" for item in value))
            elif kind == "table":
                out.append(markdown_table(value))
            else:
                out.append(f"![{value[1]}]({value[0]})")
        return "\n\n".join(out) + "\n"

    def html(self) -> str:
        out = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{html.escape(self.title)}</title>",
            "<style>body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;"
            "padding:0 1em;color:#222}table{border-collapse:collapse;font-size:.85em;"
            "margin:1em 0}th,td{border:1px solid #ccc;padding:.25em .5em;text-align:right}"
            "th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}"
            "img{max-width:100%;border:1px solid #eee;margin:.5em 0}</style>",
            "</head><body>",
            f"<h1>{html.escape(self.title)}</h1>",
        ]
        for kind, value in self.blocks:
            if kind == "h2":
                out.append(f"<h2>{html.escape(value)}</h2>")
            elif kind == "p":
                out.append(f"<p>{_inline_html(value)}</p>")
            elif kind == "ul":
                out.append("<ul>" + "".join(f"<li>{_inline_html(i)}</li>" for i in value) + "</ul>")
            elif kind == "table":
                out.append(value.to_html(index=False, escape=True, border=0))
            else:
                name, alt = (html.escape(v) for v in value)
                out.append(
                    f'<figure><img src="{name}" alt="{alt}"><figcaption>{alt}</figcaption></figure>'
                )
        out.append("</body></html>")
        return "\n".join(out) + "\n"


# --- plots ------------------------------------------------------------------------------------


def _new_figure(width: float, height: float) -> Figure:
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
    fig = _new_figure(width, 5.0)
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
    fig = _new_figure(8.5, 5.5)
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
    fig = _new_figure(1.6 * len(names) + 2.2, 1.3 * len(names) + 1.4)
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
    fig = _new_figure(8.5, max(2.8, 0.32 * len(names) * len(series) + 1.6))
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


# --- the report -------------------------------------------------------------------------------


def _source(session: Session) -> str:
    bind = session.get_bind()
    return safe_url(str(bind.engine.url)) if hasattr(bind, "engine") else "(unknown)"


def _model_section(doc: _Doc, table: pd.DataFrame) -> None:
    doc.heading("Measured models")
    if table.empty:
        doc.para(
            "No model has a measured full-model run on the device kinds covered: "
            "nothing to study yet. Enqueue models with `opdb enqueue MODEL --device-kind "
            "KIND` and run a worker."
        )
        return
    doc.para(
        "One row per model and device kind: the latest eager full-model run. Throughput is batch "
        "/ latency; GFLOPs/call is the work of one measured call (forward, plus backward for "
        "training); params are distinct parameters; composed is Σ count × per-operator time, "
        "with its error against the measured run given only at full coverage (for training, the "
        "operators' forward + backward against the whole step, which also holds the optimizer). "
        "All rows: `models.csv`."
    )
    doc.table(display(table, MODEL_DISPLAY))


def _batch_section(doc: _Doc, batch: pd.DataFrame, out: Path, has_models: bool) -> None:
    doc.heading("Batch size")
    if batch.empty:
        doc.para(
            "No model family has full-model runs at two or more batch sizes on one device kind"
            + ("." if has_models else " (no measured model).")
            + " Harvest with `--batch-size 1,8,32` and measure each spec to fill this section."
        )
        return
    families = batch.drop_duplicates("family")
    doc.para(
        f"{len(families)} model {'family' if len(families) == 1 else 'families'} (same "
        "reference, overrides, mode, dtype and inputs apart from the batch dimension, written B): "
        "latency and throughput against batch size per device kind. All rows: `batch.csv`."
    )
    doc.bullets([f"{row.family_name}: {row.family}" for row in families.itertuples()])

    plot_batch(
        batch,
        "latency_s",
        "latency per call (s)",
        "Latency against batch size",
        out / "batch_latency.png",
    )
    doc.image("batch_latency.png", "Latency against batch size")
    plot_batch(
        batch,
        "throughput_per_s",
        "throughput (samples/s)",
        "Throughput against batch size",
        out / "batch_throughput.png",
    )
    doc.image("batch_throughput.png", "Throughput against batch size")
    doc.table(display(batch, BATCH_DISPLAY))


def _complexity_section(doc: _Doc, points: pd.DataFrame, out: Path) -> None:
    doc.heading("Latency against FLOPs and parameters")
    if points.empty:
        doc.para("No measured model: nothing to plot.")
        return
    drawn = plot_complexity(
        points,
        "step_flops",
        "FLOPs per call (log scale)",
        "Latency against FLOPs",
        out / "latency_vs_flops.png",
    )
    doc.image("latency_vs_flops.png", "Latency against FLOPs")
    if drawn < len(points):
        doc.para(f"{len(points) - drawn} points without FLOPs are not drawn (log axis).")
    drawn = plot_complexity(
        points,
        "params",
        "parameters (elements, log scale)",
        "Latency against parameters",
        out / "latency_vs_params.png",
    )
    doc.image("latency_vs_params.png", "Latency against parameters")
    if drawn < len(points):
        doc.para(
            f"{len(points) - drawn} points of models without parameters are not drawn (log axis)."
        )
    if len(points) > LABEL_LIMIT:
        doc.para(
            f"{len(points)} points: too many to label; the table of measured models names them."
        )
    rows = []
    for kind, group in points.groupby("device_kind", sort=True):
        rho, pairs = studies.spearman_matrix(group, ["latency_s", "step_flops", "params"])
        rows.append(
            {
                "device kind": str(kind),
                "models": str(len(group)),
                "ρ(latency, FLOPs)": _fixed(2)(rho.loc["latency_s", "step_flops"]),
                "ρ(latency, params)": _fixed(2)(rho.loc["latency_s", "params"]),
            }
        )
    doc.para(
        f"Spearman ρ per device kind (— where fewer than {studies.MIN_PAIRS} models or a "
        "constant variable):"
    )
    doc.table(pd.DataFrame(rows))


def _correlation_section(doc: _Doc, corr: studies.CorrelationStudy, out: Path) -> None:
    doc.heading("Rank correlation")
    doc.para(
        "Spearman's ρ (Pearson's r of average ranks) across models, each batch size and mode a "
        "model of its own. Missing values are handled pairwise: each coefficient uses the models "
        f"that have both values (n in each cell), and needs at least {studies.MIN_PAIRS}. "
        f"CPU latency: {corr.cpu_kind or 'none'}; GPU latency: {corr.gpu_kind or 'none'}."
    )
    doc.bullets(corr.notes)
    if corr.matrix.empty:
        return
    plot_spearman(corr.matrix, corr.pairs, out / "spearman.png")
    doc.image("spearman.png", "Spearman rank correlation matrix")
    shown = corr.matrix.rename(index=VARIABLE_NAMES, columns=VARIABLE_NAMES)
    rho = pd.DataFrame(
        {"": list(shown.index)} | {str(c): [_fixed(2)(v) for v in shown[c]] for c in shown.columns}
    )
    doc.table(rho)
    doc.para("The values correlated (all rows: `correlation_data.csv`):")
    doc.table(display(corr.data, CORRELATION_DATA_DISPLAY))


def _fb_section(doc: _Doc, fb: studies.ForwardBackwardStudy, out: Path) -> None:
    doc.heading("Forward and backward (training specs)")
    if fb.models.empty:
        doc.bullets(fb.notes)
        return
    doc.para(
        "FLOPs: backward over forward from the spec. Time: a training configuration is measured "
        "forward + backward per call; its inference twin (same configuration in inference mode) on "
        "the same device kind gives the forward, so backward = training − forward. The twin runs "
        "without autograd and in eval mode, so the difference also holds autograd bookkeeping. "
        "Per model, sums of count × per-call over the configurations with both values "
        "(coverage: their share of the model's calls)."
    )
    doc.bullets(fb.notes)
    plot_forward_backward(fb.models, out / "forward_backward.png")
    doc.image("forward_backward.png", "Backward against forward, per training model")
    doc.table(display(fb.models, FB_MODEL_DISPLAY))
    configs = fb.configs.assign(
        _weight=fb.configs["count"] * fb.configs["time_training_s"].fillna(0)
    ).sort_values(["_weight", "model"], ascending=[False, True])
    doc.para(
        f"Configurations, costliest first ({min(CONFIG_ROWS, len(configs))} of {len(configs)} "
        "rows; all in `forward_backward_configs.csv`):"
    )
    doc.table(display(configs.head(CONFIG_ROWS), FB_CONFIG_DISPLAY))


def build_report(
    session: Session,
    out_dir: Path,
    *,
    fmt: ReportFormat = "md",
    device_kinds: list[str] | None = None,
    source: str | None = None,
    now: datetime | None = None,
) -> Path:
    """Write the study report into ``out_dir`` and return the path of ``report.md``/``.html``.

    The folder receives the report, its PNG plots (see ``PLOT_FILES``; stale ones are removed) and
    every study table in full as CSV (``TABLE_FILES``). ``device_kinds`` restricts the studies to
    those kinds (default: all); ``source`` names the database in the header (default: the
    session's URL, password masked). A database without any measured model still gives a report
    that says so. Only reads: nothing is committed.

    Raises:
        NotFoundError: a named device kind does not exist.
        OperatorDBError: matplotlib is not installed (and there is something to plot).
    """
    if fmt not in ("md", "html"):
        raise OperatorDBError(f"unknown report format {fmt!r}: use md or html")
    table = studies.model_table(session, device_kinds=device_kinds)
    batch = studies.batch_study(session, table=table)
    points = studies.latency_vs_complexity(session, table=table)
    corr = studies.correlation_study(session, table=table)
    fb = studies.forward_backward(session, device_kinds=device_kinds)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in PLOT_FILES:  # only once the studies succeeded: a failed run leaves the folder
        (out_dir / name).unlink(missing_ok=True)

    when = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    kinds = sorted((k.name, k.type) for k in queries.device_kinds(session, device_kinds))
    measured_per_kind = table.groupby("device_kind")["model"].nunique().to_dict()
    total_models = queries.model_count(session)
    measured = table["model"].nunique() if not table.empty else 0

    doc = _Doc("operator-db report")
    doc.para(
        f"Generated {when} from {source or _source(session)}. "
        f"{total_models} models in the database, {measured} with a measured full-model run on the "
        "device kinds covered. Figures are the latest eager measurements (median per call)."
    )
    doc.bullets(
        [
            f"{name} ({type_}): {measured_per_kind.get(name, 0)} models measured"
            for name, type_ in kinds
        ]
        or ["no device kind registered yet (a worker registers its kind)"]
    )
    unmeasured = total_models - measured
    if unmeasured and not table.empty:
        doc.para(
            f"{unmeasured} models have no full-model run on these kinds and are left out "
            "of the studies."
        )
    _model_section(doc, table)
    _batch_section(doc, batch, out_dir, not table.empty)
    _complexity_section(doc, points, out_dir)
    _correlation_section(doc, corr, out_dir)
    _fb_section(doc, fb, out_dir)

    table.to_csv(out_dir / "models.csv", index=False)
    batch.to_csv(out_dir / "batch.csv", index=False)
    corr.data.to_csv(out_dir / "correlation_data.csv", index=False)
    corr.matrix.to_csv(out_dir / "correlation_matrix.csv")
    fb.models.to_csv(out_dir / "forward_backward_models.csv", index=False)
    fb.configs.to_csv(out_dir / "forward_backward_configs.csv", index=False)

    path = out_dir / f"report.{fmt}"
    path.write_text(doc.markdown() if fmt == "md" else doc.html(), encoding="utf-8")
    return path
