"""Studies over whatever the database holds: batch size, complexity, rank correlation, backward.

Every function takes ``session``, only reads, and returns pandas DataFrames (or a small dataclass
of them). Units are in the column names: ``_s`` seconds, ``_j`` joules, ``_per_s`` per second,
``flops`` FLOPs (never MACs), ``params`` parameter elements.

Measured figures are the *latest eager* result per (target, device kind), as in
:func:`operator_db.estimate.compose.estimate_model`: a full-model run gives a model's latency, an
operator measurement gives a configuration's per-call time. Nothing missing is invented: a value
that was not measured is NaN, and the notes of each study say what was left out and why.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError
from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.models import DeviceKind, Model, OperatorConfig
from operator_db.specs.keys import operator_key

MODEL_COLUMNS = [
    "model",
    "family",
    "reference",
    "mode",
    "dtype",
    "batch_size",
    "device_kind",
    "device_type",
    "latency_s",
    "throughput_per_s",
    "energy_per_call_j",
    "energy_per_sample_j",
    "flops",
    "flops_backward",
    "step_flops",
    "params",
    "achieved_flops_per_s",
    "estimate_s",
    "coverage",
    "estimate_error",
]
"""Columns of :func:`model_table`."""

BATCH_COLUMNS = [
    "family",
    "family_name",
    "device_kind",
    "device_type",
    "batch_size",
    "model",
    "latency_s",
    "latency_per_sample_s",
    "throughput_per_s",
    "throughput_gain",
]
"""Columns of :func:`batch_study`."""

COMPLEXITY_COLUMNS = [
    "device_kind",
    "device_type",
    "model",
    "mode",
    "batch_size",
    "step_flops",
    "params",
    "latency_s",
    "achieved_flops_per_s",
]
"""Columns of :func:`latency_vs_complexity`."""

CORRELATION_COLUMNS = ["cpu_latency_s", "gpu_latency_s", "flops", "params"]
"""Variables of :func:`correlation_study`, in this order."""

MIN_PAIRS = 3
"""Fewest models a rank correlation is computed from: with two, Spearman's ρ is always ±1."""

FB_CONFIG_COLUMNS = [
    "model",
    "op",
    "inputs",
    "key",
    "count",
    "flops_forward",
    "flops_backward",
    "flops_ratio",
    "device_kind",
    "time_training_s",
    "time_forward_s",
    "time_backward_s",
    "time_ratio",
    "status",
]
"""Columns of :attr:`ForwardBackwardStudy.configs`."""

FB_MODEL_COLUMNS = [
    "model",
    "device_kind",
    "configs",
    "calls",
    "flops_forward",
    "flops_backward",
    "flops_ratio",
    "flops_coverage",
    "time_training_s",
    "time_forward_s",
    "time_backward_s",
    "time_ratio",
    "time_coverage",
]
"""Columns of :attr:`ForwardBackwardStudy.models`."""


# --- helpers ----------------------------------------------------------------------------------


def reference_text(reference: str | None, overrides: dict[str, Any] | None) -> str | None:
    """Return a reference with its overrides in the ``REF?key=json&...`` form, keys sorted."""
    if reference is None:
        return None
    if not overrides:
        return reference
    items = "&".join(
        f"{key}={json.dumps(overrides[key], separators=(',', ':'), sort_keys=True)}"
        for key in sorted(overrides)
    )
    return f"{reference}?{items}"


def _input_signature(inputs: Sequence[Any]) -> str:
    """Describe a model's inputs with the leading (batch) dimension written ``B``."""
    parts = []
    for t in inputs:
        shape = list(t.get("shape", [])) if isinstance(t, dict) else []
        dims = ["B", *map(str, shape[1:])] if shape else ["scalar"]
        dtype = t.get("dtype", "float32") if isinstance(t, dict) else "?"
        parts.append("×".join(dims) + ("" if dtype == "float32" else f":{dtype}"))
    return ", ".join(parts)


def family_label(model: Model) -> str:
    """Return the batch-size family a model belongs to, as a readable label.

    Models of one family differ only in batch size: same reference and overrides, mode, dtype and
    inputs apart from their leading dimension. A model without a reference is a family of one.
    """
    ref = reference_text(model.reference, model.overrides)
    if ref is None:
        return model.name
    parts = [ref, _input_signature(model.inputs)]
    if model.mode != "inference":
        parts.append(model.mode)
    if model.dtype != "float32":
        parts.append(model.dtype)
    return " · ".join(p for p in parts if p)


