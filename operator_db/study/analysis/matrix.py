"""Every model of a study, measured or not: the run matrix and the complexity table.

Conventions (units, which results, NaN for what is not measured): see
:mod:`operator_db.study.analysis`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.study.analysis.costs import model_totals, step_figures
from operator_db.study.analysis.models import (
    family_label,
    family_names,
    kinds_by_id,
    safe_ratio,
    study_models,
)

COMPLEXITY_TABLE_COLUMNS = [
    "model",
    "family",
    "base_family",
    "family_name",
    "mode",
    "dtype",
    "batch_size",
    "flops",
    "flops_backward",
    "step_flops",
    "params",
    "activation_bytes",
    "bytes_forward",
    "bytes_backward",
    "step_bytes",
    "intensity",
]
"""Columns of :func:`complexity_table`."""

RUN_COLUMNS = [
    "model",
    "base_family",
    "family_name",
    "mode",
    "batch_size",
    "device_kind",
    "device_type",
    "status",
    "latency_s",
    "error",
]
"""Columns of :func:`run_matrix`."""

RUN_STATUSES = ("measured", "failed", "running", "queued", "cancelled", "not measured")
"""What :func:`run_matrix` says of a (model, device kind): a run, else its newest job's state."""


# --- the complexity table ---------------------------------------------------------------------


def complexity_table(session: Session, *, models: Sequence[str] | None = None) -> pd.DataFrame:
    """Return the complexity of every model (measured or not) from its spec, one row per model.

    Columns (``COMPLEXITY_TABLE_COLUMNS``): ``flops``, ``flops_backward`` and ``step_flops`` as
    in :func:`model_table` (FLOPs); ``params`` distinct parameters (elements);
    ``activation_bytes`` Σ count × bytes of a call's outputs, views excluded (the activations the
    forward writes, bytes); ``bytes_forward`` Σ count × compulsory bytes of the forward;
    ``bytes_backward`` the estimated compulsory bytes of the backward (training specs, else 0;
    see :mod:`.costs`); ``step_bytes`` those of one call (forward, + backward in training);
    ``intensity`` ``step_flops / step_bytes`` (FLOP/byte). Sorted by family name, mode, batch.

    Raises:
        NotFoundError: a named model does not exist.
    """
    chosen = study_models(session, models)
    if not chosen:
        return pd.DataFrame(columns=COMPLEXITY_TABLE_COLUMNS)
    configs_of = queries.models_configs(session, [m.id for m in chosen])
    records = []
    for model in chosen:
        totals = model_totals(model, configs_of[model.id])
        step, step_bytes = step_figures(model.mode, totals)
        records.append(
            {
                "model": model.name,
                "family": family_label(model),
                "base_family": family_label(model, with_mode=False),
                "mode": model.mode,
                "dtype": model.dtype,
                "batch_size": model.batch_size,
                "flops": totals.flops,
                "flops_backward": math.nan
                if totals.flops_backward is None
                else totals.flops_backward,
                "step_flops": step,
                "params": totals.params,
                "activation_bytes": totals.activation_bytes,
                "bytes_forward": totals.bytes_forward,
                "bytes_backward": totals.bytes_backward if model.mode == "training" else 0,
                "step_bytes": step_bytes,
                "intensity": safe_ratio(step, step_bytes),
            }
        )
    frame = pd.DataFrame.from_records(records)
    frame["family_name"] = frame["base_family"].map(
        family_names(frame, column="base_family", strip_mode=True)
    )
    frame["batch_size"] = frame["batch_size"].astype("Int64")
    frame = frame.sort_values(["family_name", "mode", "batch_size", "model"], ignore_index=True)
    return frame[COMPLEXITY_TABLE_COLUMNS]


# --- the run matrix ---------------------------------------------------------------------------


def run_matrix(
    session: Session,
    *,
    device_kinds: Sequence[str] | None = None,
    models: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Return what is measured of each model on each device kind: one row per (model, kind).

    ``status`` is ``measured`` where a full-model run (latest eager) is stored, with its
    ``latency_s``; else the state of the newest whole-model job there: ``failed`` (``error`` its
    last error), ``running``, ``queued``, ``cancelled``; else ``not measured`` (no job, or a job
    done without an eager run). ``family_name`` names the base family (both modes, see
    :func:`family_names`). Every study model × every kind (default: all of both).

    Raises:
        NotFoundError: a named device kind or model does not exist.
    """
    kinds = kinds_by_id(session, device_kinds)
    chosen = study_models(session, models)
    if not chosen or not kinds:
        return pd.DataFrame(columns=RUN_COLUMNS)
    ids = [m.id for m in chosen]
    runs = {
        (model_id, kind_id): figure.time_median_s
        for (model_id, kind_id, _), figure in queries.model_figures(
            session, ids, list(kinds), timing="eager"
        ).items()
    }
    jobs = queries.model_job_states(session, ids, list(kinds))
    records = []
    for model in chosen:
        for kind_id, kind in kinds.items():
            latency = runs.get((model.id, kind_id))
            job = jobs.get((model.id, kind_id))
            if latency is not None:
                status, error = "measured", None
            elif job is not None and job.status in RUN_STATUSES:
                status, error = job.status, job.last_error if job.status == "failed" else None
            else:
                status, error = "not measured", None
            records.append(
                {
                    "model": model.name,
                    "base_family": family_label(model, with_mode=False),
                    "mode": model.mode,
                    "batch_size": model.batch_size,
                    "device_kind": kind.name,
                    "device_type": kind.type,
                    "status": status,
                    "latency_s": math.nan if latency is None else latency,
                    "error": error,
                }
            )
    frame = pd.DataFrame.from_records(records)
    frame["family_name"] = frame["base_family"].map(
        family_names(frame, column="base_family", strip_mode=True)
    )
    frame["batch_size"] = frame["batch_size"].astype("Int64")
    frame = frame.sort_values(
        ["device_kind", "family_name", "mode", "batch_size", "model"], ignore_index=True
    )
    return frame[RUN_COLUMNS]
