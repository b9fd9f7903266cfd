"""The report's estimates section: each measured model composed as `opdb estimate` does it.

The measured-models table (``study.analysis.model_table``) sums the operators looped alone; this
section is the estimate itself: on a CPU the operators timed in the replay of the model's calls
plus the time between them, on a GPU the two stages simulated over the calls in order, with the
estimate the method before gave (operators looped alone) beside it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd
from sqlalchemy.orm import Session

from operator_db.estimate.compose import Estimate, estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.report.columns import ESTIMATE_DISPLAY
from operator_db.report.document import Document, display
from operator_db.stats import noise_verdict

ESTIMATE_COLUMNS = [
    "model",
    "device_kind",
    "total_time_s",
    "full_run_time_s",
    "time_error",
    "error_interval",
    "alone_error",
    "context",
    "bound_by",
    "host_busy_s",
    "device_busy_s",
    "syncs",
    "host_cpu",
    "sources",
    "full_run_source",
]


def estimate_table(session: Session, pairs: Iterable[tuple[str, str]]) -> pd.DataFrame:
    """Return one row per (model, device kind): the estimate, its error, and the one before.

    ``context`` is ``replay`` where the operators were timed in the replay of the model's calls;
    ``alone_error`` is the error of the operators looped alone. Times in s.
    """
    records: list[dict[str, Any]] = []
    for model, kind in pairs:
        est = estimate_model(session, model, kind)
        alone = estimate_model(session, model, kind, EstimateOptions(context="alone"))
        pipe = est.pipeline
        records.append(
            {
                "model": model,
                "device_kind": kind,
                "total_time_s": est.total_time_s,
                "full_run_time_s": est.full_run_time_s,
                "time_error": est.time_error,
                "error_interval": _interval(est),
                "alone_error": alone.time_error,
                "context": "in the replay" if est.context == "replay" else "looped alone",
                "bound_by": est.bound_by or "",
                "host_busy_s": None if pipe is None else pipe.host_busy_s,
                "device_busy_s": None if pipe is None else pipe.device_busy_s,
                "syncs": None if pipe is None else pipe.syncs,
                "host_cpu": est.host_cpu or "",
                "sources": ", ".join(f"{name} {n}" for name, n in sorted(est.sources.items())),
                "full_run_source": est.full_run_source or "",
            }
        )
    return pd.DataFrame.from_records(records, columns=ESTIMATE_COLUMNS)


def _interval(est: Estimate) -> str:
    """Return the error's 95 % interval as text, and whether it is within noise ("" without)."""
    iv = est.time_error_interval
    if iv is None or not iv.high > iv.low:
        return ""
    return f"{iv.low:+.1%} … {iv.high:+.1%} ({iv.level:.0%}), {noise_verdict(iv)}"


def estimates_section(doc: Document, table: pd.DataFrame) -> None:
    """Write the estimates of the measured models against their measured runs."""
    doc.heading("Estimates against the measured models")
    if table.empty:
        doc.para("No model has a measured full-model run on these device kinds.")
        return
    doc.para(
        "Each model as `opdb estimate` composes it: on a CPU its operators timed in the replay "
        "of the model's calls in order (where its run had one) plus the time between them; on a "
        "GPU the host and the device simulated over the calls in order (host and device busy "
        "times, synchronizing calls, the CPU the host stage was measured on). *Looped alone* is "
        "the error of the same model composed from its operators timed alone (docs/estimates.md). "
        "*Error's interval*: the error with both sides' noise (95 %): within noise where it "
        "holds 0 (docs/measurement.md, 'Intervals'). "
        "*Figures from* counts the configurations by where their figure comes from: `measured` "
        "(operator-db's own), a data set's name (imported with `opdb import`: measured by others, "
        "with their method; docs/datasets.md), `predicted`; *run from* says the same of the "
        "measured run."
    )
    doc.table(display(table, ESTIMATE_DISPLAY))
