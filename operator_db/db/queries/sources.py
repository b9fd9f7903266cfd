"""Data sources (imported public data sets) and the rows imported from them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from operator_db.db.models import DataSource, FullModelRun, Measurement

_CHUNK = 2000


def get_or_update_data_source(session: Session, name: str, fields: Mapping[str, Any]) -> DataSource:
    """Return the data source ``name``, created or brought up to ``fields``; flushes.

    ``fields`` are :class:`DataSource` columns (``title``, ``url``, ``version``, ``license``,
    ``citation``, ``method``, ``info``).
    """
    source = session.scalars(select(DataSource).where(DataSource.name == name)).one_or_none()
    if source is None:
        source = DataSource(name=name, **fields)
        session.add(source)
    else:
        for column, value in fields.items():
            if getattr(source, column) != value:
                setattr(source, column, value)
    session.flush()
    return source


def data_sources(session: Session) -> list[DataSource]:
    """Return every data source, by name."""
    return list(session.scalars(select(DataSource).order_by(DataSource.name)))


def data_source_names(session: Session) -> dict[int, str]:
    """Return every data source's name by id (a figure's ``source_id`` → what to print)."""
    return {id_: name for id_, name in session.execute(select(DataSource.id, DataSource.name))}


def imported_refs(session: Session, source_id: int, table: str = "measurements") -> set[str]:
    """Return the identities (``source_ref``) of the rows already imported from a source.

    ``table``: ``measurements`` or ``full_model_runs``.
    """
    column = (Measurement if table == "measurements" else FullModelRun).source_ref
    found = session.scalars(
        select(column).where(column.is_not(None), _source_column(table) == source_id)
    )
    return {str(ref) for ref in found}


def _source_column(table: str) -> Any:
    return (Measurement if table == "measurements" else FullModelRun).source_id


def add_results(session: Session, table: str, rows: Sequence[Mapping[str, Any]]) -> int:
    """Insert result rows (``measurements`` or ``full_model_runs`` columns) in bulk; flushes.

    Returns the rows inserted. The caller has left out rows already imported
    (:func:`imported_refs`); a repeat would break the unique (source, identity) constraint.
    """
    model = Measurement if table == "measurements" else FullModelRun
    for start in range(0, len(rows), _CHUNK):
        session.execute(insert(model), list(rows[start : start + _CHUNK]))
    session.flush()
    return len(rows)


def results_per_source(session: Session) -> dict[tuple[int | None, int], int]:
    """Return the number of stored per-operator results per (source id or None, device kind id)."""
    rows = session.execute(
        select(Measurement.source_id, Measurement.device_kind_id, func.count()).group_by(
            Measurement.source_id, Measurement.device_kind_id
        )
    )
    return {(source, kind): int(n) for source, kind, n in rows}
