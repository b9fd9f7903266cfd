"""What a kept figure depends on: a version of the rows a model's roofline is drawn from."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from operator_db.db.models import DevicePeak, FullModelRun, Measurement, NcuCounter


def roofline_version(session: Session, kind_id: int) -> tuple[object, ...]:
    """Return what changes when a roofline on kind ``kind_id`` may change; cheap to read.

    The newest per-operator result's id and the newest whole-model run's id (any kind: a new one
    anywhere may be the newest figure of a configuration of the model), the kind's peaks as
    stored (their values: replaced peaks may reuse SQLite's ids) and its newest Nsight Compute
    counters' id. Each is a primary key's end or a handful of rows.
    """
    peaks = session.execute(
        select(
            DevicePeak.source,
            DevicePeak.dtype,
            DevicePeak.flops_per_s,
            DevicePeak.bytes_per_s,
            DevicePeak.level,
            DevicePeak.capacity_bytes,
        )
        .where(DevicePeak.device_kind_id == kind_id)
        .order_by(DevicePeak.id)
    ).all()
    counters = select(func.max(NcuCounter.id)).where(NcuCounter.device_kind_id == kind_id)
    return (
        session.scalar(select(func.max(Measurement.id))) or 0,
        session.scalar(select(func.max(FullModelRun.id))) or 0,
        tuple(tuple(row) for row in peaks),
        session.scalar(counters) or 0,
    )
