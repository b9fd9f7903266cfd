"""Spearman's rank correlation of CPU latency, GPU latency, FLOPs and parameters across models."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy.orm import Session

from operator_db.study.analysis.models import model_table

CORRELATION_COLUMNS = ["cpu_latency_s", "gpu_latency_s", "flops", "params"]
"""Variables of :func:`correlation_study`, in this order."""

MIN_PAIRS = 3
"""Fewest models a rank correlation is computed from: with two, Spearman's ρ is always ±1."""


def _pearson(x: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> float:
    dx, dy = x - x.mean(), y - y.mean()
    den = math.sqrt(float((dx * dx).sum()) * float((dy * dy).sum()))
    return float((dx * dy).sum()) / den if den > 0 else math.nan


def spearman(x: Sequence[float] | pd.Series, y: Sequence[float] | pd.Series) -> float:
    """Return Spearman's ρ of two equally long samples: Pearson's r of their average ranks.

    Pairs with a missing value (NaN or None) on either side are dropped first, then both sides are
    ranked (ties share the mean of their ranks), which makes the result exact with ties. Returns
    NaN with fewer than two pairs or when one side is constant (ρ is undefined there).
    """
    pairs = pd.DataFrame(
        {"x": pd.Series(x, dtype=float).to_numpy(), "y": pd.Series(y, dtype=float).to_numpy()}
    ).dropna()
    if len(pairs) < 2:
        return math.nan
    ranks = pairs.rank(method="average")
    return _pearson(ranks["x"].to_numpy(float), ranks["y"].to_numpy(float))


def spearman_matrix(
    frame: pd.DataFrame,
    columns: Sequence[str] | None = None,
    *,
    min_periods: int = MIN_PAIRS,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Return the Spearman rank correlation matrix of ``columns`` and the pair counts behind it.

    Missing values are handled pairwise: each coefficient uses the rows where both of its columns
    have a value, ranked afresh within those rows (ties get average ranks). A coefficient from fewer
    than ``min_periods`` pairs, or with a constant column, is NaN. The diagonal is 1 where the
    column has at least ``min_periods`` values and is not constant, else NaN.

    Returns:
        ``(rho, pairs)``: two square DataFrames indexed by ``columns``; ``pairs`` holds the number
        of rows each coefficient was computed from.
    """
    names = list(frame.columns if columns is None else columns)
    data = frame[names].apply(pd.to_numeric, errors="coerce").astype(float)
    rho = pd.DataFrame(math.nan, index=names, columns=names, dtype=float)
    pairs = pd.DataFrame(0, index=names, columns=names, dtype=int)
    for i, a in enumerate(names):
        for b in names[i:]:
            both = data[[a, b]].dropna() if a != b else data[[a]].dropna()
            n = len(both)
            pairs.loc[a, b] = pairs.loc[b, a] = n
            if n < max(min_periods, 2):
                continue
            value = spearman(both[a], both[b] if a != b else both[a])
            rho.loc[a, b] = rho.loc[b, a] = value
    return rho, pairs


@dataclass
class CorrelationStudy:
    """Spearman's ρ between CPU latency, GPU latency, FLOPs and parameters, across models."""

    data: pd.DataFrame
    """One row per model: name, mode, batch size and the variables (s, FLOPs, elements)."""
    matrix: pd.DataFrame
    """ρ between the variables kept (square, NaN where undefined)."""
    pairs: pd.DataFrame
    """How many models each coefficient was computed from."""
    cpu_kind: str | None
    gpu_kind: str | None
    notes: list[str] = field(default_factory=list)


def _pick_kind(frame: pd.DataFrame, device_type: str, notes: list[str]) -> str | None:
    """Choose the device kind of a type measured on the most models (then by name)."""
    rows = frame[frame["device_type"] == device_type]
    if rows.empty:
        return None
    counts = rows.groupby("device_kind")["model"].nunique()
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    chosen = str(ranked[0][0])
    if len(ranked) > 1:
        others = ", ".join(str(name) for name, _ in ranked[1:])
        notes.append(
            f"{len(ranked)} {device_type.upper()} kinds measured; the {device_type.upper()} "
            f"latency is {chosen} (most models); left out: {others}"
        )
    return chosen


def correlation_study(
    session: Session,
    *,
    device_kinds: Sequence[str] | None = None,
    table: pd.DataFrame | None = None,
    min_periods: int = MIN_PAIRS,
) -> CorrelationStudy:
    """Return Spearman's ρ of CPU latency, GPU latency, FLOPs and parameters across models.

    One row per model (each batch size and mode is its own model). CPU latency comes from one
    device kind of type ``cpu``, GPU latency from one of type ``gpu`` (where several are measured,
    the one with the most models; a note names the others); fake kinds are neither. ``flops`` is
    the work of one measured call (``step_flops``), ``params`` the distinct parameters. Missing
    values are handled pairwise (see :func:`spearman_matrix`); a latency variable that no model
    has is omitted from the matrix, with a note.

    Raises:
        NotFoundError: a named device kind does not exist.
    """
    frame = model_table(session, device_kinds=device_kinds) if table is None else table
    notes: list[str] = []
    if frame.empty:
        empty = pd.DataFrame(dtype=float)
        notes.append("no model has a measured full-model run: nothing to correlate")
        return CorrelationStudy(pd.DataFrame(), empty, empty.astype(int), None, None, notes)
    cpu = _pick_kind(frame, "cpu", notes)
    gpu = _pick_kind(frame, "gpu", notes)
    data = (
        frame.groupby("model", sort=True)
        .agg(
            mode=("mode", "first"),
            batch_size=("batch_size", "first"),
            flops=("step_flops", "first"),
            params=("params", "first"),
        )
        .reset_index()
    )
    for column, kind in (("cpu_latency_s", cpu), ("gpu_latency_s", gpu)):
        rows = frame[frame["device_kind"] == kind].set_index("model")["latency_s"]
        data[column] = data["model"].map(rows).astype(float)
    data = data[["model", "mode", "batch_size", *CORRELATION_COLUMNS]]
    kept = list(CORRELATION_COLUMNS)
    if cpu is None:
        kept.remove("cpu_latency_s")
        notes.append("no CPU measurements: CPU latency column omitted")
    if gpu is None:
        kept.remove("gpu_latency_s")
        notes.append("no GPU measurements: GPU latency column omitted")
    if (frame["device_type"] == "fake").any():
        notes.append("fake device kinds are neither CPU nor GPU: left out of the correlation")
    rho, pairs = spearman_matrix(data, kept, min_periods=min_periods)
    if len(data) < min_periods:
        notes.append(
            f"only {len(data)} measured models: a coefficient needs at least {min_periods}"
        )
    elif rho.isna().to_numpy().any():
        notes.append(
            f"n/a: fewer than {min_periods} models with both values, or a constant variable"
        )
    return CorrelationStudy(data, rho, pairs, cpu, gpu, notes)
