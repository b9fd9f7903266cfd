"""Stored device peaks: spec-sheet and measured, compute per dtype and memory bandwidth.

One row per (device kind, source, dtype) for compute, with ``dtype`` and ``flops_per_s`` set and
``bytes_per_s`` NULL; one row per (device kind, source) for memory bandwidth, with ``dtype`` NULL,
``bytes_per_s`` set and ``flops_per_s`` NULL; and (measured, CPUs) one per cache level, like a
bandwidth row with its ``level`` and ``capacity_bytes`` set. Spec rows are replaced as a set per
kind; measured
rows as a set per (kind, host).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from operator_db.db.models import DevicePeak


@dataclass(frozen=True)
class PeakFigure:
    """One peak to store: compute for ``dtype`` (FLOP/s), or bandwidth (``dtype`` None, B/s)."""

    dtype: str | None
    value: float
    """FLOP/s (int8: OP/s) for compute, bytes/s for bandwidth."""
    reference: str
    level: str | None = None
    """A cache level's bandwidth (``L2``, ``L3``); None: memory's."""
    capacity_bytes: float | None = None
    """What the cache level holds, bytes (with ``level``)."""


def peak_rows(session: Session, kind_id: int) -> list[DevicePeak]:
    """Return every stored peak of a device kind, oldest first."""
    return list(
        session.scalars(
            select(DevicePeak).where(DevicePeak.device_kind_id == kind_id).order_by(DevicePeak.id)
        )
    )


def has_spec_peaks(session: Session, kind_id: int) -> bool:
    """Say whether spec-sheet peaks are stored for a device kind."""
    found = session.scalar(
        select(DevicePeak.id)
        .where(DevicePeak.device_kind_id == kind_id, DevicePeak.source == "spec")
        .limit(1)
    )
    return found is not None


def replace_peaks(
    session: Session,
    kind_id: int,
    source: str,
    figures: Sequence[PeakFigure],
    *,
    host_id: int | None = None,
) -> list[DevicePeak]:
    """Replace a kind's peaks of ``source``: all of them (``spec``), or one host's (``measured``).

    Flushes; the caller commits.
    """
    where = [DevicePeak.device_kind_id == kind_id, DevicePeak.source == source]
    if source == "measured":
        where.append(
            DevicePeak.host_id.is_(None) if host_id is None else DevicePeak.host_id == host_id
        )
    session.execute(delete(DevicePeak).where(*where))
    rows = [
        DevicePeak(
            device_kind_id=kind_id,
            source=source,
            dtype=f.dtype,
            flops_per_s=f.value if f.dtype is not None else None,
            bytes_per_s=f.value if f.dtype is None else None,
            level=f.level,
            capacity_bytes=f.capacity_bytes,
            reference=f.reference,
            host_id=host_id if source == "measured" else None,
        )
        for f in figures
    ]
    session.add_all(rows)
    session.flush()
    return rows
