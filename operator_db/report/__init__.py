"""The study report: runs, complexity, batch, correlation, roofline, backward and layer studies.

:func:`build_reports` writes ``report.md`` and ``report.html`` (:func:`build_report` one of them),
their PNG plots (:mod:`.plots`) and every study table in full as CSV into one folder.
docs/report.md describes each section.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.engine import safe_url
from operator_db.errors import OperatorDBError
from operator_db.report import hardware, roofs, sections
from operator_db.report.document import Document, markdown_table
from operator_db.report.estimates import estimate_table, estimates_section
from operator_db.report.llms import llm_section, llm_table
from operator_db.report.plots import plot_batch, plot_latency_scatter
from operator_db.report.predictions import prediction_table, predictions_section
from operator_db.roofline.counters import counters_study
from operator_db.roofline.figure import new_figure
from operator_db.study import analysis

__all__ = [
    "PLOT_FILES",
    "PLOT_PATTERNS",
    "TABLE_FILES",
    "build_report",
    "build_reports",
    "markdown_table",
    "new_figure",
    "plot_batch",
    "plot_latency_scatter",
]

ReportFormat = Literal["md", "html"]

PLOT_FILES = (
    "complexity.png",
    "latency_vs_flops.png",
    "latency_vs_params.png",
    "spearman.png",
    "batch_latency.png",
    "batch_throughput.png",
    "forward_backward_runs.png",
    "forward_backward.png",
    "chips_roofline.png",
)
"""The plots a report may write under fixed names."""

PLOT_PATTERNS = ("roofline_*.png", "configs_roofline_*.png", "layers_*.png")
"""The plots a report writes per device kind and per family. Stale plots from an earlier report
in the folder (``PLOT_FILES`` and these) are removed first."""

TABLE_FILES = (
    "runs.csv",
    "models.csv",
    "complexity.csv",
    "batch.csv",
    "correlation_data.csv",
    "correlation_matrix.csv",
    "forward_backward_runs.csv",
    "forward_backward_models.csv",
    "forward_backward_configs.csv",
    "layer_shares.csv",
    "ncu_counters.csv",
    "predictions.csv",
    "llms.csv",
)
"""Every table a report writes in full."""

# --- the report -------------------------------------------------------------------------------


def _source(session: Session) -> str:
    bind = session.get_bind()
    return safe_url(str(bind.engine.url)) if hasattr(bind, "engine") else "(unknown)"


def build_report(
    session: Session,
    out_dir: Path,
    *,
    fmt: ReportFormat = "md",
    device_kinds: list[str] | None = None,
    models: Sequence[str] | None = None,
    source: str | None = None,
    now: datetime | None = None,
) -> Path:
    """Write the study report into ``out_dir`` and return the path of ``report.md``/``.html``.

    As :func:`build_reports` with the one format ``fmt``.
    """
    (path,) = build_reports(
        session,
        out_dir,
        formats=(fmt,),
        device_kinds=device_kinds,
        models=models,
        source=source,
        now=now,
    )
    return path


def build_reports(
    session: Session,
    out_dir: Path,
    *,
    formats: Sequence[ReportFormat] = ("md", "html"),
    device_kinds: list[str] | None = None,
    models: Sequence[str] | None = None,
    source: str | None = None,
    now: datetime | None = None,
) -> list[Path]:
    """Write the study report into ``out_dir`` in each of ``formats``; return their paths.

    The folder receives the reports (``report.md``, ``report.html``), their PNG plots
    (``PLOT_FILES`` and ``PLOT_PATTERNS``; stale ones are removed) and every study table in full
    as CSV (``TABLE_FILES``), each computed and drawn once for all the formats. ``device_kinds``
    restricts the studies to those kinds (default: all); ``models`` to those models (default:
    all: a study reports its own); ``source`` names the database in the header (default: the
    session's URL, password masked). A database without any measured model still gives a report
    that says so in every section. Only reads: nothing is committed.

    Raises:
        NotFoundError: a named device kind or model does not exist.
        OperatorDBError: an unknown format, or matplotlib is not installed (and there is
            something to plot).
    """
    unknown = [f for f in formats if f not in ("md", "html")]
    if unknown or not formats:
        raise OperatorDBError(f"unknown report format {unknown or formats!r}: use md or html")
    chosen = None if models is None else list(models)
    kinds = queries.device_kinds(session, device_kinds)
    runs = analysis.run_matrix(session, device_kinds=device_kinds, models=chosen)
    table = analysis.model_table(session, device_kinds=device_kinds, models=chosen)
    complexity = analysis.complexity_table(session, models=chosen)
    batch = analysis.batch_study(session, table=table)
    points = analysis.latency_vs_complexity(session, table=table)
    corr = analysis.correlation_study(session, table=table)
    runs_fb = analysis.run_forward_backward(table)
    fb = analysis.forward_backward(session, device_kinds=device_kinds, models=chosen)
    layers = analysis.layer_study(session, device_kinds=device_kinds, models=chosen)
    pairs = table[["model", "device_kind"]].drop_duplicates().itertuples(index=False)
    counters, counter_rows = counters_study(session, [(str(m), str(k)) for m, k in pairs])
    predicted = prediction_table(session, kinds, chosen)
    pairs = table[["model", "device_kind"]].drop_duplicates().itertuples(index=False)
    estimates = estimate_table(session, [(str(m), str(k)) for m, k in pairs])
    llms = llm_table(session, None if device_kinds is None else [k.name for k in kinds])
    out_dir.mkdir(parents=True, exist_ok=True)
    # Only once the studies succeeded: a failed run leaves the folder as it was.
    for name in PLOT_FILES:
        (out_dir / name).unlink(missing_ok=True)
    for pattern in PLOT_PATTERNS:
        for stale in out_dir.glob(pattern):
            stale.unlink()

    when = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    measured_per_kind = table.groupby("device_kind")["model"].nunique().to_dict()
    total_models = queries.model_count(session) if chosen is None else len(set(chosen))
    measured = table["model"].nunique() if not table.empty else 0

    doc = Document("operator-db report")
    scope = "models in the database" if chosen is None else "models in the study"
    doc.para(
        f"Generated {when} from {source or _source(session)}. "
        f"{total_models} {scope}, {measured} with a measured full-model run on the "
        "device kinds covered. Figures are the latest eager measurements (median per call)."
    )
    doc.bullets(
        [
            f"{k.name} ({k.type}): {measured_per_kind.get(k.name, 0)} models measured"
            for k in sorted(kinds, key=lambda k: k.name)
        ]
        or ["no device kind registered yet (a worker registers its kind)"]
    )
    unmeasured = total_models - measured
    if unmeasured and not table.empty:
        doc.para(
            f"{unmeasured} models have no full-model run on these kinds and are left out "
            "of the measured studies (the run matrix and the complexity table show them)."
        )
    sections.runs_section(doc, runs)
    sections.model_section(doc, table)
    estimates_section(doc, estimates)
    llm_section(doc, llms)
    sections.complexity_table_section(doc, complexity, out_dir)
    sections.latency_section(doc, points, out_dir)
    sections.correlation_section(doc, corr, out_dir)
    sections.batch_section(doc, batch, out_dir, not table.empty)
    achieved = table.merge(
        points[["model", "device_kind", "family_name"]], on=["model", "device_kind"]
    )
    sections.roofline_section(doc, session, achieved, kinds, out_dir)
    roofs.configs_section(doc, session, kinds, out_dir)
    sections.run_fb_section(doc, runs_fb, out_dir)
    sections.fb_section(doc, fb, out_dir)
    sections.layers_section(doc, layers, out_dir)
    predictions_section(doc, session, kinds, predicted)
    hardware.counters_section(doc, counters)
    hardware.chips_section(doc, session, out_dir, device_kinds)

    runs.to_csv(out_dir / "runs.csv", index=False)
    table.to_csv(out_dir / "models.csv", index=False)
    complexity.to_csv(out_dir / "complexity.csv", index=False)
    batch.to_csv(out_dir / "batch.csv", index=False)
    corr.data.to_csv(out_dir / "correlation_data.csv", index=False)
    corr.matrix.to_csv(out_dir / "correlation_matrix.csv")
    runs_fb.pairs.to_csv(out_dir / "forward_backward_runs.csv", index=False)
    fb.models.to_csv(out_dir / "forward_backward_models.csv", index=False)
    fb.configs.to_csv(out_dir / "forward_backward_configs.csv", index=False)
    layers.shares.to_csv(out_dir / "layer_shares.csv", index=False)
    counter_rows.to_csv(out_dir / "ncu_counters.csv", index=False)
    predicted.to_csv(out_dir / "predictions.csv", index=False)
    llms.to_csv(out_dir / "llms.csv", index=False)

    paths = []
    for fmt in dict.fromkeys(formats):
        path = out_dir / f"report.{fmt}"
        path.write_text(doc.markdown() if fmt == "md" else doc.html(), encoding="utf-8")
        paths.append(path)
    return paths
