"""Operator configurations and their stored results."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from api.deps import ReadSessionDep
from api.routes.common import READ, Limit, Offset
from api.schemas import ConfigOut, CountersOut, MeasurementOut, Page
from operator_db.db import queries
from operator_db.db.models import OperatorConfig

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


@router.get("/configurations/{key}/measurements")
def list_measurements(
    key: str,
    session: ReadSessionDep,
    limit: Limit = 100,
    offset: Offset = 0,
    device_kind: Annotated[str | None, Query(max_length=200)] = None,
) -> Page[MeasurementOut]:
    """List a configuration's stored results, newest first (the raw samples stay in the DB)."""
    config = queries.get_config(session, key)
    rows, total = queries.config_measurements(
        session, config.id, device_kind=device_kind, limit=limit, offset=offset
    )
    items = [
        MeasurementOut.model_validate(
            {
                **{f: getattr(m, f) for f in MeasurementOut.model_fields if f != "device_kind"},
                "device_kind": kind,
                "flags": [str(f) for f in (m.flags or [])],
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
