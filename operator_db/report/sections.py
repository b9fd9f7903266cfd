"""The report's sections: each writes its heading, text, tables and plots into a document.

Every section says plainly why it is empty when it is. ``build_report`` calls them in order;
docs/report.md describes each.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from sqlalchemy.orm import Session

from operator_db.db.models import DeviceKind
from operator_db.report.charts import plot_complexity_bars, plot_layer_pies
from operator_db.report.columns import (
    ACHIEVED_DISPLAY,
    BATCH_DISPLAY,
    COMPLEXITY_DISPLAY,
    CORRELATION_DATA_DISPLAY,
    FB_CONFIG_DISPLAY,
    FB_MODEL_DISPLAY,
    MODEL_DISPLAY,
    RUN_FB_DISPLAY,
)
from operator_db.report.document import (
    Document,
    display,
    fixed,
    is_missing,
    num,
)
from operator_db.report.plots import (
    VARIABLE_NAMES,
    batch_colors,
    family_markers,
    plot_achieved_roofline,
    plot_batch,
    plot_forward_backward,
    plot_latency_scatter,
    plot_spearman,
)
from operator_db.report.roofs import classify_runs, counts_line
from operator_db.roofline.explain import count_classes
from operator_db.roofline.peaks import best_peaks, kind_peaks, peaks_of
from operator_db.study import analysis
from operator_db.study.analysis.layers import OTHER, PASSES, QUANTITIES

CONFIG_ROWS = 40
"""Rows of the per-configuration forward:backward table shown in the report (all are in the CSV)."""

FAILED_SHOWN = 10
"""Failed runs listed with their error in the run matrix section (all are in ``runs.csv``)."""

RUN_MARKS = {
    "failed": "✗ failed",
    "running": "running",
    "queued": "queued",
    "cancelled": "cancelled",
    "not measured": "—",
}
"""How the run matrix shows a (model, kind) without a measured run."""


# --- helpers ----------------------------------------------------------------------------------


def _slug(name: str) -> str:
    """Return ``name`` as a short file-name part (letters, digits and dashes)."""
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()[:48] or "x"


def _ms(x: object) -> str:
    return num(1e3, 3)(x) + " ms"


# --- sections ---------------------------------------------------------------------------------


def run_matrix_tables(runs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Return the run matrix as one displayed table per device kind.

    Rows are (family, mode), columns batch sizes (``b1``, ``b8``, ...); a cell is the measured
    latency in ms, else a mark of ``RUN_MARKS`` (``—`` not measured, ``✗ failed``, ``queued``,
    ...). Two models of one row and batch size (a rare naming clash) are both shown.
    """
    tables: dict[str, pd.DataFrame] = {}
    for kind, rows in runs.groupby("device_kind", sort=True):
        sizes = sorted({int(b) for b in rows["batch_size"].dropna()})
        has_none = bool(rows["batch_size"].isna().any())
        columns = [f"b{s}" for s in sizes] + (["no batch"] if has_none else [])
        cells: dict[tuple[str, str], dict[str, list[str]]] = {}
        for row in rows.itertuples(index=False):
            key = (str(row.family_name), str(row.mode))
            column = "no batch" if is_missing(row.batch_size) else f"b{int(row.batch_size)}"
            mark = _ms(row.latency_s) if row.status == "measured" else RUN_MARKS[str(row.status)]
            cells.setdefault(key, {}).setdefault(column, []).append(mark)
        records = [
            {"family": family, "mode": mode} | {c: " / ".join(found.get(c, [""])) for c in columns}
            for (family, mode), found in cells.items()
        ]
        tables[str(kind)] = pd.DataFrame.from_records(records, columns=["family", "mode", *columns])
    return tables


def runs_section(doc: Document, runs: pd.DataFrame) -> None:
    """Write the run matrix: one table per device kind, failed runs with their errors."""
    doc.heading("Run matrix")
    if runs.empty:
        doc.para(
            "No model or no device kind in the study: nothing is covered yet. Ingest specs with "
            "`opdb ingest`, and a worker registers its device kind."
        )
        return
    counts = runs["status"].value_counts()
    total = len(runs)
    parts = [f"{int(counts.get(s, 0))} {s}" for s in analysis.RUN_STATUSES if counts.get(s, 0)]
    doc.para(
        f"What the study covers: every model (rows: family and mode; columns: batch size) on "
        f"every device kind, {total} (model, kind) cells: " + ", ".join(parts) + ". A cell is the "
        "measured latency per call (latest eager full-model run), `—` not measured, `✗ failed` "
        "the newest job failed, `queued`/`running` a job is pending; blank: no such spec. "
        "All cells: `runs.csv`."
    )
    for kind, table in run_matrix_tables(runs).items():
        doc.para(f"**{kind}**")
        doc.table(table)
    failed = runs[runs["status"] == "failed"]
    if not failed.empty:
        doc.para(f"Failed runs ({min(len(failed), FAILED_SHOWN)} of {len(failed)}):")
        doc.bullets(
            [
                f"{r.model} on {r.device_kind}: {str(r.error or 'no error recorded')[:160]}"
                for r in failed.head(FAILED_SHOWN).itertuples()
            ]
        )