_BATCH_SUFFIX = re.compile(r"[-_.]?(?:b|bs|batch)[-_]?\d+$", re.IGNORECASE)


def family_names(frame: pd.DataFrame) -> dict[str, str]:
    """Return a short name per family of ``frame`` (columns ``family`` and ``model``).

    The name is what the family's model names share once a batch suffix (``-b8``, ``_bs32``,
    ``-batch4``) is removed, else their common prefix; the full family label where neither gives
    a name or two families would get the same one.
    """
    names: dict[str, str] = {}
    for family, models in frame.groupby("family", sort=True)["model"]:
        members = sorted(set(map(str, models)))
        stems = {_BATCH_SUFFIX.sub("", m) for m in members}
        stem = stems.pop() if len(stems) == 1 else os.path.commonprefix(members).rstrip("-_.")
        names[str(family)] = stem or str(family)
    taken: dict[str, int] = {}
    for name in names.values():
        taken[name] = taken.get(name, 0) + 1
    return {family: name if taken[name] == 1 else family for family, name in names.items()}


def _kind_ids(session: Session, device_kinds: Sequence[str] | None) -> dict[int, DeviceKind]:
    """Return the device kinds to study by id: the named ones, or all.

    Raises:
        NotFoundError: a named kind does not exist.
    """
    return {k.id: k for k in queries.device_kinds(session, device_kinds)}


def _latest_times(
    session: Session, config_ids: Sequence[int], kind_ids: Sequence[int]
) -> dict[tuple[int, int], float]:
    """Return the latest eager per-call time (s) per (config id, device kind id)."""
    figures = queries.config_figures(session, config_ids, kind_ids, timing="eager")
    return {(config_id, kind_id): f.time_median_s for (config_id, kind_id, _), f in figures.items()}


def _unique_calls(count: int, locations: Sequence[Any]) -> int:
    """How many distinct modules run a configuration: its locations, else its count."""
    return min(count, len(set(map(str, locations)))) if locations else count


def _ratio(num: float, den: float) -> float:
    return num / den if den and not math.isnan(num) and not math.isnan(den) else math.nan


# --- the model table --------------------------------------------------------------------------


