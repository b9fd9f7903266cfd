"""Result rows of imported figures: a configuration's time per call, or a whole model's run.

A data set's figure is one time, measured by the data set's method (``data_sources.method``):
no energy, no samples, no host or job. Its identity within the data set (``source_ref``, a digest
of what it says) makes an import run twice add nothing (``queries.imported_refs``).
"""

from __future__ import annotations

import hashlib
from typing import Any

from operator_db.db.models import utcnow

NO_ENERGY = "not in the data set"


def identity(*parts: object) -> str:
    """Return a row's identity within its data set: a digest of what identifies it.

    A float is written at 12 significant digits, so that a figure written twice with other
    digits is still the same figure.
    """
    text = "\x1f".join(f"{p:.12g}" if isinstance(p, float) else str(p) for p in parts)
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def imported_columns(
    time_s: float,
    *,
    kind_id: int,
    source_id: int,
    ref: str,
    provenance: dict[str, Any],
    dtype: str = "float32",
) -> dict[str, Any]:
    """Return the columns a ``measurements`` or ``full_model_runs`` row of a data set shares."""
    return {
        "device_kind_id": kind_id,
        "host_id": None,
        "job_id": None,
        "source_id": source_id,
        "source_ref": ref,
        "dtype": dtype,
        "timing": "eager",
        "cache_mode": "warm",
        "threads": None,
        "calls_per_block": 1,
        "blocks": 1,
        "time_median_s": time_s,
        "time_mean_s": time_s,
        "time_iqr_s": 0.0,
        "time_cv": 0.0,
        "trials": 0,
        "energy_unavailable": NO_ENERGY,
        "flags": [],
        "raw": {},
        "provenance": provenance,
        "created_at": utcnow(),
    }


def run_row(model_id: int, time_s: float, **columns: Any) -> dict[str, Any]:
    """Return a ``full_model_runs`` row: a model's time per call (no hollow run, no replay).

    ``columns``: :func:`imported_columns`' keyword arguments.
    """
    return {
        "model_id": model_id,
        **imported_columns(time_s, **columns),
        "hollow_time_s": None,
        "hollow_host_time_s": None,
        "replay": None,
    }


def measurement_row(config_id: int, time_s: float, **columns: Any) -> dict[str, Any]:
    """Return a ``measurements`` row: a configuration's time per call."""
    return {"config_id": config_id, **imported_columns(time_s, **columns)}