def model_section(doc: Document, table: pd.DataFrame) -> None:
    """Write the table of measured models (one row per model and device kind)."""
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


def complexity_table_section(doc: Document, complexity: pd.DataFrame, out: Path) -> None:
    """Write the complexity of every model with its bar charts."""
    doc.heading("Complexity")
    if complexity.empty:
        doc.para("No model in the study: no complexity to show. Ingest specs with `opdb ingest`.")
        return
    doc.para(
        "From each spec, measured or not. GFLOPs/call: the forward, plus the backward for "
        "training specs (FLOPs, never MACs). Params: distinct parameters. Activations: Σ count × "
        "bytes of each configuration's outputs (views excluded), what the forward writes; an "
        "upper bound of what is alive at once. Traffic: compulsory bytes of one call (inputs, "
        "parameters and outputs of each configuration once; for training, plus the backward "
        "estimated from the shapes: gradients of the outputs, saved inputs and parameters read, "
        "gradients of the inputs and parameters written). Intensity: FLOPs / traffic. All rows: "
        "`complexity.csv`."
    )
    plot_complexity_bars(complexity, out / "complexity.png")
    doc.image("complexity.png", "FLOPs, parameters, activation memory and intensity per model")
    doc.table(display(complexity, COMPLEXITY_DISPLAY))


def latency_section(doc: Document, points: pd.DataFrame, out: Path) -> None:
    """Write latency against FLOPs and against parameters, and ρ per device kind."""
    doc.heading("Latency against FLOPs and parameters")
    if points.empty:
        doc.para(
            "No model has a measured full-model run on the device kinds covered: nothing to "
            "plot. Enqueue full-model runs with `opdb enqueue MODEL --device-kind KIND`."
        )
        return
    doc.para(
        "One panel per device kind; a marker per model family (named beside its largest point), "
        "a colour per batch size, hollow markers for training steps. Log-log axes."
    )
    for column, xlabel, name, alt, what in (
        ("step_flops", "FLOPs per call (log scale)", "latency_vs_flops.png", "FLOPs", "FLOPs"),
        (
            "params",
            "parameters (elements, log scale)",
            "latency_vs_params.png",
            "parameters",
            "parameters",
        ),
    ):
        drawn = plot_latency_scatter(points, column, xlabel, out / name)
        doc.image(name, f"Latency against {alt}")
        if drawn < len(points):
            doc.para(f"{len(points) - drawn} runs without {what} are not drawn (log axis).")
    rows = []
    for kind, group in points.groupby("device_kind", sort=True):
        rho, _ = analysis.spearman_matrix(group, ["latency_s", "step_flops", "params"])
        rows.append(
            {
                "device kind": str(kind),
                "runs": str(len(group)),
                "ρ(latency, FLOPs)": fixed(2)(rho.loc["latency_s", "step_flops"]),
                "ρ(latency, params)": fixed(2)(rho.loc["latency_s", "params"]),
            }
        )
    doc.para(
        f"Spearman ρ per device kind over its runs (— where fewer than {analysis.MIN_PAIRS} runs "
        "or a constant variable):"
    )
    doc.table(pd.DataFrame(rows))


def correlation_section(doc: Document, corr: analysis.CorrelationStudy, out: Path) -> None:
    """Write the Spearman matrix with its heatmap and the values correlated."""
    doc.heading("Rank correlation")
    doc.para(
        "Spearman's ρ (Pearson's r of average ranks) across models, each batch size and mode a "
        "model of its own. Missing values are handled pairwise: each coefficient uses the models "
        f"that have both values (n in each cell), and needs at least {analysis.MIN_PAIRS}. "
        f"CPU latency: {corr.cpu_kind or 'none'}; GPU latency: {corr.gpu_kind or 'none'}."
    )
    doc.bullets(corr.notes)
    if corr.matrix.empty:
        return
    plot_spearman(corr.matrix, corr.pairs, out / "spearman.png")
    doc.image("spearman.png", "Spearman rank correlation matrix")
    shown = corr.matrix.rename(index=VARIABLE_NAMES, columns=VARIABLE_NAMES)
    rho = pd.DataFrame(
        {"": list(shown.index)} | {str(c): [fixed(2)(v) for v in shown[c]] for c in shown.columns}
    )
    doc.table(rho)
    doc.para("The values correlated (all rows: `correlation_data.csv`):")
    doc.table(display(corr.data, CORRELATION_DATA_DISPLAY))


