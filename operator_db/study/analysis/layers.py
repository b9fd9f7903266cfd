"""Shares of latency, FLOPs and memory traffic per layer type, forward and backward, per family.

For each base family (a model and its batch sizes, both modes; see
:func:`~operator_db.study.analysis.family_label`) one batch size is studied on one device kind:
the forward from its inference spec (else from its training spec's configurations), the backward
from its training spec. A layer type is a configuration's ``op`` (``torch.nn.Conv2d``,
``torch.nn.functional.softmax``, ...); each quantity is Σ count × per call over the model's
configurations of that type, and its share is that over the sum for the pass.

- **FLOPs**: the spec's forward FLOPs; backward FLOPs for the backward.
- **memory**: compulsory traffic, bytes: the stored ``bytes`` of the forward (inputs, parameters
  and outputs once); for the backward the estimate of :func:`.costs.backward_bytes`.
- **latency**, by the best source there is on the device kind:
  ``measured``: per-operator times (the forward: the configuration's own, or its inference twin's
  for a training spec; the backward: training − forward per call, as
  :func:`~operator_db.study.analysis.forward_backward`), where they cover at least
  ``MEASURED_MIN_COVERAGE`` of the pass's measurable calls (the unmeasured rest is left out);
  else ``roofline bound``: Σ count × max(FLOPs / peak, bytes / bandwidth) at the kind's best
  known peaks; else ``FLOPs share``: the FLOPs pie again.

Layer types under ``OTHER_BELOW`` of every pie of their family are merged into ``other``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.models import DeviceKind, Model, OperatorConfig
from operator_db.roofline.bounds import Peaks
from operator_db.roofline.peaks import best_peaks, kind_peaks
from operator_db.study.analysis import costs
from operator_db.study.analysis.backward import inference_twins
from operator_db.study.analysis.models import (
    family_label,
    family_names,
    kinds_by_id,
    latest_eager_times,
    study_models,
)

LAYER_COST_COLUMNS = [
    "model",
    "mode",
    "op",
    "form",
    "count",
    "flops",
    "flops_backward",
    "bytes_forward",
    "bytes_backward",
    "time_forward_s",
    "time_backward_s",
]
"""Columns of :func:`layer_costs`: one row per (model, configuration), totals = count × per call."""

SHARE_COLUMNS = [
    "family_name",
    "batch_size",
    "device_kind",
    "model",
    "pass",
    "quantity",
    "source",
    "op_type",
    "value",
    "share",
]
"""Columns of :attr:`LayerStudy.shares`: one row per (family, pass, quantity, layer type)."""

PASSES = ("forward", "backward")
QUANTITIES = ("latency", "flops", "memory")
UNITS = {"latency": "s", "flops": "FLOPs", "memory": "bytes"}
"""The unit of ``value`` per quantity."""

MEASURED_MIN_COVERAGE = 0.9
"""Least share of a pass's measurable calls with per-operator times for a measured latency pie."""

OTHER_BELOW = 0.02
"""Layer types under this share in every pie of their family are merged into ``other``."""

OTHER = "other"


def op_type(op: str) -> str:
    """Return a layer type's short name: ``Conv2d``, ``F.softmax``, ``Tensor.add``."""
    if op.startswith("torch.nn.functional."):
        return "F." + op.removeprefix("torch.nn.functional.")
    if op.startswith("torch.Tensor."):
        return op.removeprefix("torch.")
    return op.removeprefix("torch.nn.")


# --- per configuration ------------------------------------------------------------------------


