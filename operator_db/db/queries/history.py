"""A target's results over time, for ``opdb diff``: what ran when, where, and with what."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, cast

from sqlalchemy import select
from sqlalchemy.orm import Session

from operator_db.db.models import FullModelRun, Host, Measurement, as_utc


@dataclass(frozen=True)
class Result:
    """One stored result of a configuration or a model, as a comparison reads it."""

    id: int
    created_at: datetime
    time_median_s: float
    time_low_s: float | None
    time_high_s: float | None
    time_ci_level: float | None
    samples: list[float]
    """The per-call time of each block, s (empty where the raw samples were not kept)."""
    host: str | None
    driver_version: str | None
    torch_version: str | None
    flags: list[str]
    imported: bool


def results_of(
    session: Session,
    target: Literal["config", "model"],
    target_id: int,
    kind_id: int,
    *,
    timing: str = "eager",
    cache_mode: str = "warm",
) -> list[Result]:
    """Return every result of a configuration (or a model) on a kind, newest first."""
    table: type[Measurement] | type[FullModelRun] = (
        Measurement if target == "config" else FullModelRun
    )
    column = Measurement.config_id if target == "config" else FullModelRun.model_id
    rows = session.execute(
        select(table, Host.hostname)
        .outerjoin(Host, Host.id == table.host_id)
        .where(
            column == target_id,
            table.device_kind_id == kind_id,
            table.timing == timing,
            table.cache_mode == cache_mode,
        )
        .order_by(table.created_at.desc(), table.id.desc())
    ).all()
    out = []
    for found, host in rows:
        row = cast(Measurement | FullModelRun, found)
        prov = row.provenance or {}
        device = prov.get("device") if isinstance(prov.get("device"), dict) else {}
        out.append(
            Result(
                id=row.id,
                created_at=as_utc(row.created_at),
                time_median_s=row.time_median_s,
                time_low_s=row.time_low_s,
                time_high_s=row.time_high_s,
                time_ci_level=row.time_ci_level,
                samples=_samples(row.raw or {}),
                host=host,
                driver_version=prov.get("driver_version") or (device or {}).get("driver_version"),
                torch_version=prov.get("torch_version"),
                flags=[str(f) for f in (row.flags or [])],
                imported=row.source_id is not None,
            )
        )
    return out


def _samples(raw: dict[str, object]) -> list[float]:
    """Return the eager per-call times of a result's raw samples (empty where not kept)."""
    for timing in raw.get("timings") or []:  # type: ignore[attr-defined]
        if isinstance(timing, dict) and timing.get("method") == "eager":
            calls = int(timing.get("calls_per_block") or 1)
            return [float(b) / calls for b in timing.get("block_s") or []]
    return []
