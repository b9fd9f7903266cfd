"""Stored results: per-call figures of configurations and of whole models on device kinds.

A target (a configuration or a model) may have several stored results on a kind: passes, hosts,
remeasurements, one per timing method (eager, CUDA graph), and results imported from public data
sets. Everything that reads them goes through :func:`config_figures` and :func:`model_figures`:
the newest result per (target, kind, timing), or the median of all of them.

**Own measurements first.** Where a target has both operator-db's own results and imported ones
(``source_id`` set) on a kind, only its own count: they were measured by this project's method,
on this project's software, with their energy. Imported results stand in only where no own
result exists; the figure names its source (:attr:`Figure.source_id`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from sqlalchemy import (
    Float,
    Integer,
    Select,
    String,
    and_,
    bindparam,
    case,
    cast,
    func,
    null,
    select,
)
from sqlalchemy.orm import Session

from operator_db.db.models import FullModelRun, Job, Measurement, ModelOperator

Aggregate = Literal["latest", "median"]
"""How several results of one target become one figure: the newest, or the median of all."""

_CHUNK = 500


@dataclass(frozen=True)
class Figure:
    """The per-call figures of one target on one device kind with one timing method."""

    time_median_s: float
    """Median per-call time, s (the median over results with ``aggregate="median"``)."""
    energy_per_call_j: float | None
    """Per-call energy, J; None where any result chosen has none."""
    dynamic_energy_per_call_j: float | None
    """Per-call energy minus idle power × time, J; None where unknown."""
    flags: list[str]
    """Quality flags of the results chosen (see ``operator_db.measure.flags``)."""
    samples: int
    """How many results are stored for the target, kind and timing."""
    hollow_time_s: float | None = None
    """Whole models only: the median per-call time of the hollow run, s."""
    host_time_per_call_s: float | None = None
    """GPU: the host's per-call issue time, s (None where not recorded)."""
    hollow_host_time_s: float | None = None
    """Whole models on a GPU: the host's time to issue the hollow run, s."""
    host_id: int | None = None
    """The host of the result chosen (the newest); None for a median or an unknown host."""
    idle_power_w: float | None = None
    """The device's idle power when the result was measured, W (the median with ``median``)."""
    replay_per_call_s: dict[int, float] | None = None
    """Whole models: per configuration id, its time per call in a replay of the model's call
    order, s (``FullModelRun.replay``; on a GPU the device's time; the median over results with
    ``aggregate="median"``); None where no replay ran."""
    replay_host_per_call_s: dict[int, float] | None = None
    """Whole models on a GPU: per configuration id, the host's time to issue one call in the
    replay, s; None elsewhere."""
    source_id: int | None = None
    """The data set the figure was imported from (``data_sources.id``; names by
    :func:`operator_db.db.queries.data_source_names`); None: operator-db's own measurement."""
    time_low_s: float | None = None
    time_high_s: float | None = None
    """The confidence interval of ``time_median_s``, s (revision 0013; with ``median``, the
    median of the results' ends); None where unknown (imported results, older ones)."""
    time_ci_level: float | None = None
    """The coverage of that interval (the lowest of the results')."""
    energy_low_j: float | None = None
    energy_high_j: float | None = None
    energy_ci_level: float | None = None
    """The interval of ``energy_per_call_j`` over its trials, J, and its coverage."""
    replay_interval_s: dict[int, tuple[float, float]] | None = None
    """Whole models: per configuration id, the interval of its per-call time in the replay, s."""
    replay_total: dict[str, Any] | None = None
    """Whole models: the replay's Σ count × per-call time (its median pass) with its interval over
    passes (``stats.Interval.as_dict``); None without one."""


FigureKey = tuple[int, int, str]
"""(target id, device kind id, timing)."""