def layer_costs(session: Session, models: Sequence[Model], kind: DeviceKind | None) -> pd.DataFrame:
    """Return each configuration of ``models`` with its count × per-call FLOPs, bytes and times.

    ``flops``/``flops_backward`` FLOPs (NaN unknown), ``bytes_forward`` the compulsory bytes,
    ``bytes_backward`` the backward estimate (training specs; NaN for inference);
    ``time_forward_s`` the measured forward on ``kind`` (an inference spec's own configuration, a
    training spec's inference twin), ``time_backward_s`` training − forward per call × count
    (NaN where either is not measured); opaque configurations have no time.
    """
    configs_of = queries.models_configs(session, [m.id for m in models])
    training = [mc.config for m in models if m.mode == "training" for mc in configs_of[m.id]]
    twins = inference_twins(session, training) if training else {}
    all_ids = [mc.config.id for m in models for mc in configs_of[m.id]]
    times = (
        latest_eager_times(session, [*all_ids, *twins.values()], [kind.id])
        if kind is not None
        else {}
    )

    def time_of(config_id: int | None) -> float:
        if kind is None or config_id is None:
            return math.nan
        return times.get((config_id, kind.id), math.nan)

    records = []
    for model in models:
        for mc in configs_of[model.id]:
            cfg: OperatorConfig = mc.config
            n = mc.count
            opaque = cfg.form == "opaque"
            if model.mode == "training":
                forward = math.nan if opaque else time_of(twins.get(cfg.id))
                step = math.nan if opaque else time_of(cfg.id)
                backward = step - forward
                bwd_bytes = float(n * costs.backward_bytes(cfg.inputs, cfg.outputs, cfg.bytes))
            else:
                forward = math.nan if opaque else time_of(cfg.id)
                backward = bwd_bytes = math.nan
            records.append(
                {
                    "model": model.name,
                    "mode": model.mode,
                    "op": cfg.op,
                    "form": cfg.form,
                    "count": n,
                    "flops": math.nan if cfg.flops is None else float(n * cfg.flops),
                    "flops_backward": math.nan
                    if cfg.flops_backward is None
                    else float(n * cfg.flops_backward),
                    "bytes_forward": math.nan if cfg.bytes is None else float(n * cfg.bytes),
                    "bytes_backward": bwd_bytes,
                    "time_forward_s": n * forward,
                    "time_backward_s": n * backward,
                }
            )
    return pd.DataFrame.from_records(records, columns=LAYER_COST_COLUMNS)


# --- pies -------------------------------------------------------------------------------------


@dataclass
class Pie:
    """One pie before merging: value per layer type, where it comes from, what it leaves out."""

    values: dict[str, float]
    source: str
    note: str | None = None


def _by_type(rows: pd.DataFrame, column: str) -> dict[str, float]:
    kept = rows[rows[column].notna()]
    sums = kept.groupby(kept["op"].map(op_type))[column].sum()
    return {str(k): float(v) for k, v in sums.items()}


def _coverage(rows: pd.DataFrame, column: str) -> float:
    measurable = rows[rows["form"] != "opaque"]
    calls = float(measurable["count"].sum())
    return float(measurable.loc[measurable[column].notna(), "count"].sum()) / calls if calls else 0


def _bound_s(peaks: Peaks, flops_column: str, bytes_column: str) -> Callable[[Any], float]:
    def bound(row: Any) -> float:
        flops, nbytes = row[flops_column], row[bytes_column]
        if (math.isnan(flops) and math.isnan(nbytes)) or row["count"] <= 0:
            return math.nan
        per_call = peaks.bound_s(
            0 if math.isnan(flops) else flops / row["count"],
            0 if math.isnan(nbytes) else nbytes / row["count"],
        )
        return float(row["count"] * per_call)

    return bound


