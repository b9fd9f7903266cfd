"""The study report: the batch, complexity, correlation and backward studies as Markdown or HTML.

:func:`build_report` writes ``report.md`` (or ``report.html``), its PNG plots (:mod:`.plots`) and
every study table in full as CSV into one folder.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import pandas as pd
from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.engine import safe_url
from operator_db.errors import OperatorDBError
from operator_db.estimate import studies
from operator_db.estimate.counters import counters_study
from operator_db.estimate.report.document import (
    Columns,
    Document,
    display,
    fixed,
    integer,
    markdown_table,
    num,
    percent,
    signed_percent,
    text,
)
from operator_db.estimate.report.plots import (
    LABEL_LIMIT,
    VARIABLE_NAMES,
    new_figure,
    plot_batch,
    plot_complexity,
    plot_forward_backward,
    plot_spearman,
)

__all__ = [
    "PLOT_FILES",
    "TABLE_FILES",
    "build_report",
    "markdown_table",
    "new_figure",
    "plot_batch",
    "plot_complexity",
]

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
    "ncu_counters.csv",
)
"""Every table a report writes in full."""

CONFIG_ROWS = 40
"""Rows of the per-configuration forward:backward table shown in the report (all are in the CSV)."""


MODEL_DISPLAY: Columns = [
    ("model", "model", text),
    ("device_kind", "device kind", text),
    ("mode", "mode", text),
    ("batch_size", "batch", integer),
    ("latency_s", "latency (ms)", num(1e3)),
    ("throughput_per_s", "throughput (samples/s)", num()),
    ("energy_per_call_j", "energy/call (J)", num()),
    ("step_flops", "GFLOPs/call", num(1e-9)),
    ("params", "params (M)", num(1e-6)),
    ("achieved_flops_per_s", "achieved GFLOP/s", num(1e-9)),
    ("estimate_s", "composed (ms)", num(1e3)),
    ("coverage", "coverage", percent),
    ("estimate_error", "composed error", signed_percent),
]

BATCH_DISPLAY: Columns = [
    ("family_name", "family", text),
    ("device_kind", "device kind", text),
    ("batch_size", "batch", integer),
    ("model", "model", text),
    ("latency_s", "latency (ms)", num(1e3)),
    ("latency_per_sample_s", "latency/sample (ms)", num(1e3)),
    ("throughput_per_s", "throughput (samples/s)", num()),
    ("throughput_gain", "gain vs smallest batch (×)", fixed(2)),
]

CORRELATION_DATA_DISPLAY: Columns = [
    ("model", "model", text),
    ("mode", "mode", text),
    ("batch_size", "batch", integer),
    ("cpu_latency_s", "CPU latency (ms)", num(1e3)),
    ("gpu_latency_s", "GPU latency (ms)", num(1e3)),
    ("flops", "GFLOPs/call", num(1e-9)),
    ("params", "params (M)", num(1e-6)),
]

FB_MODEL_DISPLAY: Columns = [
    ("model", "model", text),
    ("device_kind", "device kind", text),
    ("calls", "op calls", integer),
    ("flops_forward", "forward GFLOPs", num(1e-9)),
    ("flops_backward", "backward GFLOPs", num(1e-9)),
    ("flops_ratio", "FLOPs bwd:fwd", fixed(2)),
    ("flops_coverage", "FLOPs coverage", percent),
    ("time_forward_s", "forward (ms)", num(1e3)),
    ("time_backward_s", "backward (ms)", num(1e3)),
    ("time_ratio", "time bwd:fwd", fixed(2)),
    ("time_coverage", "time coverage", percent),
]

FB_CONFIG_DISPLAY: Columns = [
    ("model", "model", text),
    ("op", "op", text),
    ("inputs", "inputs", text),
    ("count", "count", integer),
    ("device_kind", "device kind", text),
    ("flops_ratio", "FLOPs bwd:fwd", fixed(2)),
    ("time_forward_s", "forward (µs)", num(1e6)),
    ("time_training_s", "fwd+bwd (µs)", num(1e6)),
    ("time_ratio", "time bwd:fwd", fixed(2)),
    ("status", "status", text),
]


COUNTERS_DISPLAY: Columns = [
    ("model", "model", text),
    ("device_kind", "device kind", text),
    ("counted", "configurations counted", integer),
    ("configs", "of", integer),
    ("spec_flops", "spec GFLOPs", num(1e-9)),
    ("ncu_flops", "ncu FP GFLOPs", num(1e-9)),
    ("tensor_configs", "on tensor cores", integer),
    ("spec_bytes", "spec MB", num(1e-6)),
    ("dram_bytes", "ncu DRAM MB", num(1e-6)),
]


# --- the report -------------------------------------------------------------------------------


def _source(session: Session) -> str:
    bind = session.get_bind()
    return safe_url(str(bind.engine.url)) if hasattr(bind, "engine") else "(unknown)"


def _model_section(doc: Document, table: pd.DataFrame) -> None:
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


def _batch_section(doc: Document, batch: pd.DataFrame, out: Path, has_models: bool) -> None:
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


def _complexity_section(doc: Document, points: pd.DataFrame, out: Path) -> None:
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
                "ρ(latency, FLOPs)": fixed(2)(rho.loc["latency_s", "step_flops"]),
                "ρ(latency, params)": fixed(2)(rho.loc["latency_s", "params"]),
            }
        )
    doc.para(
        f"Spearman ρ per device kind (— where fewer than {studies.MIN_PAIRS} models or a "
        "constant variable):"
    )
    doc.table(pd.DataFrame(rows))


def _correlation_section(doc: Document, corr: studies.CorrelationStudy, out: Path) -> None:
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
        {"": list(shown.index)} | {str(c): [fixed(2)(v) for v in shown[c]] for c in shown.columns}
    )
    doc.table(rho)
    doc.para("The values correlated (all rows: `correlation_data.csv`):")
    doc.table(display(corr.data, CORRELATION_DATA_DISPLAY))


def _fb_section(doc: Document, fb: studies.ForwardBackwardStudy, out: Path) -> None:
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


def _counters_section(doc: Document, summary: pd.DataFrame) -> None:
    doc.heading("Measured FLOPs and bytes (Nsight Compute)")
    if summary.empty:
        doc.para(
            "No configuration of the measured models has hardware counters: the roofline uses "
            "the spec's FLOPs and compulsory bytes. `opdb ncu command MODEL` prints the command "
            "that profiles them, `opdb ncu import` stores them (docs/ncu.md)."
        )
        return
    doc.para(
        "Where Nsight Compute profiled a configuration's call, the roofline (`opdb roofline`, "
        "column `source`) draws it at the measured FP FLOPs (add + mul + 2 × fma per precision) "
        "and DRAM bytes instead of the spec's FLOPs and compulsory bytes; its FLOPs stay the "
        "spec's where it ran on tensor cores, which those counters do not see. Sums of count × "
        "per call over the counted configurations. All rows: `ncu_counters.csv`."
    )
    doc.table(display(summary, COUNTERS_DISPLAY))


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
    pairs = table[["model", "device_kind"]].drop_duplicates().itertuples(index=False)
    counters, counter_rows = counters_study(session, [(str(m), str(k)) for m, k in pairs])
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in PLOT_FILES:  # only once the studies succeeded: a failed run leaves the folder
        (out_dir / name).unlink(missing_ok=True)

    when = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    kinds = sorted((k.name, k.type) for k in queries.device_kinds(session, device_kinds))
    measured_per_kind = table.groupby("device_kind")["model"].nunique().to_dict()
    total_models = queries.model_count(session)
    measured = table["model"].nunique() if not table.empty else 0

    doc = Document("operator-db report")
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
    _counters_section(doc, counters)

    table.to_csv(out_dir / "models.csv", index=False)
    batch.to_csv(out_dir / "batch.csv", index=False)
    corr.data.to_csv(out_dir / "correlation_data.csv", index=False)
    corr.matrix.to_csv(out_dir / "correlation_matrix.csv")
    fb.models.to_csv(out_dir / "forward_backward_models.csv", index=False)
    fb.configs.to_csv(out_dir / "forward_backward_configs.csv", index=False)
    counter_rows.to_csv(out_dir / "ncu_counters.csv", index=False)

    path = out_dir / f"report.{fmt}"
    path.write_text(doc.markdown() if fmt == "md" else doc.html(), encoding="utf-8")
    return path