def _median_or_none(values: list[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return statistics.median(v for v in values if v is not None)


def _replay_figures(replay: Any, field: str = "per_call_s") -> dict[int, float] | None:
    """Return a stored replay's per-call times by configuration id (None without them).

    ``field``: ``per_call_s`` (the time; on a GPU the device's) or ``host_per_call_s`` (a GPU's
    issue time).
    """
    if not isinstance(replay, dict) or not isinstance(replay.get(field), dict):
        return None
    return {int(k): float(v) for k, v in replay[field].items()}


def _replay_intervals(replay: Any) -> dict[int, tuple[float, float]] | None:
    """Return a stored replay's per-configuration intervals by id (None without them)."""
    lows, highs = (
        _replay_figures(replay, "per_call_low_s"),
        _replay_figures(replay, "per_call_high_s"),
    )
    if lows is None or highs is None:
        return None
    return {i: (lo, highs[i]) for i, lo in lows.items() if i in highs}


def _replay_total(replay: Any) -> dict[str, Any] | None:
    """Return a stored replay's total with its interval (``stats.Interval.as_dict``), or None."""
    total = replay.get("total") if isinstance(replay, dict) else None
    return total if isinstance(total, dict) else None


def _min_or_none(values: list[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return min(v for v in values if v is not None)


def _median_replay(replays: list[Any], field: str = "per_call_s") -> dict[int, float] | None:
    """Return the median per configuration over the results that have a replay."""
    found = [r for r in (_replay_figures(x, field) for x in replays) if r is not None]
    if not found:
        return None
    ids = {i for r in found for i in r}
    return {i: statistics.median(r[i] for r in found if i in r) for i in ids}


def _aggregate(rows: Iterable[Any], how: Aggregate) -> dict[FigureKey, Figure]:
    """Group result rows (named columns, see :func:`_figures`) into one figure per key.

    ``latest`` rows come one per key, already chosen by the database, with ``samples``.
    """
    groups: dict[FigureKey, list[Any]] = {}
    for row in rows:
        groups.setdefault((row.target_id, row.device_kind_id, row.timing), []).append(row)
    out: dict[FigureKey, Figure] = {}
    for key, found in groups.items():
        own = [r for r in found if r.source_id is None]
        results = own or found  # own measurements first (the module's docstring)
        if how == "latest":  # several rows only where results share the newest created_at
            newest = max(results, key=lambda r: (r.created_at, r.id))
            out[key] = Figure(
                time_median_s=newest.time_median_s,
                energy_per_call_j=newest.energy_per_call_j,
                dynamic_energy_per_call_j=newest.dynamic_energy_per_call_j,
                flags=sorted({str(f) for f in (newest.flags or [])}),
                samples=newest.samples,
                hollow_time_s=newest.hollow_time_s,
                hollow_host_time_s=newest.hollow_host_time_s,
                host_time_per_call_s=newest.host_time_per_call_s,
                replay_per_call_s=_replay_figures(newest.replay),
                replay_host_per_call_s=_replay_figures(newest.replay, "host_per_call_s"),
                host_id=newest.host_id,
                idle_power_w=newest.idle_power_w,
                source_id=newest.source_id,
                time_low_s=newest.time_low_s,
                time_high_s=newest.time_high_s,
                time_ci_level=newest.time_ci_level,
                energy_low_j=newest.energy_low_j,
                energy_high_j=newest.energy_high_j,
                energy_ci_level=newest.energy_ci_level,
                replay_interval_s=_replay_intervals(newest.replay),
                replay_total=_replay_total(newest.replay),
            )
            continue
        out[key] = Figure(
            time_median_s=statistics.median(r.time_median_s for r in results),
            energy_per_call_j=_median_or_none([r.energy_per_call_j for r in results]),
            dynamic_energy_per_call_j=_median_or_none(
                [r.dynamic_energy_per_call_j for r in results]
            ),
            flags=sorted({str(f) for r in results for f in (r.flags or [])}),
            samples=len(results),
            hollow_time_s=_median_or_none([r.hollow_time_s for r in results]),
            hollow_host_time_s=_median_or_none([r.hollow_host_time_s for r in results]),
            host_time_per_call_s=_median_or_none([r.host_time_per_call_s for r in results]),
            idle_power_w=_median_or_none([r.idle_power_w for r in results]),
            replay_per_call_s=_median_replay([r.replay for r in results]),
            replay_host_per_call_s=_median_replay([r.replay for r in results], "host_per_call_s"),
            source_id=results[0].source_id if len({r.source_id for r in results}) == 1 else None,
            time_low_s=_median_or_none([r.time_low_s for r in results]),
            time_high_s=_median_or_none([r.time_high_s for r in results]),
            time_ci_level=_min_or_none([r.time_ci_level for r in results]),
            energy_low_j=_median_or_none([r.energy_low_j for r in results]),
            energy_high_j=_median_or_none([r.energy_high_j for r in results]),
            energy_ci_level=_min_or_none([r.energy_ci_level for r in results]),
        )
    return out


Targets = Literal["all", "ids", "of_model"]
"""Which targets a figure query reads: all, those with ids ``:ids``, the configurations of model
``:model_id``."""


def _figures(
    session: Session,
    table: type[Measurement] | type[FullModelRun],
    targets: Sequence[int] | None,
    kind_ids: Sequence[int],
    timing: str | None,
    aggregate: Aggregate,
    cache_mode: str,
    *,
    model_id: int | None = None,
) -> dict[FigureKey, Figure]:
    if (targets is not None and not targets) or not kind_ids:
        return {}
    params: dict[str, Any] = {"kind_ids": list(kind_ids), "cache_mode": cache_mode}
    if timing is not None:
        params["timing"] = timing
    if model_id is not None:  # one query whatever the number of configurations
        query = _figure_query(table, "of_model", timing is not None, aggregate)
        return _aggregate(session.execute(query, {**params, "model_id": model_id}), aggregate)
    if targets is None:
        query = _figure_query(table, "all", timing is not None, aggregate)
        return _aggregate(session.execute(query, params), aggregate)
    ids = sorted(set(targets))
    query = _figure_query(table, "ids", timing is not None, aggregate)
    rows: list[Any] = []
    for start in range(0, len(ids), _CHUNK):
        rows.extend(session.execute(query, {**params, "ids": ids[start : start + _CHUNK]}))
    return _aggregate(rows, aggregate)


@cache
def _figure_query(
    table: type[Measurement] | type[FullModelRun],
    targets: Targets,
    by_timing: bool,
    aggregate: Aggregate,
) -> Select[Any]:
    """Select the columns a figure needs (never the raw samples or the provenance).

    Built once per shape, with bound parameters: ``:kind_ids``, ``:cache_mode``, ``:timing`` (where
    ``by_timing``) and the targets' (see :data:`Targets`); an API request reuses it as it is.

    ``median``: every result. ``latest``: the newest result of each (target, kind, timing) with
    their number (``samples``), the newest own result where the group has one (own measurements
    first): the database finds the newest ``created_at`` per group in the lookup index alone (it
    holds every column the grouping reads) and fetches only those rows, so a target measured
    many times costs one row, not all of them. Results sharing the newest ``created_at`` all
    come back; :func:`_aggregate` breaks the tie (own first, then by id).
    """
    target: Any = Measurement.config_id if table is Measurement else FullModelRun.model_id
    model_only = (
        (FullModelRun.hollow_time_s, FullModelRun.hollow_host_time_s, FullModelRun.replay)
        if table is FullModelRun
        else (
            cast(null(), Float).label("hollow_time_s"),
            cast(null(), Float).label("hollow_host_time_s"),
            null().label("replay"),
        )
    )
    columns = (
        target.label("target_id"),
        table.device_kind_id,
        table.timing,
        table.created_at,
        table.id,
        table.time_median_s,
        table.energy_per_call_j,
        table.dynamic_energy_per_call_j,
        table.host_time_per_call_s,
        table.host_id,
        table.idle_power_w,
        table.flags,
        table.source_id,
        table.time_low_s,
        table.time_high_s,
        table.time_ci_level,
        table.energy_low_j,
        table.energy_high_j,
        table.energy_ci_level,
        *model_only,
    )
    cache_mode = bindparam("cache_mode", type_=String())
    where = [
        table.device_kind_id.in_(bindparam("kind_ids", expanding=True)),
        table.cache_mode == cache_mode,
    ]
    if by_timing:
        where.append(table.timing == bindparam("timing", type_=String()))
    if targets == "ids":
        where.append(target.in_(bindparam("ids", expanding=True)))
    elif targets == "of_model":
        of_model = select(ModelOperator.config_id).where(
            ModelOperator.model_id == bindparam("model_id", type_=Integer())
        )
        where.append(target.in_(of_model))
    if aggregate != "latest":
        return select(*columns).where(*where)
    groups = (
        select(
            target.label("target_id"),
            table.device_kind_id,
            table.timing,
            func.max(table.created_at).label("newest"),
            func.max(case((table.source_id.is_(None), table.created_at))).label("newest_own"),
            func.count().label("samples"),
        )
        .where(*where)
        .group_by(target, table.device_kind_id, table.timing)
        .subquery("newest")
    )
    return (
        select(*columns, groups.c.samples)
        .join(
            groups,
            and_(
                target == groups.c.target_id,
                table.device_kind_id == groups.c.device_kind_id,
                table.timing == groups.c.timing,
                table.created_at == func.coalesce(groups.c.newest_own, groups.c.newest),
            ),
        )
        .where(table.cache_mode == cache_mode)
    )


def model_config_figures(
    session: Session,
    model_id: int,
    kind_ids: Sequence[int],
    *,
    timing: str | None = None,
    aggregate: Aggregate = "latest",
    cache_mode: str = "warm",
) -> dict[FigureKey, Figure]:
    """Return the figures of every configuration of a model, in one query.

    The same as :func:`config_figures` over the model's configurations, whatever their number.
    """
    return _figures(
        session, Measurement, None, kind_ids, timing, aggregate, cache_mode, model_id=model_id
    )


def config_figures(
    session: Session,
    config_ids: Sequence[int] | None,
    kind_ids: Sequence[int],
    *,
    timing: str | None = None,
    aggregate: Aggregate = "latest",
    cache_mode: str = "warm",
) -> dict[FigureKey, Figure]:
    """Return the figures of configurations on device kinds, by (config id, kind id, timing).

    ``config_ids`` None reads every configuration measured on the kinds. ``timing`` keeps one
    timing method (``eager`` or ``graph``); ``cache_mode`` the results measured with warm or cold
    caches; a configuration without such a result on a kind has no entry.
    """
    return _figures(session, Measurement, config_ids, kind_ids, timing, aggregate, cache_mode)


def model_figures(
    session: Session,
    model_ids: Sequence[int] | None,
    kind_ids: Sequence[int],
    *,
    timing: str | None = None,
    aggregate: Aggregate = "latest",
    cache_mode: str = "warm",
) -> dict[FigureKey, Figure]:
    """Return the figures of whole-model runs, by (model id, kind id, timing).

    ``model_ids`` None reads every model's runs on the kinds; see :func:`config_figures`.
    """
    return _figures(session, FullModelRun, model_ids, kind_ids, timing, aggregate, cache_mode)


def measured_config_ids(session: Session, config_ids: Sequence[int], kind_id: int) -> set[int]:
    """Return the configurations among ``config_ids`` with a result on kind ``kind_id``."""
    found: set[int] = set()
    ids = sorted(set(config_ids))
    for start in range(0, len(ids), _CHUNK):
        found.update(
            session.scalars(
                select(Measurement.config_id).where(
                    Measurement.device_kind_id == kind_id,
                    Measurement.config_id.in_(ids[start : start + _CHUNK]),
                )
            )
        )
    return found


def has_model_run(session: Session, model_id: int, kind_id: int) -> bool:
    """Say whether a whole-model run of the model is stored on kind ``kind_id``."""
    found = session.scalar(
        select(FullModelRun.id)
        .where(FullModelRun.model_id == model_id, FullModelRun.device_kind_id == kind_id)
        .limit(1)
    )
    return found is not None


@dataclass(frozen=True)
class JobState:
    """What became of the newest whole-model job of a model on a device kind."""

    status: str
    """``queued``, ``running``, ``done``, ``failed`` or ``cancelled`` (``db.models.JobStatus``)."""
    last_error: str | None
    """The job's last error, where it failed."""


def model_job_states(
    session: Session, model_ids: Sequence[int], kind_ids: Sequence[int]
) -> dict[tuple[int, int], JobState]:
    """Return the state of the newest whole-model job per (model id, kind id), where one exists."""
    if not model_ids or not kind_ids:
        return {}
    ids = sorted(set(model_ids))
    out: dict[tuple[int, int], JobState] = {}
    for start in range(0, len(ids), _CHUNK):
        rows = session.execute(
            select(Job.model_id, Job.device_kind_id, Job.status, Job.last_error)
            .where(
                Job.model_id.in_(ids[start : start + _CHUNK]),
                Job.device_kind_id.in_(list(kind_ids)),
            )
            .order_by(Job.id)
        )
        for model_id, kind_id, status, error in rows:  # newer ids overwrite older ones
            if model_id is not None:
                out[(int(model_id), int(kind_id))] = JobState(str(status), error)
    return out
