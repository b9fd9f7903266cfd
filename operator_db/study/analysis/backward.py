"""Backward against forward, in FLOPs and in time, for the training models.

A training configuration's measurement is one forward + backward per call; its inference twin (the
same canonical form in mode ``inference``) measured on the same kind gives the forward alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pydantic import ValidationError
from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.models import OperatorConfig
from operator_db.specs.keys import operator_key
from operator_db.study.analysis.models import (
    family_names,
    kinds_by_id,
    latest_eager_times,
    safe_ratio,
    study_models,
)

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

RUN_FB_COLUMNS = [
    "family_name",
    "batch_size",
    "device_kind",
    "training_model",
    "inference_model",
    "latency_training_s",
    "latency_forward_s",
    "time_backward_s",
    "time_ratio",
    "flops_forward",
    "flops_backward",
    "flops_ratio",
]
"""Columns of :attr:`RunForwardBackward.pairs`."""


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
    session: Session,
    *,
    device_kinds: Sequence[str] | None = None,
    models: Sequence[str] | None = None,
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
    the model's measurable calls that entered each sum. ``models`` restricts the study to those
    of the named models that are training specs (default: all).

    Raises:
        NotFoundError: a named device kind or model does not exist.
    """
    kinds = kinds_by_id(session, device_kinds)
    training = study_models(session, models, mode="training")
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
    times = latest_eager_times(session, [*configs, *twins.values()], list(kinds))
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
            "flops_ratio": safe_ratio(bwd_flops, fwd_flops),
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
                    "time_ratio": safe_ratio(backward, fwd),
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
            "flops_ratio": safe_ratio(flops_bwd, flops_fwd),
            "flops_coverage": safe_ratio(float(both["count"].sum()), float(calls)),
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
                    "time_ratio": safe_ratio(train - fwd, fwd) if has else math.nan,
                    "time_coverage": safe_ratio(float(ok["count"].sum()), float(calls)),
                }
            )
    return pd.DataFrame.from_records(records, columns=FB_MODEL_COLUMNS)


@dataclass
class RunForwardBackward:
    """Backward against forward from whole-model runs: training specs and their inference twins."""

    pairs: pd.DataFrame
    """One row per (training model, device kind) with a twin measured there; ``RUN_FB_COLUMNS``."""
    notes: list[str] = field(default_factory=list)


def run_forward_backward(table: pd.DataFrame) -> RunForwardBackward:
    """Pair each measured training spec with its inference twin's run on the same device kind.

    ``table`` is a :func:`~operator_db.study.analysis.model_table`. The twin is the inference
    spec of the same base family (reference, overrides, dtype and inputs; see
    ``family_label(with_mode=False)``) and batch size. A training run times one step (forward,
    backward and the optimizer step), so ``time_backward_s = latency_training_s −
    latency_forward_s`` (s; it holds the optimizer step too, and the twin runs in eval mode
    without autograd) and ``time_ratio = time_backward_s / latency_forward_s``. FLOPs come from
    the training spec: ``flops_ratio = flops_backward / flops_forward``. Notes say which training
    runs found no twin.
    """
    notes: list[str] = []
    training = table[table["mode"] == "training"]
    if training.empty:
        notes.append(
            "no training spec has a full-model run: harvest `<model>-train-b<N>` specs "
            "(`--mode training`) and measure them to fill this section"
        )
        return RunForwardBackward(pd.DataFrame(columns=RUN_FB_COLUMNS), notes)
    inference = table[table["mode"] == "inference"]
    twins = {
        (row.base_family, row.batch_size, row.device_kind): row
        for row in inference.itertuples(index=False)
    }
    names = family_names(table, column="base_family", strip_mode=True)
    records = []
    lonely: list[str] = []
    for row in training.itertuples(index=False):
        twin = twins.get((row.base_family, row.batch_size, row.device_kind))
        if twin is None:
            lonely.append(f"{row.model} on {row.device_kind}")
            continue
        backward = float(row.latency_s) - float(twin.latency_s)
        flops_bwd = float(row.flops_backward)
        records.append(
            {
                "family_name": names[str(row.base_family)],
                "batch_size": row.batch_size,
                "device_kind": row.device_kind,
                "training_model": row.model,
                "inference_model": twin.model,
                "latency_training_s": float(row.latency_s),
                "latency_forward_s": float(twin.latency_s),
                "time_backward_s": backward,
                "time_ratio": safe_ratio(backward, float(twin.latency_s)),
                "flops_forward": float(row.flops),
                "flops_backward": flops_bwd,
                "flops_ratio": safe_ratio(flops_bwd, float(row.flops)),
            }
        )
    if lonely:
        notes.append(
            "training runs without a measured inference twin (same family and batch size, on "
            "the same device kind): " + ", ".join(sorted(lonely))
        )
    pairs = pd.DataFrame.from_records(records, columns=RUN_FB_COLUMNS)
    if pairs.empty:
        notes.append("no training run has its inference twin measured on the same device kind")
    pairs = pairs.sort_values(["family_name", "batch_size", "device_kind"], ignore_index=True)
    return RunForwardBackward(pairs, notes)