def _latency_pie(
    rows: pd.DataFrame, pass_: str, peaks: Peaks | None, flops_pie: Pie, kind: str | None
) -> Pie:
    """Choose the latency pie's source: measured, else the roofline bound, else FLOPs."""
    time_column = f"time_{pass_}_s"
    coverage = _coverage(rows, time_column)
    if kind is not None and coverage >= MEASURED_MIN_COVERAGE:
        measured = rows[rows[time_column].notna()]
        negative = measured[measured[time_column] < 0]
        values = _by_type(
            measured.assign(**{time_column: measured[time_column].clip(lower=0)}), time_column
        )
        note = None
        if coverage < 1:
            note = f"{coverage:.0%} of the calls measured; the rest is left out"
        if not negative.empty:
            note = (note + "; " if note else "") + (
                f"{len(negative)} configurations with a negative backward (training − forward) "
                "count as 0"
            )
        return Pie(values, f"measured on {kind}", note)
    why = (
        f"per-operator times cover {coverage:.0%} of the calls on {kind}"
        if kind is not None
        else "no device kind"
    )
    if peaks is not None and not rows.empty:
        flops_column = "flops" if pass_ == "forward" else "flops_backward"
        bound = rows.apply(_bound_s(peaks, flops_column, f"bytes_{pass_}"), axis=1)
        values = _by_type(rows.assign(_bound=bound), "_bound")
        return Pie(values, f"roofline bound on {kind}", why)
    return Pie(dict(flops_pie.values), "FLOPs share", why + "; no peaks known for the kind")


def _pies(
    forward_rows: pd.DataFrame | None,
    backward_rows: pd.DataFrame | None,
    peaks: Peaks | None,
    kind: str | None,
) -> dict[tuple[str, str], Pie]:
    pies: dict[tuple[str, str], Pie] = {}
    for pass_, rows in (("forward", forward_rows), ("backward", backward_rows)):
        if rows is None:
            continue
        flops_column = "flops" if pass_ == "forward" else "flops_backward"
        flops = Pie(_by_type(rows, flops_column), "spec FLOPs")
        memory_source = "compulsory bytes" if pass_ == "forward" else "estimated from shapes"
        pies[(pass_, "flops")] = flops
        pies[(pass_, "memory")] = Pie(_by_type(rows, f"bytes_{pass_}"), memory_source)
        pies[(pass_, "latency")] = _latency_pie(rows, pass_, peaks, flops, kind)
    return pies


def merge_small(pies: dict[tuple[str, str], Pie], below: float = OTHER_BELOW) -> set[str]:
    """Return the layer types at or above ``below`` of at least one pie (the others: ``other``)."""
    kept: set[str] = set()
    for pie in pies.values():
        total = sum(v for v in pie.values.values() if v > 0)
        if total > 0:
            kept.update(t for t, v in pie.values.items() if v / total >= below)
    return kept


# --- the study --------------------------------------------------------------------------------


@dataclass
class LayerStudy:
    """Shares per layer type of latency, FLOPs and memory, forward and backward, per family."""

    shares: pd.DataFrame
    """One row per (family, pass, quantity, layer type); ``SHARE_COLUMNS``. Shares sum to 1."""
    device_kind: str | None
    """The kind whose times (or peaks) give the latency pies."""
    notes: list[str] = field(default_factory=list)
    """Per pie, what it leaves out or why it is not measured; and what has no pie."""


def _pick_kind(
    session: Session, kinds: dict[int, DeviceKind], models: Sequence[Model]
) -> DeviceKind | None:
    """Pick the kind with the most per-operator results of the models, then runs, then by name."""
    if not kinds:
        return None
    configs_of = queries.models_configs(session, [m.id for m in models])
    ids = sorted({mc.config.id for cs in configs_of.values() for mc in cs})
    times = latest_eager_times(session, ids, list(kinds))
    runs = queries.model_figures(session, [m.id for m in models], list(kinds), timing="eager")
    score: dict[int, tuple[int, int]] = {}
    for kind_id in kinds:
        score[kind_id] = (
            sum(1 for _, k in times if k == kind_id),
            sum(1 for _, k, _ in runs if k == kind_id),
        )
    best = sorted(kinds, key=lambda k: (-score[k][0], -score[k][1], kinds[k].name))[0]
    return kinds[best]