def batch_section(doc: Document, batch: pd.DataFrame, out: Path, has_models: bool) -> None:
    """Write throughput and latency against batch size, per device kind."""
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
        "throughput and latency against batch size, one panel per device kind. All rows: "
        "`batch.csv`."
    )
    doc.bullets([f"{row.family_name}: {row.family}" for row in families.itertuples()])
    plot_batch(
        batch,
        "throughput_per_s",
        "throughput (samples/s)",
        "Throughput against batch size",
        out / "batch_throughput.png",
    )
    doc.image("batch_throughput.png", "Throughput against batch size, per device kind")
    plot_batch(
        batch,
        "latency_s",
        "latency per call (s)",
        "Latency against batch size",
        out / "batch_latency.png",
    )
    doc.image("batch_latency.png", "Latency against batch size, per device kind")
    doc.table(display(batch, BATCH_DISPLAY))


def achieved_table(points: pd.DataFrame, roof: object) -> pd.DataFrame:
    """Return ``points`` with the roof at each point's intensity and the share of it achieved.

    ``roof`` is the kind's best :class:`~operator_db.roofline.bounds.Peaks` (None: unknown,
    NaN columns); ``roof_flops_per_s`` = min(peak, intensity × bandwidth), ``of_roof`` =
    achieved / roof.
    """
    from operator_db.roofline.bounds import Peaks

    if not isinstance(roof, Peaks):
        return points.assign(roof_flops_per_s=float("nan"), of_roof=float("nan"))
    ceiling = [
        roof.attainable_flops_per_s(float(i)) if float(i) > 0 else float("nan")
        for i in points["intensity"]
    ]
    return points.assign(
        roof_flops_per_s=ceiling, of_roof=points["achieved_flops_per_s"].astype(float) / ceiling
    )


def roofline_section(
    doc: Document,
    session: Session,
    points: pd.DataFrame,
    kinds: Sequence[DeviceKind],
    out: Path,
) -> None:
    """Write every measured model × batch on its device kind's roofline."""
    doc.heading("Achieved performance on the device roofline")
    if points.empty:
        doc.para(
            "No model has a measured full-model run on the device kinds covered: no point to "
            "place on a roofline."
        )
        return
    doc.para(
        "Every measured model × batch size on its device kind's roofs: achieved performance = "
        "FLOPs of one call / measured latency; arithmetic intensity = FLOPs / compulsory bytes "
        "(the traffic of the complexity table). The roofs are the kind's spec-sheet peaks "
        "(solid) and measured peaks from `opdb peaks` (dashed), as known, with its cache roofs "
        "(dotted: a CPU's measured copies, a GPU's L2 attained by its configurations); `of "
        "roof` is the achieved share of the best-known roof at the point's intensity, `roof` "
        "the roof that explains the point (a run above every roof is unexplained, crossed in "
        "the plot). A whole model sits below its operators' roofs: the time between operators "
        "counts against it."
    )
    markers = family_markers(points["family_name"])
    colors = batch_colors(points["batch_size"].dropna())
    by_name = {k.name: k for k in kinds}
    for i, (kind_name, group) in enumerate(points.groupby("device_kind", sort=True)):
        kind = by_name.get(str(kind_name))
        dtype = str(group["dtype"].mode().iloc[0]) if "dtype" in group else "float32"
        known = kind_peaks(session, kind, str(kind_name))
        spec = peaks_of(known, dtype, "spec")
        measured = peaks_of(known, dtype, "measured")
        name = f"roofline_{i:02d}_{_slug(str(kind_name))}.png"
        best = best_peaks(known, dtype)
        group = classify_runs(group, best)
        plot_achieved_roofline(
            group, str(kind_name), spec, measured, out / name, markers=markers, colors=colors
        )
        doc.para(f"**{kind_name}** ({dtype} roofs)")
        if spec is None and measured is None:
            doc.para(
                f"No peaks known for {kind_name}: the points are drawn without roofs. Run "
                "`opdb peaks` on such a host, or store its spec peaks (`opdb peaks --list`)."
            )
        doc.image(name, f"Achieved performance on the roofline of {kind_name}")
        if best is not None:
            doc.para(counts_line(count_classes(group["roof"], group["above"]), best))
        ordered = group.sort_values(["family_name", "mode", "batch_size", "model"])
        table = achieved_table(ordered, best)
        doc.table(display(table, ACHIEVED_DISPLAY))


