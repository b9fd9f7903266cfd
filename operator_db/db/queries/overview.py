"""What a glance at the database needs: measured models per kind, the newest results."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from operator_db.db.models import DeviceKind, FullModelRun, Measurement, Model, OperatorConfig


def models_measured_per_kind(session: Session) -> dict[str, list[str]]:
    """Return, per device kind name, the names of the models with a measured run on it, sorted.

    A model counts as measured on a kind once a full-model run of it is stored there: what an
    estimate is compared with.
    """
    rows = session.execute(
        select(DeviceKind.name, Model.name)
        .join(FullModelRun, FullModelRun.device_kind_id == DeviceKind.id)
        .join(Model, Model.id == FullModelRun.model_id)
        .distinct()
        .order_by(DeviceKind.name, Model.name)
    )
    found: dict[str, list[str]] = {}
    for kind, model in rows:
        found.setdefault(kind, []).append(model)
    return found


@dataclass(frozen=True)
class NewestResult:
    """One stored measurement, as a list of the newest shows it (times in s, energy in J)."""

    id: int
    config_key: str
    op: str
    device_kind: str
    timing: str
    time_median_s: float
    energy_per_call_j: float | None
    flags: list[str]
    created_at: datetime


def newest_measurements(session: Session, *, limit: int = 20) -> list[NewestResult]:
    """Return the ``limit`` newest measurements (by id: the order they were stored in)."""
    rows = session.execute(
        select(
            Measurement.id,
            OperatorConfig.key,
            OperatorConfig.op,
            DeviceKind.name,
            Measurement.timing,
            Measurement.time_median_s,
            Measurement.energy_per_call_j,
            Measurement.flags,
            Measurement.created_at,
        )
        .join(OperatorConfig, OperatorConfig.id == Measurement.config_id)
        .join(DeviceKind, DeviceKind.id == Measurement.device_kind_id)
        .order_by(Measurement.id.desc())
        .limit(limit)
    )
    return [
        NewestResult(
            id=row[0],
            config_key=row[1],
            op=row[2],
            device_kind=row[3],
            timing=row[4],
            time_median_s=row[5],
            energy_per_call_j=row[6],
            flags=[str(f) for f in row[7] or []],
            created_at=row[8],
        )
        for row in rows
    ]


def measurement_provenance(session: Session, measurement_id: int) -> dict[str, object]:
    """Return one measurement's provenance ({} where it has none or does not exist)."""
    value = session.scalar(select(Measurement.provenance).where(Measurement.id == measurement_id))
    return dict(value or {})
