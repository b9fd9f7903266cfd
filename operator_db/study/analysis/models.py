"""The model table and what is read off it: latency against batch size and against complexity.

Conventions (units, which results, NaN for what is not measured): see
:mod:`operator_db.study.analysis`.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pandas as pd
from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.models import DeviceKind, Model
from operator_db.study.analysis.costs import model_totals, step_figures

MODEL_COLUMNS = [
    "model",
    "family",
    "base_family",
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
    "step_bytes",
    "intensity",
    "achieved_flops_per_s",
    "estimate_s",
    "coverage",
    "estimate_error",
]
"""Columns of :func:`model_table`."""

BATCH_COLUMNS = [
    "family",
    "family_name",
    "base_family_name",
    "mode",
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
    "family_name",
    "mode",
    "batch_size",
    "step_flops",
    "params",
    "latency_s",
    "intensity",
    "achieved_flops_per_s",
]
"""Columns of :func:`latency_vs_complexity`."""

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


def family_label(model: Model, *, with_mode: bool = True) -> str:
    """Return the batch-size family a model belongs to, as a readable label.

    Models of one family differ only in batch size: same reference and overrides, mode, dtype and
    inputs apart from their leading dimension. A model without a reference is a family of one.
    ``with_mode=False`` leaves the mode out: a training spec and its inference twin (same
    reference, overrides, dtype and inputs) then share the label, the *base family*.
    """
    ref = reference_text(model.reference, model.overrides)
    if ref is None:
        return model.name
    parts = [ref, _input_signature(model.inputs)]
    if with_mode and model.mode != "inference":
        parts.append(model.mode)
    if model.dtype != "float32":
        parts.append(model.dtype)
    return " · ".join(p for p in parts if p)


_BATCH_SUFFIX = re.compile(r"[-_.]?(?:b|bs|batch)[-_]?\d+$", re.IGNORECASE)
_MODE_SUFFIX = re.compile(r"[-_.](?:train|training)$", re.IGNORECASE)


def _stem(model: str, strip_mode: bool) -> str:
    stem = _BATCH_SUFFIX.sub("", model)
    return _MODE_SUFFIX.sub("", stem) if strip_mode else stem


def family_names(
    frame: pd.DataFrame, *, column: str = "family", strip_mode: bool = False
) -> dict[str, str]:
    """Return a short name per family of ``frame`` (columns ``column`` and ``model``).

    The name is what most of the family's model names share once a batch suffix (``-b8``,
    ``_bs32``, ``-batch4``) is removed, and with ``strip_mode`` a training suffix (``-train``) too,
    else their common prefix; the full family label where neither gives a name or two families
    would get the same one. ``column="base_family", strip_mode=True`` names base families (both
    modes).
    """
    names: dict[str, str] = {}
    for family, models in frame.groupby(column, sort=True)["model"]:
        members = sorted(set(map(str, models)))
        stems = Counter(_stem(m, strip_mode) for m in members)
        common, n = stems.most_common(1)[0]
        if n * 2 <= len(members):  # no stem names most members: what all names begin with
            common = os.path.commonprefix(members).rstrip("-_.")
        stem = common
        names[str(family)] = stem or str(family)
    taken: dict[str, int] = {}
    for name in names.values():
        taken[name] = taken.get(name, 0) + 1
    return {family: name if taken[name] == 1 else family for family, name in names.items()}


def kinds_by_id(session: Session, device_kinds: Sequence[str] | None) -> dict[int, DeviceKind]:
    """Return the device kinds to study by id: the named ones, or all.

    Raises:
        NotFoundError: a named kind does not exist.
    """
    return {k.id: k for k in queries.device_kinds(session, device_kinds)}


def latest_eager_times(
    session: Session, config_ids: Sequence[int], kind_ids: Sequence[int]
) -> dict[tuple[int, int], float]:
    """Return the latest eager per-call time (s) per (config id, device kind id)."""
    figures = queries.config_figures(session, config_ids, kind_ids, timing="eager")
    return {(config_id, kind_id): f.time_median_s for (config_id, kind_id, _), f in figures.items()}


def safe_ratio(num: float, den: float) -> float:
    """Return ``num / den``, NaN where either is NaN or ``den`` is 0."""
    return num / den if den and not math.isnan(num) and not math.isnan(den) else math.nan


# --- the model table --------------------------------------------------------------------------


def study_models(
    session: Session, models: Sequence[str] | None, *, mode: str | None = None
) -> list[Model]:
    """Return the models a study covers: those named (all must exist), else all, by name.

    Raises:
        NotFoundError: a named model does not exist.
    """
    if models is None:
        return queries.list_models(session, mode=mode)
    found = queries.list_models(session, names=models)
    return [m for m in found if mode is None or m.mode == mode]


def model_table(
    session: Session,
    *,
    device_kinds: Sequence[str] | None = None,
    models: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Return one row per (model, device kind) with a measured full-model run (latest eager).

    Columns (see ``MODEL_COLUMNS``): ``family`` the batch-size family (:func:`family_label`),
    ``base_family`` the same without the mode (a training spec and its inference twin share it);
    ``latency_s`` the full run's median time per call (s);
    ``throughput_per_s`` ``batch_size / latency_s`` (samples/s, NaN without a batch size);
    ``energy_per_call_j`` and ``energy_per_sample_j`` (J, NaN where energy was not measured);
    ``flops`` Σ count × forward FLOPs; ``flops_backward`` Σ count × backward FLOPs (training
    models, NaN when no configuration has one); ``step_flops`` the work of one measured call:
    ``flops`` for inference, ``flops + flops_backward`` for training; ``params`` the model's
    parameters (elements) as its harvest counted them (``provenance["params"]``; specs from before
    that: Σ over configurations of params × the number of distinct modules running it, its
    locations or its count where none are recorded, so a module called twice counts once);
    ``step_bytes`` the compulsory bytes of one call (forward; + the backward
    estimate of :mod:`.costs` for training) and ``intensity`` ``step_flops / step_bytes``
    (FLOP/byte, NaN without bytes); ``achieved_flops_per_s`` ``step_flops / latency_s``;
    ``estimate_s`` the composed time Σ count × latest eager per-call time over the measured
    configurations (as an eager ``estimate_model``), ``coverage`` the measured share of
    its calls (opaque ones count: they are never measured), and ``estimate_error`` (estimate −
    measured) / measured, given only at full coverage. ``models`` restricts the table to those
    models (default: all).

    Raises:
        NotFoundError: a named device kind or model does not exist.
    """
    kinds = kinds_by_id(session, device_kinds)
    model_ids = None if models is None else [m.id for m in study_models(session, models)]
    runs = {
        (model_id, kind_id): figure
        for (model_id, kind_id, _), figure in queries.model_figures(
            session, model_ids, list(kinds), timing="eager"
        ).items()
    }
    if not runs:
        return pd.DataFrame(columns=MODEL_COLUMNS)
    measured_ids = sorted({model_id for model_id, _ in runs})
    by_id = {m.id: m for m in queries.list_models(session, ids=measured_ids)}
    configs_of = queries.models_configs(session, measured_ids)
    config_ids = [mc.config.id for configs in configs_of.values() for mc in configs]
    times = latest_eager_times(session, config_ids, list(kinds))
    records = []
    for (model_id, kind_id), run in runs.items():
        model, kind = by_id[model_id], kinds[kind_id]
        configs = configs_of[model_id]
        totals = model_totals(model, configs)
        step, step_bytes = step_figures(model.mode, totals)
        time_s = measured = calls = 0.0
        for mc in configs:
            calls += mc.count  # opaque calls too: never measured, they leave a gap
            per_call = None if mc.config.form == "opaque" else times.get((mc.config.id, kind_id))
            if per_call is not None:
                time_s += mc.count * per_call
                measured += mc.count
        coverage = measured / calls if calls else math.nan
        estimate = time_s if measured else math.nan
        latency = run.time_median_s
        batch = model.batch_size
        energy = math.nan if run.energy_per_call_j is None else run.energy_per_call_j
        records.append(
            {
                "model": model.name,
                "family": family_label(model),
                "base_family": family_label(model, with_mode=False),
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
                "flops": totals.flops,
                "flops_backward": math.nan
                if totals.flops_backward is None
                else totals.flops_backward,
                "step_flops": step,
                "params": totals.params,
                "step_bytes": step_bytes,
                "intensity": safe_ratio(step, step_bytes),
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
    :func:`family_names`, and ``base_family_name`` that of its base family, both modes)
    enters the study on a device kind where at least two of its batch sizes have a measured
    full-model run. ``latency_per_sample_s`` is latency / batch
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
        base_family_name=frame["base_family"].map(
            family_names(frame, column="base_family", strip_mode=True)
        ),
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
    ``params`` distinct parameters in elements, ``intensity`` FLOP/byte of compulsory traffic,
    ``achieved_flops_per_s`` ``step_flops / latency_s``; ``family_name`` names the base family
    (both modes; :func:`family_names`). Sorted by device kind, then FLOPs.

    Raises:
        NotFoundError: a named device kind does not exist.
    """
    frame = model_table(session, device_kinds=device_kinds) if table is None else table
    if frame.empty:
        return pd.DataFrame(columns=COMPLEXITY_COLUMNS)
    names = family_names(frame, column="base_family", strip_mode=True)
    frame = frame.assign(family_name=frame["base_family"].map(names))
    return (
        frame[COMPLEXITY_COLUMNS]
        .sort_values(["device_kind", "step_flops", "model"])
        .reset_index(drop=True)
    )
