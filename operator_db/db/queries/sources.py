"""Data sources (imported public data sets) and the rows imported from them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import case, func, insert, select, true
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


@dataclass(frozen=True)
class ResultCounts:
    """Per-operator results per (device kind id, source id or None: own), up to a result id."""

    through_id: int
    """The newest result counted: results are counted by id, a later count adds those after."""
    counts: dict[tuple[int, int | None], int]

    def plus(self, later: ResultCounts) -> ResultCounts:
        """Return these counts with a later count's added (:func:`count_results`, ``after_id``)."""
        counts = dict(self.counts)
        for key, n in later.counts.items():
            counts[key] = counts.get(key, 0) + n
        return ResultCounts(max(self.through_id, later.through_id), counts)


def count_results(
    session: Session, *, kind_id: int | None = None, after_id: int = 0
) -> ResultCounts:
    """Count the per-operator results per device kind and source (all kinds, or one).

    ``after_id``: only the results stored after that one (by id), for a count kept up to date.
    One statement, so that ``through_id`` is the newest result of the same snapshot: one pass
    over the lookup index, grouped by kind with a sum per data set (NeuSight's 280,000 results:
    ~35 ms on SQLite, ~60 ms on PostgreSQL; grouping by source and kind sorted them all first:
    120 ms, and 0.9 s where SQLite read them through the (source, identity) index); after an id,
    a range of the primary key.
    """
    ids = sorted(data_source_names(session))
    per_source = [func.sum(case((Measurement.source_id == i, 1), else_=0)) for i in ids]
    newest = (
        func.max(Measurement.id) if after_id else select(func.max(Measurement.id)).scalar_subquery()
    )
    # After an id: grouped by an expression, which no index orders, so that SQLite reads the
    # primary key's range (grouped by the column, it scanned the whole lookup index instead).
    kind = Measurement.device_kind_id + 0 if after_id else Measurement.device_kind_id
    query = select(kind, newest, func.count(), *per_source).group_by(kind)
    if after_id:
        query = query.where(Measurement.id > after_id)
    if kind_id is not None:
        query = query.where(Measurement.device_kind_id == kind_id)
    through, counts = after_id, {}
    for kind, last, total, *by_source in session.execute(query):
        through = max(through, int(last or 0))
        for source, n in ((None, total - sum(by_source)), *zip(ids, by_source, strict=True)):
            if n:
                counts[(int(kind), source)] = int(n)
    return ResultCounts(through, counts)


def newest_result_id(session: Session) -> int:
    """Return the id of the newest per-operator result (0 where none): the primary key's end."""
    return int(session.scalar(select(func.max(Measurement.id))) or 0)


def source_counts(
    session: Session, *, kind_id: int | None = None, results: ResultCounts | None = None
) -> list[SourceCount]:
    """Return the results and model runs per device kind and source (all kinds, or one), by kind.

    Own measurements come first on a kind, then each data set by id; a source without a result
    or run on a kind has no row. ``results``: the per-operator counts, where the caller keeps
    them up to date (default: :func:`count_results` now); the whole-model runs, few, are
    counted now.
    """
    counted = results if results is not None else count_results(session, kind_id=kind_id)
    runs_query = select(FullModelRun.device_kind_id, FullModelRun.source_id, func.count()).group_by(
        FullModelRun.device_kind_id, FullModelRun.source_id
    )
    if kind_id is not None:
        runs_query = runs_query.where(FullModelRun.device_kind_id == kind_id)
    counts = {key: [n, 0] for key, n in counted.counts.items() if n}
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

    A kind where a model has neither a configuration's result nor a run has no row (how the
    configurations are counted: :func:`_configs_with_results`).
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
    for kind, model_id, n, n_own in _configs_with_results(session, list(models), imports > 0):
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


_FEW_MODELS = 4
"""Up to this many models, one statement over every kind; beyond, one per kind."""


def _configs_with_results(
    session: Session, model_ids: list[int], imports: bool
) -> list[tuple[int, int, int, int]]:
    """Return (kind id, model id, configurations with a result, those with an own one).

    Each of the models' configurations probes the results' lookup index (kind, configuration)
    per kind, and where data sets were imported (``imports``) once more for an own result. A few
    models: one statement over every kind, its probes in the select list (~1 ms for one model;
    as a filter, PostgreSQL hashed every result instead: 0.4 s). More: one query per kind, its
    kind known to the planner, counted per model without sorting (50 models, ~75 configurations
    each, on NeuSight's eight GPUs: ~40 ms on SQLite and on PostgreSQL, where one statement
    took twice that, and with a part per kind was costly enough to be JIT-compiled).
    """

    def probes(kind: Any) -> tuple[Any, Any]:
        found = select(Measurement.source_id).where(
            Measurement.device_kind_id == kind, Measurement.config_id == ModelOperator.config_id
        )
        return found.exists(), found.where(Measurement.source_id.is_(None)).exists()

    if len(model_ids) <= _FEW_MODELS:
        found, own = probes(DeviceKind.id)
        with_results = func.sum(case((found, 1), else_=0))
        rows = session.execute(
            select(
                DeviceKind.id,
                ModelOperator.model_id,
                with_results,
                func.sum(case((own, 1), else_=0)) if imports else with_results,
            )
            .select_from(DeviceKind)
            .join(ModelOperator, true())
            .where(ModelOperator.model_id.in_(model_ids))
            .group_by(DeviceKind.id, ModelOperator.model_id)
            .having(with_results > 0)
        )
        return [(int(k), int(m), int(n), int(o or 0)) for k, m, n, o in rows]
    out = []
    for kind in session.scalars(select(DeviceKind.id).order_by(DeviceKind.id)):
        found, own = probes(kind)
        rows = session.execute(
            select(
                ModelOperator.model_id,
                func.count(),
                func.sum(case((own, 1), else_=0)) if imports else func.count(),
            )
            .where(ModelOperator.model_id.in_(model_ids), found)
            .group_by(ModelOperator.model_id)
        )
        out += [(int(kind), int(m), int(n), int(o or 0)) for m, n, o in rows]
    return out


def result_sources(session: Session, ids: Sequence[int]) -> dict[int, int | None]:
    """Return the source (``data_sources.id``, None: own) of the per-operator results ``ids``."""
    if not ids:
        return {}
    rows = session.execute(
        select(Measurement.id, Measurement.source_id).where(Measurement.id.in_(list(ids)))
    )
    return {int(id_): source for id_, source in rows}


def result_files(session: Session, source_id: int) -> list[tuple[int, int, str]]:
    """Return (configuration id, kind id, file) of every result a data set gave (its provenance)."""
    file = Measurement.provenance["file"].as_string()
    query = select(Measurement.config_id, Measurement.device_kind_id, file).where(
        Measurement.source_id == source_id
    )
    return [(int(c), int(k), str(f or "")) for c, k, f in session.execute(query)]
