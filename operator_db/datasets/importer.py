"""Import a data set's rows into the store: one transaction, idempotent, every row accounted for.

Each per-operator row becomes a result (``measurements``) of its configuration on its device
kind, tagged with the data set (``source_id``) and the row's identity there (``source_ref``, see
:meth:`OpRow.identity`): a second run finds every identity stored and adds nothing. The
configurations go through the one ingest path (``db.ingest.store_configs``); the device kinds
get the spec sheet of their chip (``roofline/peaks.yaml``) where it has one. The caller owns the
transaction: a refused import (a bad row with ``on_bad="refuse"``) raises before it commits, so
nothing is half-written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from operator_db.datasets.records import BadRow, DataSet, FileCounts, KindInfo, OnBad, OpRow
from operator_db.datasets.runs import measurement_row
from operator_db.db import queries
from operator_db.db.ingest import store_configs
from operator_db.db.models import DeviceKind
from operator_db.errors import InvalidInputError
from operator_db.roofline.chips import match_chip
from operator_db.roofline.record import store_attained_roofs, store_spec_peaks
from operator_db.specs.schema import OperatorSpec

BAD_ROWS_SHOWN = 20
"""Bad rows a refusal's message lists (all are in :attr:`ImportReport.bad`)."""

Progress = Callable[[str, int], None]
"""Told each file's name and how many rows it read, as the import goes."""


class ImportRefusedError(InvalidInputError):
    """The data set has bad rows and the import was asked to refuse them all."""


@dataclass
class ImportReport:
    """What one import did: per file, its counts; the bad rows; the kinds and the source."""

    source: str
    files: list[FileCounts] = field(default_factory=list)
    bad: list[BadRow] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    new_configs: int = 0

    def total(self) -> FileCounts:
        """Return the counts summed over the files."""
        out = FileCounts("total")
        for counts in self.files:
            out.read += counts.read
            out.imported += counts.imported
            out.duplicate += counts.duplicate
            out.skipped += counts.skipped
        return out


def _provenance(data: DataSet, file: str, row: OpRow) -> dict[str, Any]:
    return {"source": data.source.name, "file": file, "line": row.line, **row.details()}


def ensure_kind(session: Session, info: KindInfo, source: str) -> DeviceKind:
    """Return the device kind of a data set's device, with what the data set says of it.

    A new kind takes the vendor, architecture and memory given; its ``info`` keeps the data
    set's own view under the data set's name. Where ``roofline/peaks.yaml`` has the chip, its
    spec peaks are stored (replacing the kind's earlier spec rows). Flushes.
    """
    kind = queries.get_or_create_device_kind(session, info.name, "gpu")
    kind.vendor = kind.vendor or info.vendor
    kind.architecture = kind.architecture or info.architecture
    kind.memory_bytes = kind.memory_bytes or info.memory_bytes
    if info.info and (kind.info or {}).get(source) != info.info:
        kind.info = {**(kind.info or {}), source: info.info}
    found = match_chip(info.name)
    if found is not None and found.how == "exact":
        store_spec_peaks(session, found.chip, kind, found.how)
    session.flush()
    return kind


def import_data_set(
    session: Session,
    data: DataSet,
    *,
    on_bad: OnBad = "skip",
    files: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    """Import a data set's per-operator rows (``files``: some of its files; default all).

    Flushes, never commits.

    Raises:
        ImportRefusedError: ``on_bad="refuse"`` and a row is bad (every file is read first, so
            that the message counts them all).
    """
    source = queries.get_or_update_data_source(session, data.source.name, data.source.columns())
    report = ImportReport(data.source.name)
    kinds = {info.name: ensure_kind(session, info, data.source.name) for info in data.kinds()}
    report.kinds = sorted(kinds)
    stored = queries.imported_refs(session, source.id)
    seen: set[str] = set()
    for file in files if files is not None else data.files():
        counts = FileCounts(file)
        report.files.append(counts)
        pending: list[tuple[OpRow, OperatorSpec, str]] = []
        for row in data.read(file):
            counts.read += 1
            if isinstance(row, BadRow):
                counts.skipped += 1
                report.bad.append(row)
                continue
            if row.device not in kinds:
                counts.skipped += 1
                report.bad.append(BadRow(file, row.line, f"unknown device {row.device!r}"))
                continue
            identity = row.identity()
            if identity in stored or identity in seen:
                counts.duplicate += 1
                continue
            built = row.build()
            if isinstance(built, str):
                counts.skipped += 1
                report.bad.append(BadRow(file, row.line, built))
                continue
            seen.add(identity)
            pending.append((row, *built))
        if on_bad == "skip" or not report.bad:
            counts.imported = _write(session, data, file, pending, kinds, source.id, report)
        if progress is not None:
            progress(file, counts.read)
    for kind in kinds.values():  # the kinds' L2 roofs, attained by what is now stored
        store_attained_roofs(session, kind)
    if on_bad == "refuse" and report.bad:
        shown = "; ".join(str(b) for b in report.bad[:BAD_ROWS_SHOWN])
        more = len(report.bad) - BAD_ROWS_SHOWN
        raise ImportRefusedError(
            f"{len(report.bad)} bad rows, import refused (nothing written): {shown}"
            + (f"; and {more} more" if more > 0 else "")
        )
    return report


def _write(
    session: Session,
    data: DataSet,
    file: str,
    rows: list[tuple[OpRow, OperatorSpec, str]],
    kinds: dict[str, DeviceKind],
    source_id: int,
    report: ImportReport,
) -> int:
    """Store one file's new rows: their configurations first, then their results."""
    if not rows:
        return 0
    configs = {key: (key, config, row.mode) for row, config, key in rows}
    stored = store_configs(session, list(configs.values()))
    ids = stored.ids
    report.new_configs += stored.new
    results = [
        measurement_row(
            ids[key],
            row.time_s,
            kind_id=kinds[row.device].id,
            source_id=source_id,
            ref=row.identity(),
            provenance=_provenance(data, file, row),
            dtype=config.dtype or (config.inputs[0].dtype if config.inputs else "float32"),
        )
        for row, config, key in rows
    ]
    return queries.add_results(session, "measurements", results)