def model_table(session: Session, *, device_kinds: Sequence[str] | None = None) -> pd.DataFrame:
    """Return one row per (model, device kind) with a measured full-model run (latest eager).

    Columns (see ``MODEL_COLUMNS``): ``latency_s`` the full run's median time per call (s);
    ``throughput_per_s`` ``batch_size / latency_s`` (samples/s, NaN without a batch size);
    ``energy_per_call_j`` and ``energy_per_sample_j`` (J, NaN where energy was not measured);
    ``flops`` Σ count × forward FLOPs; ``flops_backward`` Σ count × backward FLOPs (training
    models, NaN when no configuration has one); ``step_flops`` the work of one measured call:
    ``flops`` for inference, ``flops + flops_backward`` for training; ``params`` the model's
    distinct parameters (elements): Σ over configurations of params × the number of distinct
    modules running it (its locations; its count where none are recorded), so a module called
    twice counts once; ``achieved_flops_per_s`` ``step_flops / latency_s``; ``estimate_s`` the
    composed time Σ count × latest eager per-call time over the measured configurations (as
    ``estimate_model(timing="eager")``), ``coverage`` the measured share of its measurable calls,
    and ``estimate_error`` (estimate − measured) / measured, given only at full coverage.

    Raises:
        NotFoundError: a named device kind does not exist.
    """
    kinds = _kind_ids(session, device_kinds)
    runs = {
        (model_id, kind_id): figure
        for (model_id, kind_id, _), figure in queries.model_figures(
            session, None, list(kinds), timing="eager"
        ).items()
    }
    if not runs:
        return pd.DataFrame(columns=MODEL_COLUMNS)
    model_ids = sorted({model_id for model_id, _ in runs})
    models = {m.id: m for m in queries.list_models(session, ids=model_ids)}
    links = [
        (
            model_id,
            mc.config.id,
            mc.count,
            mc.locations,
            mc.config.form,
            mc.config.flops,
            mc.config.flops_backward,
            mc.config.params,
        )
        for model_id, configs in queries.models_configs(session, model_ids).items()
        for mc in configs
    ]
    times = _latest_times(session, [link[1] for link in links], list(kinds))
    run_kinds: dict[int, list[int]] = {}
    for model_id, kind_id in runs:
        run_kinds.setdefault(model_id, []).append(kind_id)
    totals: dict[int, dict[str, float]] = {}
    per_kind: dict[tuple[int, int], list[float]] = {}  # [time, measured calls, measurable calls]
    for model_id, config_id, count, locations, form, flops, flops_bwd, params in links:
        t = totals.setdefault(
            model_id, {"flops": 0, "flops_backward": 0, "has_backward": 0, "params": 0}
        )
        t["flops"] += count * (flops or 0)
        if flops_bwd is not None:
            t["flops_backward"] += count * flops_bwd
            t["has_backward"] = 1
        t["params"] += params * _unique_calls(count, locations)
        if form == "opaque":
            continue
        for kind_id in run_kinds[model_id]:
            acc = per_kind.setdefault((model_id, kind_id), [0.0, 0.0, 0.0])
            acc[2] += count
            time_s = times.get((config_id, kind_id))
            if time_s is not None:
                acc[0] += count * time_s
                acc[1] += count
    records = []
    for (model_id, kind_id), run in runs.items():
        model, kind = models[model_id], kinds[kind_id]
        t = totals.get(model_id, {"flops": 0, "flops_backward": 0, "has_backward": 0, "params": 0})
        backward = t["flops_backward"] if t["has_backward"] else math.nan
        step = t["flops"] + (t["flops_backward"] if model.mode == "training" else 0)
        latency = run.time_median_s
        batch = model.batch_size
        energy = math.nan if run.energy_per_call_j is None else run.energy_per_call_j
        time_s, measured, measurable = per_kind.get((model_id, kind_id), [0.0, 0.0, 0.0])
        coverage = measured / measurable if measurable else math.nan
        estimate = time_s if measured else math.nan
        records.append(
            {
                "model": model.name,
                "family": family_label(model),
                "reference": reference_text(model.reference, model.overrides),
                "mode": model.mode,
                "dtype": model.dtype,
                "batch_size": batch,
                "device_kind": kind.name,
                "device_type": kind.type,
                "latency_s": latency,
                "throughput_per_s": batch / latency if batch and latency > 0 else math.nan,
                "energy_per_call_j": energy,
                "energy_per_sample_j": energy / batch if batch else math.nan,
                "flops": int(t["flops"]),
                "flops_backward": backward,
                "step_flops": int(step),
                "params": int(t["params"]),
                "achieved_flops_per_s": step / latency if latency > 0 else math.nan,
                "estimate_s": estimate,
                "coverage": coverage,
                "estimate_error": (estimate - latency) / latency
                if coverage == 1 and latency > 0
                else math.nan,
            }
        )
    frame = pd.DataFrame.from_records(records, columns=MODEL_COLUMNS)
    frame["batch_size"] = frame["batch_size"].astype("Int64")
    return frame.sort_values(["model", "device_kind"], ignore_index=True)


# --- batch size -------------------------------------------------------------------------------


