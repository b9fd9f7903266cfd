"""Data sources (imported public data sets) and the rows imported from them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import case, func, insert, select
from sqlalchemy.orm import Session

from operator_db.db.models import (
    DataSource,
    DeviceKind,
    FullModelRun,
    Measurement,
    Model,
    ModelOperator,
)

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


@dataclass(frozen=True)
class SourceCount:
    """How many results of one source are stored on one device kind."""

    source_id: int | None
    """The data set (``data_sources.id``); None: operator-db's own measurements."""
    device_kind_id: int
    results: int
    """Per-operator results (``measurements``)."""
    model_runs: int
    """Whole-model runs (``full_model_runs``)."""


def source_counts(session: Session, *, kind_id: int | None = None) -> list[SourceCount]:
    """Return the results and model runs per device kind and source (all kinds, or one), by kind.

    Own measurements come first on a kind, then each data set by id; a source without a result
    or run on a kind has no row. The per-operator results are counted in one pass over the
    lookup index, grouped by kind with a sum per data set (~25 ms for NeuSight's 280,000 results
    on SQLite; grouping by source and kind sorted them all first: 120 ms, and 0.9 s where SQLite
    read them through the (source, identity) index).
    """
    ids = sorted(data_source_names(session))
    per_source = [func.sum(case((Measurement.source_id == i, 1), else_=0)) for i in ids]
    query = select(Measurement.device_kind_id, func.count(), *per_source).group_by(
        Measurement.device_kind_id
    )
    runs_query = select(FullModelRun.device_kind_id, FullModelRun.source_id, func.count()).group_by(
        FullModelRun.device_kind_id, FullModelRun.source_id
    )
    if kind_id is not None:
        query = query.where(Measurement.device_kind_id == kind_id)
        runs_query = runs_query.where(FullModelRun.device_kind_id == kind_id)
    counts: dict[tuple[int, int | None], list[int]] = {}
    for kind, total, *by_source in session.execute(query):
        own = total - sum(by_source)
        for source, n in ((None, own), *zip(ids, by_source, strict=True)):
            if n:
                counts[(kind, source)] = [int(n), 0]
    for kind, source, n in session.execute(runs_query):
        counts.setdefault((kind, source), [0, 0])[1] = int(n)
    ordered = sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1] is not None, kv[0][1] or 0))
    return [SourceCount(source, kind, n, runs) for (kind, source), (n, runs) in ordered]


@dataclass(frozen=True)
class ModelKindFigures:
    """What one model has on one device kind: figures of its configurations, whole-model runs."""

    model: str
    device_kind_id: int
    configs: int
    """Its configurations with a stored result on the kind (own or imported)."""
    configs_own: int
    """Of those, the ones with an own result (which counts before an imported one)."""
    runs: dict[int | None, int]
    """Whole-model runs on the kind per source (None: own)."""


def model_kind_figures(session: Session, names: Sequence[str]) -> list[ModelKindFigures]:
    """Return, for the named models, what each has on each device kind, by model and kind id.

    A kind where a model has neither a configuration's result nor a run has no row. One query
    per kind, its kind known to the planner: each of the models' configurations probes the
    results' lookup index (kind, configuration), and where data sets were imported once more for
    an own result; counted per model without sorting. (One statement over every kind made
    PostgreSQL hash all the results, 0.4 s for one model of NeuSight's database; one with a
    part per kind cost enough to be JIT-compiled, 2.5 x slower than these queries.) 50 models of
    ~75 configurations on NeuSight's eight GPUs: ~40 ms on SQLite and on PostgreSQL; one: ~5 ms.
    """
    if not names:
        return []
    models: dict[int, str] = {
        id_: name
        for id_, name in session.execute(
            select(Model.id, Model.name).where(Model.name.in_(list(names)))
        )
    }
    imports = session.scalar(select(func.count()).select_from(DataSource)) or 0
    configs: dict[tuple[int, int], tuple[int, int]] = {}
    for kind in session.scalars(select(DeviceKind.id).order_by(DeviceKind.id)):
        found = select(Measurement.source_id).where(
            Measurement.device_kind_id == kind, Measurement.config_id == ModelOperator.config_id
        )
        own = found.where(Measurement.source_id.is_(None)).exists()
        rows = session.execute(
            select(
                ModelOperator.model_id,
                func.count(),
                func.sum(case((own, 1), else_=0)) if imports else func.count(),
            )
            .where(ModelOperator.model_id.in_(list(models)), found.exists())
            .group_by(ModelOperator.model_id)
        )
        for model_id, n, n_own in rows:
            configs[(model_id, kind)] = (int(n), int(n_own or 0))
    runs: dict[tuple[int, int], dict[int | None, int]] = {}
    for model_id, kind, source, n in session.execute(
        select(
            FullModelRun.model_id, FullModelRun.device_kind_id, FullModelRun.source_id, func.count()
        )
        .where(FullModelRun.model_id.in_(list(models)))
        .group_by(FullModelRun.model_id, FullModelRun.device_kind_id, FullModelRun.source_id)
    ):
        runs.setdefault((model_id, kind), {})[source] = int(n)
    return [
        ModelKindFigures(
            models[model_id],
            kind,
            *configs.get((model_id, kind), (0, 0)),
            runs.get((model_id, kind), {}),
        )
        for model_id, kind in sorted(
            set(configs) | set(runs), key=lambda mk: (models[mk[0]], mk[1])
        )
    ]


def result_sources(session: Session, ids: Sequence[int]) -> dict[int, int | None]:
    """Return the source (``data_sources.id``, None: own) of the per-operator results ``ids``."""
    if not ids:
        return {}
    rows = session.execute(
        select(Measurement.id, Measurement.source_id).where(Measurement.id.in_(list(ids)))
    )
    return {int(id_): source for id_, source in rows}