def layer_study(
    session: Session,
    *,
    device_kinds: Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    dtype: str | None = None,
) -> LayerStudy:
    """Return the per-layer-type shares of every base family of ``models`` (default: all).

    One batch size per family: the largest that has a training spec (with its inference twin if
    there is one), else the largest. One device kind for every latency pie: of ``device_kinds``
    (default: all), the one with the most per-operator results of these models, then the most
    full-model runs; its best peaks for ``dtype`` (default: the studied models' most common dtype;
    :func:`~operator_db.roofline.peaks.best_peaks`) give the roofline-bound shares. See the
    module docstring for the sources and units.

    Raises:
        NotFoundError: a named device kind or model does not exist.
    """
    kinds = kinds_by_id(session, device_kinds)
    chosen = study_models(session, models)
    notes: list[str] = []
    if not chosen:
        notes.append("no model in the study: no layer shares")
        return LayerStudy(pd.DataFrame(columns=SHARE_COLUMNS), None, notes)
    frame = pd.DataFrame(
        {
            "model": [m.name for m in chosen],
            "base_family": [family_label(m, with_mode=False) for m in chosen],
        }
    )
    names = family_names(frame, column="base_family", strip_mode=True)
    families: dict[str, list[Model]] = {}
    for model in chosen:
        families.setdefault(names[family_label(model, with_mode=False)], []).append(model)
    picked: dict[str, tuple[int | None, Model | None, Model | None]] = {}
    for name, members in families.items():
        sizes = [m.batch_size or 0 for m in members if m.mode == "training"]
        size = max(sizes) if sizes else max(m.batch_size or 0 for m in members)
        at = [m for m in members if (m.batch_size or 0) == size]
        inf = next((m for m in at if m.mode == "inference"), None)
        train = next((m for m in at if m.mode == "training"), None)
        picked[name] = (size or None, inf, train)
    studied = [m for _, inf, train in picked.values() for m in (inf, train) if m is not None]
    kind = _pick_kind(session, kinds, studied)
    dtype = dtype or Counter(m.dtype for m in studied).most_common(1)[0][0]
    peaks = None if kind is None else best_peaks(kind_peaks(session, kind, kind.name), dtype)
    costs_frame = layer_costs(session, studied, kind)
    kind_name = None if kind is None else kind.name
    records: list[dict[str, Any]] = []
    for name in sorted(picked):
        batch, inf, train = picked[name]
        fwd_model = inf or train
        assert fwd_model is not None
        forward_rows = costs_frame[costs_frame["model"] == fwd_model.name]
        backward_rows = None if train is None else costs_frame[costs_frame["model"] == train.name]
        if train is None:
            notes.append(f"{name}: no training spec, no backward pies")
        pies = _pies(forward_rows, backward_rows, peaks, kind_name)
        kept = merge_small(pies)
        for (pass_, quantity), pie in pies.items():
            pie_model = fwd_model if pass_ == "forward" else train
            assert pie_model is not None
            merged: dict[str, float] = {}
            for t, v in pie.values.items():
                if v > 0:
                    key = t if t in kept else OTHER
                    merged[key] = merged.get(key, 0.0) + v
            total = sum(merged.values())
            if pie.note:
                notes.append(f"{name} {pass_} latency: {pie.note}")
            if total <= 0:
                notes.append(f"{name} {pass_} {quantity}: nothing to share (all zero or unknown)")
                continue
            for t in sorted(merged, key=lambda t: (t == OTHER, -merged[t], t)):
                records.append(
                    {
                        "family_name": name,
                        "batch_size": batch,
                        "device_kind": kind_name if quantity == "latency" else None,
                        "model": pie_model.name,
                        "pass": pass_,
                        "quantity": quantity,
                        "source": pie.source,
                        "op_type": t,
                        "value": merged[t],
                        "share": merged[t] / total,
                    }
                )
    shares = pd.DataFrame.from_records(records, columns=SHARE_COLUMNS)
    shares["batch_size"] = shares["batch_size"].astype("Int64")
    return LayerStudy(shares, kind_name, notes)
