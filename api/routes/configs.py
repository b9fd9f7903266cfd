"""Operator configurations and their stored results."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from api.deps import ReadSessionDep
from api.routes.common import READ, Limit, Offset
from api.routes.sources import MEASURED, source_name
from api.schemas import ConfigOut, CountersOut, MeasurementOut, Page
from operator_db.db import queries
from operator_db.db.models import Measurement, OperatorConfig

router = APIRouter(tags=["configurations"], dependencies=READ)

Key = Annotated[str, Query(min_length=1, max_length=64)]


def _config_out(config: OperatorConfig) -> ConfigOut:
    return ConfigOut.model_validate(config, from_attributes=True)


SHAPE_PATTERN = r"^[1-9][0-9]{0,8}(x[1-9][0-9]{0,8}){0,15}$"
"""An input shape in a query: up to 16 dims of 1 to 999 999 999 elements, joined by ``x``."""


def _shape(text: str | None) -> list[int] | None:
    return None if text is None else [int(part) for part in text.split("x")]


@router.get("/configurations")
def list_configurations(
    session: ReadSessionDep,
    limit: Limit = 100,
    offset: Offset = 0,
    op: Annotated[str | None, Query(max_length=300, description="A dotted name.")] = None,
    model: Annotated[str | None, Query(max_length=200, description="Run by this model.")] = None,
    form: Literal["module", "function", "opaque"] | None = None,
    input_shape: Annotated[
        str | None,
        Query(
            max_length=200,
            pattern=SHAPE_PATTERN,
            description="An input of exactly this shape, e.g. 1x3x224x224.",
        ),
    ] = None,
) -> Page[ConfigOut]:
    """List operator configurations (shared by every model that runs them), by id."""
    rows, total = queries.list_configs(
        session,
        op=op,
        model=model,
        form=form,
        input_shape=_shape(input_shape),
        limit=limit,
        offset=offset,
    )
    return Page(items=[_config_out(c) for c in rows], total=total, limit=limit, offset=offset)


@router.get("/configurations/{key}")
def get_configuration(key: str, session: ReadSessionDep) -> ConfigOut:
    """Return one configuration by its key (SHA-256 of its canonical form)."""
    return _config_out(queries.get_config(session, key))


_DERIVED = {"device_kind", "source", "source_file", "source_line"}
"""MeasurementOut's fields that are not a result's columns."""


def _source_fields(result: Measurement, names: dict[int, str]) -> dict[str, Any]:
    """Return where a result comes from: own, or a data set's file and line (its provenance)."""
    if result.source_id is None:
        return {"source": MEASURED, "source_file": None, "source_line": None}
    provenance = result.provenance or {}
    line = provenance.get("line")
    return {
        "source": source_name(result.source_id, names),
        "source_file": str(provenance["file"]) if provenance.get("file") else None,
        "source_line": line if isinstance(line, int) and not isinstance(line, bool) else None,
    }


@router.get("/configurations/{key}/measurements")
def list_measurements(
    key: str,
    session: ReadSessionDep,
    limit: Limit = 100,
    offset: Offset = 0,
    device_kind: Annotated[str | None, Query(max_length=200)] = None,
) -> Page[MeasurementOut]:
    """List a configuration's stored results, newest first (the raw samples stay in the DB).

    Each says where it comes from (`source`): operator-db's own measurement, or a data set's,
    with the file and line it was imported from.
    """
    config = queries.get_config(session, key)
    rows, total = queries.config_measurements(
        session, config.id, device_kind=device_kind, limit=limit, offset=offset
    )
    names = queries.data_source_names(session) if any(m.source_id for m, _ in rows) else {}
    items = [
        MeasurementOut.model_validate(
            {
                **{f: getattr(m, f) for f in MeasurementOut.model_fields if f not in _DERIVED},
                "device_kind": kind,
                "flags": [str(f) for f in (m.flags or [])],
                **_source_fields(m, names),
            }
        )
        for m, kind in rows
    ]
    return Page(items=items, total=total, limit=limit, offset=offset)


@router.get("/configurations/{key}/counters")
def list_counters(key: str, session: ReadSessionDep) -> list[CountersOut]:
    """Return a configuration's newest Nsight Compute counters on each device kind, by kind."""
    config = queries.get_config(session, key)
    return [
        CountersOut.model_validate(
            {
                **{f: getattr(row, f) for f in CountersOut.model_fields if f != "device_kind"},
                "device_kind": kind,
            }
        )
        for row, kind in queries.config_counters(session, config.id)
    ]
