"""Storing a device kind's peaks: the spec sheet's, and what ``opdb peaks`` measured on a host.

Spec rows are the shipped table's chip (:mod:`operator_db.roofline.chips`); measured rows are one
host's :class:`~operator_db.measure.peaks.MeasuredPeaks`, with its CPU allotment registered on
the host. Reading them back is :mod:`operator_db.roofline.peaks`; the SQL is
:mod:`operator_db.db.queries.peaks`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.models import DeviceKind, DevicePeak
from operator_db.db.queries import PeakFigure
from operator_db.roofline.attained import AttainedRoof, attained_roofs
from operator_db.roofline.chips import ChipPeaks, MatchKind, match_chip, spec_reference
from operator_db.roofline.peaks import (
    CPU_ALLOTMENT,
    SPEC_CHIP,
    KindPeaks,
    highest_flops,
    kind_peaks,
    peaks_for_kind,
)

if TYPE_CHECKING:  # measure imports torch; estimating needs none of it
    from operator_db.measure.peaks import MeasuredPeaks


def _kind(session: Session, device_kind: str | DeviceKind, type_: str | None) -> DeviceKind:
    if isinstance(device_kind, DeviceKind):
        return device_kind
    return queries.get_or_create_device_kind(session, device_kind, type_)


def store_spec_peaks(
    session: Session, chip: ChipPeaks, device_kind: str | DeviceKind, how: MatchKind = "exact"
) -> list[DevicePeak]:
    """Store ``chip``'s spec peaks for a device kind (created if new), replacing its spec rows.

    One row per dtype (``flops_per_s``) and one bandwidth row (``dtype`` NULL, ``bytes_per_s``),
    each with ``reference`` = chip, source and notes (``how`` the kind matched the chip: a
    ``partial`` match is stored as the closest spec-sheet match). The kind's ``info`` records the
    chip, the match and its cores under ``SPEC_CHIP``. A new kind named by a string gets the type
    ``get_or_create_device_kind`` guesses from its name. Flushes; the caller commits.
    """
    kind = _kind(session, device_kind, None)
    kind.info = {
        **(kind.info or {}),
        SPEC_CHIP: {"name": chip.name, "match": how, "cores": chip.cores},
    }
    reference = spec_reference(chip, how)
    figures = [PeakFigure(d, value, reference) for d, value in chip.peak_flops_per_s.items()]
    figures.append(PeakFigure(None, chip.memory_bandwidth_bytes_per_s, reference))
    return queries.replace_peaks(session, kind.id, "spec", figures)


def store_measured_peaks(
    session: Session, kind_name: str, measured: MeasuredPeaks, host_id: int | None = None
) -> list[DevicePeak]:
    """Store measured peaks of a device kind (created if new), replacing this host's earlier ones.

    One row per measured dtype (best FLOP/s) and one bandwidth row (best copy bytes/s) when a copy
    was measured; ``reference`` describes the kernel, its blocks and the median. Rows of other
    hosts of the kind are kept. Flushes; the caller commits.
    """
    kind = _kind(session, kind_name, measured.device_type)
    figures = [
        PeakFigure(dtype, timing.best_per_s, timing.describe())
        for dtype, timing in measured.matmul.items()
    ]
    if measured.copy is not None:
        figures.append(PeakFigure(None, measured.copy.best_per_s, measured.copy.describe()))
    figures += [
        PeakFigure(
            None,
            cache.timing.best_per_s,
            f"{cache.level} ({cache.capacity_bytes} B): {cache.timing.describe()}",
            level=cache.level,
            capacity_bytes=cache.capacity_bytes,
        )
        for cache in measured.caches
    ]
    return queries.replace_peaks(session, kind.id, "measured", figures, host_id=host_id)


def record_peaks(
    session: Session, measured: MeasuredPeaks, *, host_id: int | None = None
) -> KindPeaks:
    """Store what ``opdb peaks`` measured, plus the table's spec peaks if none are stored yet.

    Without ``host_id``, the host named by the provenance (hostname and device id) is registered
    with its CPU allotment, and the measured rows are that host's. Measure first and call this in
    a short transaction afterwards (on SQLite a write transaction holds the database lock).
    Returns the kind's peaks as ``peaks_for_kind`` sees them.
    """
    kind = queries.get_or_create_device_kind(session, measured.kind_name, measured.device_type)
    if host_id is None:
        host_id = _register_host(session, kind, measured.provenance)
    store_measured_peaks(session, kind.name, measured, host_id=host_id)
    found = match_chip(measured.kind_name)
    if found is not None and not queries.has_spec_peaks(session, kind.id):
        store_spec_peaks(session, found.chip, kind, found.how)
    store_attained_roofs(session, kind)
    return peaks_for_kind(session, measured.kind_name)


def store_attained_roofs(session: Session, kind: DeviceKind) -> tuple[AttainedRoof, ...]:
    """Find a GPU kind's attained L2 roof from its stored results and store it (or none).

    Replaces the kind's earlier attained rows: one bandwidth row per level, its derivation as
    JSON in ``reference`` (``AttainedRoof.as_dict``). Finding it reads every result of the kind
    that fits in its L2 (about 50 ms for a NeuSight GPU's 55,000), so it is done once, when
    results arrive in bulk (an import, ``opdb peaks``), never when a roof is read. Flushes.
    """
    known = kind_peaks(session, kind, kind.name)
    roofs = attained_roofs(
        session,
        kind,
        kind.name,
        measured_levels=[c.level for c in known.measured_caches],
        compute_peak=lambda dtype: highest_flops(known, dtype),
    )
    figures = [
        PeakFigure(
            None,
            roof.bytes_per_s,
            json.dumps(roof.as_dict(), sort_keys=True),
            level=roof.level,
            capacity_bytes=roof.capacity_bytes,
        )
        for roof in roofs
    ]
    queries.replace_peaks(session, kind.id, "attained", figures)
    return roofs


def _register_host(session: Session, kind: DeviceKind, provenance: Mapping[str, Any]) -> int | None:
    """Register the host the provenance names (as a worker would) with its CPU allotment.

    Returns its id, or None when the provenance names no host and device. The allotment is
    stored in ``hosts.info`` under ``CPU_ALLOTMENT``, so a reader on another machine scales the
    spec roof to the measuring host's cores, not its own.
    """
    hostname = provenance.get("host")
    device = provenance.get("device")
    device_id = device.get("device_id") if isinstance(device, dict) else None
    if not isinstance(hostname, str) or not isinstance(device_id, str):
        return None
    host = queries.get_or_create_host(session, hostname, device_id, kind.id)
    allotment = provenance.get(CPU_ALLOTMENT)
    if isinstance(allotment, dict):
        host.info = {**(host.info or {}), CPU_ALLOTMENT: allotment}
    session.flush()
    return host.id
