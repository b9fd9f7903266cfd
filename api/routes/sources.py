"""Data sources: the public data sets whose results were imported (`opdb import`)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass

from fastapi import APIRouter
from sqlalchemy.orm import Session

from api.deps import ReadSessionDep
from api.routes.common import READ, Limit, Offset
from api.schemas import DataSourceKindOut, DataSourceOut, Page
from operator_db.db import queries

router = APIRouter(tags=["data sources"], dependencies=READ)

MEASURED = "measured"
"""What a figure's ``source`` says where operator-db measured it (no data source)."""


def source_name(source_id: int | None, names: dict[int, str]) -> str:
    """Return what a result's ``source`` says: ``measured``, or its data set's name."""
    return MEASURED if source_id is None else names.get(source_id, str(source_id))


RECOUNT_S = 300.0
"""How often the kept counts of results are made again from scratch, s."""
RECOUNT_AFTER = 20_000
"""Results stored since the kept count past which counting them all again is cheaper."""


@dataclass(frozen=True)
class _Kept:
    counts: queries.ResultCounts
    sources: frozenset[int]
    counted_at: float


_kept: dict[str, _Kept] = {}
_kept_lock = threading.Lock()


def result_counts(session: Session) -> list[queries.SourceCount]:
    """Return the results and runs per device kind and source, the results' counts kept.

    Counting every result per kind and source is a pass over them all (NeuSight's 280,000: ~35
    ms on SQLite; a million: ~120 ms, more on PostgreSQL), for the device kinds, the data
    sources and the overview. The process keeps each database's counts and adds those of the
    results stored since (by id: a range of the primary key), so that a count stays exact as
    results are added. It counts them all again after ``RECOUNT_S``, past ``RECOUNT_AFTER`` new
    results, when a data source is gone or when the newest result is older than the kept
    count's: what a deletion or an out-of-order commit (a lower id committed after a higher one
    was counted, on PostgreSQL) left out is counted then.
    """
    key = session.get_bind().engine.url.render_as_string(hide_password=False)
    sources = frozenset(queries.data_source_names(session))
    newest = queries.newest_result_id(session)
    with _kept_lock:
        kept = _kept.get(key)
    now = time.monotonic()
    if (
        kept is None
        or now - kept.counted_at > RECOUNT_S
        or not kept.sources <= sources
        or not 0 <= newest - kept.counts.through_id <= RECOUNT_AFTER
    ):
        kept = _Kept(queries.count_results(session), sources, now)
    elif newest > kept.counts.through_id:
        later = queries.count_results(session, after_id=kept.counts.through_id)
        kept = _Kept(kept.counts.plus(later), sources, kept.counted_at)
    with _kept_lock:
        _kept[key] = kept
    return queries.source_counts(session, results=kept.counts)


@router.get("/data-sources")
def list_data_sources(
    session: ReadSessionDep, limit: Limit = 100, offset: Offset = 0
) -> Page[DataSourceOut]:
    """List the data sets results were imported from, by name: provenance and what they hold.

    Results without a data source are operator-db's own measurements (`source: measured`
    elsewhere); an imported figure is never passed for one.
    """
    sources = queries.data_sources(session)
    kinds = {k.id: k.name for k in queries.device_kinds(session)}
    held: dict[int, list[DataSourceKindOut]] = defaultdict(list)
    for count in result_counts(session):
        if count.source_id is not None:
            held[count.source_id].append(
                DataSourceKindOut(
                    device_kind=kinds[count.device_kind_id],
                    results=count.results,
                    model_runs=count.model_runs,
                )
            )
    items = [
        DataSourceOut(
            name=s.name,
            title=s.title,
            url=s.url,
            version=s.version,
            license=s.license,
            citation=s.citation,
            method=s.method,
            info=dict(s.info or {}),
            created_at=s.created_at,
            results=sum(k.results for k in held[s.id]),
            model_runs=sum(k.model_runs for k in held[s.id]),
            device_kinds=sorted(held[s.id], key=lambda k: k.device_kind),
        )
        for s in sources[offset : offset + limit]
    ]
    return Page(items=items, total=len(sources), limit=limit, offset=offset)