def run_fb_section(doc: Document, runs_fb: analysis.RunForwardBackward, out: Path) -> None:
    """Write backward against forward from whole-model runs (training and twin)."""
    doc.heading("Forward and backward from whole-model runs")
    if runs_fb.pairs.empty:
        doc.bullets(runs_fb.notes)
        return
    doc.para(
        "Each training spec's measured step against its inference twin (same family and batch "
        "size, on the same device kind): time bwd:fwd = (training step − forward) / forward, "
        "where the step also holds the optimizer and the twin runs in eval mode without autograd; "
        "FLOPs bwd:fwd = backward FLOPs / forward FLOPs of the training spec. All rows: "
        "`forward_backward_runs.csv`."
    )
    doc.bullets(runs_fb.notes)
    bars = runs_fb.pairs.assign(
        model=[
            f"{n} b{b}" if not is_missing(b) else str(n)
            for n, b in zip(runs_fb.pairs["family_name"], runs_fb.pairs["batch_size"], strict=True)
        ]
    )
    plot_forward_backward(bars, out / "forward_backward_runs.png")
    doc.image("forward_backward_runs.png", "Backward against forward, whole-model runs")
    doc.table(display(runs_fb.pairs, RUN_FB_DISPLAY))


def fb_section(doc: Document, fb: analysis.ForwardBackwardStudy, out: Path) -> None:
    """Write backward against forward per configuration of the training specs."""
    doc.heading("Forward and backward per configuration (training specs)")
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


PIE_COLUMNS = [(p, q) for p in PASSES for q in QUANTITIES]


def layer_share_table(shares: pd.DataFrame) -> pd.DataFrame:
    """Return one family's shares as a displayed table: layer types × the six pies (in %)."""
    types = list(dict.fromkeys(shares["op_type"]))
    if OTHER in types:
        types.remove(OTHER)
        types.append(OTHER)
    columns: dict[str, list[str]] = {"layer type": types}
    for pass_, quantity in PIE_COLUMNS:
        pie = shares[(shares["pass"] == pass_) & (shares["quantity"] == quantity)]
        if pie.empty:
            continue
        share = dict(zip(pie["op_type"], pie["share"], strict=True))
        columns[f"{pass_} {quantity}"] = [
            f"{share[t] * 100:.1f} %" if t in share else "—" for t in types
        ]
    return pd.DataFrame(columns)


def layers_section(doc: Document, layers: analysis.LayerStudy, out: Path) -> None:
    """Write the pies and share tables per layer type, one figure per family."""
    doc.heading("Layer types: shares of latency, FLOPs and memory")
    if layers.shares.empty:
        doc.para("No pie to draw.")
        doc.bullets(layers.notes)
        return
    doc.para(
        "Per model family at one batch size (the largest with a training spec, else the "
        "largest): the forward from the inference spec and the backward from the training spec. "
        "FLOPs from the spec. Memory = compulsory traffic: the forward's bytes as stored (inputs, "
        "parameters and outputs once per call), the backward's estimated from the shapes "
        "(gradients of the outputs, saved inputs and parameters read; gradients of the inputs "
        "and parameters written). Latency: per-operator times measured on "
        f"{layers.device_kind} where they cover at least "
        f"{analysis.MEASURED_MIN_COVERAGE:.0%} of the calls (backward = training − forward per "
        "configuration), else the roofline bound at the kind's best peaks, else the FLOPs "
        "share; each pie's title names its source. Types under "
        f"{analysis.OTHER_BELOW:.0%} of every pie of a family are merged into `other`. All "
        "rows: `layer_shares.csv`."
    )
    doc.bullets(layers.notes)
    for i, (name, shares) in enumerate(layers.shares.groupby("family_name", sort=True)):
        batch = shares["batch_size"].iloc[0]
        models = ", ".join(dict.fromkeys(shares["model"]))
        title = f"{name}" + ("" if is_missing(batch) else f", batch {int(batch)}")
        file = f"layers_{i:02d}_{_slug(str(name))}.png"
        plot_layer_pies(shares, f"Layer types of {title} ({models})", out / file)
        doc.para(f"**{title}** ({models})")
        sources = shares.drop_duplicates(["pass", "quantity"])
        doc.bullets(
            [
                f"{r.pass_} {r.quantity}: {r.source}"
                for r in sources.rename(columns={"pass": "pass_"}).itertuples()
                if r.quantity == "latency"
            ]
        )
        doc.image(file, f"Layer types of {title}")
        doc.table(layer_share_table(shares))
