"""How ``opdb estimate`` prints an estimate: the headline, by operator type, by configuration."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from operator_db.cli.common import console
from operator_db.stats import format_ms

if TYPE_CHECKING:
    from operator_db.estimate.compose import Estimate
    from operator_db.stats import Interval


def _ms(seconds: float | None) -> str:
    """Milliseconds as the pages write them (``stats.format_ms``: ``37.7``, ``1,221``)."""
    return format_ms(seconds, "-")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _ms_range(interval: Interval | None) -> str:
    """Return `` (low … high ms, 95 %)`` for an interval with a width, else ``""``."""
    if interval is None or interval.high <= interval.low:
        return ""
    return f" ({_ms(interval.low)} … {_ms(interval.high)} ms, {interval.level * 100:.0f} %)"


def _error(value: float | None, iv: Interval | None) -> str:
    """Return an error with its interval and whether it is within noise (time or energy)."""
    from operator_db.stats import describe_error

    if iv is None or iv.high <= iv.low:
        return _pct(value)
    return describe_error(iv)


def print_estimate(est: Estimate, top: int) -> None:
    """Print an estimate: its headline table, its operator types and its configurations."""
    energy = "-" if est.energy_j is None else f"{est.energy_j * 1e3:.3f} mJ ({est.energy})"
    run_energy = "-" if est.full_run_energy_j is None else f"{est.full_run_energy_j * 1e3:.3f} mJ"
    head = Table(show_header=False, title=f"{est.model} ({est.mode}) on {est.device_kind}")
    alone = est.total_time_s == est.time_s  # the operators are the estimate
    if est.no_estimate is not None:  # a sum of nothing is not 0 ms: say why there is none
        head.add_row("estimate", f"none: {est.no_estimate}")
    else:
        head.add_row(
            "operators (Σ count × per-call)",
            f"{_ms(est.time_s)} ms{_ms_range(est.time_interval) if alone else ''}, {energy}",
        )
    if est.predicted:
        who = est.predictor or {}
        views = who.get("views") or {}
        by = (
            f"cross-device model v{who.get('version')}, {who.get('mode')}, from "
            + ", ".join(who.get("from_kinds") or [])
            + ("; " + ", ".join(f"{f} by {v}" for f, v in views.items()) if views else "")
            if who.get("method") == "across devices"
            else f"predictor v{who.get('version')}, {who.get('samples')} configurations"
        )
        head.add_row(
            "of which predicted",
            f"{_ms(est.predicted_time_s)} ms: {est.predicted} configurations, "
            f"{est.coverage_predicted:.1%} of calls ({by})",
        )
        level = who.get("level")
        head.add_row(
            f"{level:.0%} interval" if isinstance(level, float) else "interval",
            f"{_ms(est.total_time_bounds_s[0])} – {_ms(est.total_time_bounds_s[1])} ms",
        )
    if est.no_estimate is not None:
        pass
    elif est.host_time_s is not None:
        head.add_row(
            "host stage (issue: hollow run + modules)",
            f"{_ms(est.host_time_s)} ms; the {est.bound_by} bounds the GPU pipeline",
        )
        head.add_row(
            "estimate (pipeline)", f"{_ms(est.total_time_s)} ms{_ms_range(est.time_interval)}"
        )
    elif est.between_ops_s is not None:
        how = "added" if est.adds_between else "overlaps the GPU's work, not added"
        share = est.between_ops_share
        how += "" if share is None else f" ({share:.1%} of the estimate)"
        head.add_row("between operators (hollow run)", f"{_ms(est.between_ops_s)} ms, {how}")
        head.add_row("estimate", f"{_ms(est.total_time_s)} ms{_ms_range(est.time_interval)}")
    head.add_row(
        "measured full model",
        f"{_ms(est.full_run_time_s)} ms{_ms_range(est.full_run_interval)}, {run_energy}",
    )
    error = (
        f"time {_error(est.time_error, est.time_error_interval)}, "
        f"energy {_error(est.energy_error, est.energy_error_interval)}"
    )
    if est.total_time_s != est.time_s:
        error += f" (operators alone: time {_pct(est.operators_time_error)})"
    head.add_row("error of the estimate", error)
    if est.noise is not None and est.noise.exact_rows:
        head.add_row(
            "without an interval",
            f"{est.noise.exact_rows} measured figures (imported, or measured before intervals "
            "were kept) count as exact",
        )
    head.add_row(
        "coverage",
        f"{est.coverage:.1%} of operator calls measured"
        + (
            ""
            if est.coverage_roofline is None
            else f", {est.coverage_roofline:.1%} of roofline-bound time"
        ),
    )
    if est.roofline_time_s is not None and est.peaks is not None:
        bound = f", bound by {est.roofline_bound}" if est.roofline_bound else ""
        head.add_row("roofline bound", f"{_ms(est.roofline_time_s)} ms{bound} ({est.peaks.source})")
    head.add_row(
        "timing used",
        (f"{est.timing} (CUDA graph where measured)" if est.timing == "graph" else "eager")
        + (", in a replay of the model's calls" if est.context == "replay" else "")
        + f", {est.cache_mode} caches",
    )
    console.print(head)
    for warning in est.warnings:  # as loud as it gets: the figure is not what it seems
        console.print(Text(f"warning: {warning}", style="bold yellow"))
    ops = Table(
        "operator",
        "configs",
        "calls",
        "time (ms)",
        "share",
        "energy (mJ)",
        "GFLOPs",
        title="by operator type",
    )
    for r in est.op_rows:
        ops.add_row(
            str(r["op"]),
            str(r["configs"]),
            str(r["calls"]),
            _ms(r["time_s"]),
            "-" if r["time_share"] is None else f"{r['time_share']:.1%}",
            "-" if r["energy_j"] is None else f"{r['energy_j'] * 1e3:.3f}",
            f"{r['flops'] / 1e9:.3f}",
        )
    console.print(ops)
    cfgs = Table(
        "operator",
        "inputs",
        "count",
        "per call (µs)",
        "total (ms)",
        "share",
        "flags",
        title=f"largest {top} configurations",
    )
    for r in est.ranked_config_rows()[:top]:
        known = r["source"] is not None
        mark = "~" if r["source"] == "predicted" else ""  # predicted, not measured
        cfgs.add_row(
            str(r["op"]),
            str(r["inputs"]),
            str(r["count"]),
            "-" if not known else f"{mark}{r['time_per_call_s'] * 1e6:.1f}",
            "-" if not known else mark + _ms(r["time_s"]),
            "-" if not known or r["time_share"] is None else f"{r['time_share']:.1%}",
            str(r["flags"] or ""),
        )
    console.print(cfgs)
    if est.predicted:
        console.print("~: predicted, not measured")
    for note in est.notes:
        console.print(f"note: {note}")