def batch_study(
    session: Session,
    *,
    device_kinds: Sequence[str] | None = None,
    table: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Return latency and throughput against batch size, per model family and device kind.

    A family (see :func:`family_label`; ``family_name`` is its short name, see
    :func:`family_names`) enters the study on a device kind where at least two of its batch sizes
    have a measured full-model run. ``latency_per_sample_s`` is latency / batch
    (s); ``throughput_per_s`` batch / latency (samples/s); ``throughput_gain`` the throughput over
    the family's throughput at its smallest measured batch size on that kind (×). ``table`` reuses
    a :func:`model_table` already computed.

    Raises:
        NotFoundError: a named device kind does not exist.
    """
    frame = model_table(session, device_kinds=device_kinds) if table is None else table
    frame = frame[frame["batch_size"].notna()]
    if frame.empty:
        return pd.DataFrame(columns=BATCH_COLUMNS)
    sizes = frame.groupby(["family", "device_kind"])["batch_size"].transform("nunique")
    frame = frame[sizes >= 2].sort_values(["family", "device_kind", "batch_size", "model"])
    if frame.empty:
        return pd.DataFrame(columns=BATCH_COLUMNS)
    frame = frame.assign(
        family_name=frame["family"].map(family_names(frame)),
        latency_per_sample_s=frame["latency_s"] / frame["batch_size"],
    )
    first = frame.groupby(["family", "device_kind"])["throughput_per_s"].transform("first")
    frame = frame.assign(throughput_gain=frame["throughput_per_s"] / first)
    return frame[BATCH_COLUMNS].reset_index(drop=True)


# --- complexity -------------------------------------------------------------------------------


def latency_vs_complexity(
    session: Session,
    *,
    device_kinds: Sequence[str] | None = None,
    table: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Return each measured model's latency (s) with its FLOPs and parameters, per device kind.

    ``step_flops`` is the work of one measured call (forward, plus backward for training) in FLOPs,
    ``params`` distinct parameters in elements, ``achieved_flops_per_s`` ``step_flops /
    latency_s``. Sorted by device kind, then FLOPs.

    Raises:
        NotFoundError: a named device kind does not exist.
    """
    frame = model_table(session, device_kinds=device_kinds) if table is None else table
    if frame.empty:
        return pd.DataFrame(columns=COMPLEXITY_COLUMNS)
    return (
        frame[COMPLEXITY_COLUMNS]
        .sort_values(["device_kind", "step_flops", "model"])
        .reset_index(drop=True)
    )


# --- rank correlation -------------------------------------------------------------------------


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


# --- forward and backward ---------------------------------------------------------------------


@dataclass
class ForwardBackwardStudy:
    """Backward against forward, in FLOPs and in time, for the training models."""

    configs: pd.DataFrame
    """One row per (training model, configuration, device kind); see ``FB_CONFIG_COLUMNS``."""
    models: pd.DataFrame
    """One row per (training model, device kind); see ``FB_MODEL_COLUMNS``."""
    notes: list[str] = field(default_factory=list)


def inference_twins(session: Session, configs: Sequence[OperatorConfig]) -> dict[int, int]:
    """Map training configuration ids to the id of their stored inference twin, where one exists.

    The twin is the configuration with the same canonical form in mode ``inference`` (same op,
    arguments, inputs and call): its measurement is the forward pass alone.
    """
    keys: dict[str, int] = {}
    for cfg in configs:
        if cfg.form == "opaque":
            continue
        try:
            keys[operator_key(queries.config_spec(cfg), "inference")] = cfg.id
        except ValidationError:  # a row the spec schema no longer reads has no twin to find
            continue
    found = queries.config_ids_by_key(session, list(keys))
    return {keys[key]: twin_id for key, twin_id in found.items()}


def forward_backward(
    session: Session, *, device_kinds: Sequence[str] | None = None
) -> ForwardBackwardStudy:
    """Return backward:forward ratios of FLOPs and time for every training model.

    FLOPs come from the spec: ``flops_ratio = flops_backward / flops_forward`` per call. Time: a
    training configuration's measurement is one forward + backward per call; its inference twin
    (see :func:`inference_twins`) measured on the same device kind gives the forward alone, so
    ``time_backward_s = time_training_s − time_forward_s`` and ``time_ratio = time_backward_s /
    time_forward_s``. The twin runs without autograd and in eval mode (BatchNorm on running
    statistics, dropout off), so the difference also holds autograd bookkeeping and train-mode
    forward work; for tiny ops it can be negative, and is reported as measured.

    ``status`` says what a row lacks: ``ok``, ``opaque``, ``no inference twin``, ``training not
    measured``, ``forward not measured``, or ``not measured``. Per model (``models``), FLOPs sum
    count × per-call over the configurations with both FLOP counts and times over those with both
    times on that kind; ``flops_coverage`` and ``time_coverage`` are the count-weighted shares of
    the model's measurable calls that entered each sum.

    Raises:
        NotFoundError: a named device kind does not exist.
    """
    kinds = _kind_ids(session, device_kinds)
    training = queries.list_models(session, mode="training")
    configs_of = queries.models_configs(session, [m.id for m in training])
    links = [
        (model.name, mc.count, mc.position, mc.config)
        for model in training
        for mc in configs_of[model.id]
    ]
    notes: list[str] = []
    if not links:
        notes.append("no training model in the database: no forward:backward study")
        return ForwardBackwardStudy(
            pd.DataFrame(columns=FB_CONFIG_COLUMNS), pd.DataFrame(columns=FB_MODEL_COLUMNS), notes
        )
    configs = {cfg.id: cfg for _, _, _, cfg in links}
    twins = inference_twins(session, list(configs.values()))
    times = _latest_times(session, [*configs, *twins.values()], list(kinds))
    records = []
    for name, count, _, cfg in links:
        fwd_flops = math.nan if cfg.flops is None else float(cfg.flops)
        bwd_flops = math.nan if cfg.flops_backward is None else float(cfg.flops_backward)
        base = {
            "model": name,
            "op": cfg.op,
            "inputs": " ".join("x".join(map(str, t.get("shape", []))) for t in cfg.inputs),
            "key": cfg.key,
            "count": count,
            "flops_forward": fwd_flops,
            "flops_backward": bwd_flops,
            "flops_ratio": _ratio(bwd_flops, fwd_flops),
        }
        twin = twins.get(cfg.id)
        measured_kinds = [
            k for k in kinds if (cfg.id, k) in times or (twin is not None and (twin, k) in times)
        ]
        if cfg.form == "opaque" or not measured_kinds:
            status = (
                "opaque"
                if cfg.form == "opaque"
                else ("no inference twin" if twin is None else "not measured")
            )
            records.append(
                base
                | {
                    "device_kind": None,
                    "time_training_s": math.nan,
                    "time_forward_s": math.nan,
                    "time_backward_s": math.nan,
                    "time_ratio": math.nan,
                    "status": status,
                }
            )
            continue
        for kind_id in measured_kinds:
            train = times.get((cfg.id, kind_id), math.nan)
            fwd = math.nan if twin is None else times.get((twin, kind_id), math.nan)
            backward = train - fwd
            if twin is None:
                status = "no inference twin"
            elif math.isnan(train):
                status = "training not measured"
            elif math.isnan(fwd):
                status = "forward not measured"
            else:
                status = "ok"
            records.append(
                base
                | {
                    "device_kind": kinds[kind_id].name,
                    "time_training_s": train,
                    "time_forward_s": fwd,
                    "time_backward_s": backward,
                    "time_ratio": _ratio(backward, fwd),
                    "status": status,
                }
            )
    rows = pd.DataFrame.from_records(records, columns=FB_CONFIG_COLUMNS)
    models = _fb_models(links, rows)
    missing = rows[rows["status"] != "ok"]
    if not missing.empty:
        counts = missing.groupby("status")["key"].count()
        notes.append(
            "configuration rows without both times: "
            + ", ".join(f"{status} ×{n}" for status, n in counts.items())
        )
    if not (rows["status"] == "ok").any():
        notes.append("no training configuration has both its time and its forward twin's time")
    return ForwardBackwardStudy(rows, models, notes)


def _fb_models(links: Sequence[Any], rows: pd.DataFrame) -> pd.DataFrame:
    """Sum count × per-call FLOPs and times per (training model, device kind)."""
    records = []
    for name, group in rows.groupby("model", sort=True):
        measurable = [link for link in links if link[0] == name and link[3].form != "opaque"]
        calls = sum(link[1] for link in measurable)
        per_config = group[group["status"] != "opaque"].drop_duplicates("key")
        both = per_config[
            per_config["flops_forward"].notna() & per_config["flops_backward"].notna()
        ]
        flops_fwd = float((both["count"] * both["flops_forward"]).sum())
        flops_bwd = float((both["count"] * both["flops_backward"]).sum())
        flops_fields = {
            "model": name,
            "configs": len(measurable),
            "calls": calls,
            "flops_forward": flops_fwd if len(both) else math.nan,
            "flops_backward": flops_bwd if len(both) else math.nan,
            "flops_ratio": _ratio(flops_bwd, flops_fwd),
            "flops_coverage": _ratio(float(both["count"].sum()), float(calls)),
        }
        kinds = [k for k in group["device_kind"].dropna().unique()]
        if not kinds:
            records.append(
                flops_fields
                | {
                    "device_kind": None,
                    "time_training_s": math.nan,
                    "time_forward_s": math.nan,
                    "time_backward_s": math.nan,
                    "time_ratio": math.nan,
                    "time_coverage": 0.0,
                }
            )
            continue
        for kind in sorted(kinds):
            ok = group[(group["device_kind"] == kind) & (group["status"] == "ok")]
            train = float((ok["count"] * ok["time_training_s"]).sum())
            fwd = float((ok["count"] * ok["time_forward_s"]).sum())
            has = not ok.empty
            records.append(
                flops_fields
                | {
                    "device_kind": kind,
                    "time_training_s": train if has else math.nan,
                    "time_forward_s": fwd if has else math.nan,
                    "time_backward_s": train - fwd if has else math.nan,
                    "time_ratio": _ratio(train - fwd, fwd) if has else math.nan,
                    "time_coverage": _ratio(float(ok["count"].sum()), float(calls)),
                }
            )
    return pd.DataFrame.from_records(records, columns=FB_MODEL_COLUMNS)
