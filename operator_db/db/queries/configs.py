"""Operator configurations across models, and the stored results of one of them."""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlalchemy import ColumnElement, String, cast, func, select
from sqlalchemy.orm import Session, defer

from operator_db.db.models import (
    DeviceKind,
    Measurement,
    Model,
    ModelOperator,
    OperatorConfig,
)
from operator_db.errors import NotFoundError


def _config_filters(
    op: str | None, model: str | None, form: str | None, input_shape: Sequence[int] | None
) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = []
    if op is not None:
        where.append(OperatorConfig.op == op)
    if form is not None:
        where.append(OperatorConfig.form == form)
    if model is not None:
        of_model = (
            select(ModelOperator.config_id)
            .join(Model, Model.id == ModelOperator.model_id)
            .where(Model.name == model)
        )
        where.append(OperatorConfig.id.in_(of_model))
    if input_shape is not None:
        # Both backends write JSON lists as "[1, 3, 224, 224]" (JSON text on SQLite, jsonb::text).
        needle = '"shape": ' + json.dumps(list(input_shape))
        where.append(cast(OperatorConfig.inputs, String).contains(needle, autoescape=True))
    return where


def list_configs(
    session: Session,
    *,
    op: str | None = None,
    model: str | None = None,
    form: str | None = None,
    input_shape: Sequence[int] | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> tuple[list[OperatorConfig], int]:
    """Return a page of configurations, by id, and how many match in all.

    Filters: ``op`` (a dotted name), ``model`` (configurations the model runs), ``form``
    (module, function, opaque), ``input_shape`` (one of its inputs has exactly this shape).
    """
    where = _config_filters(op, model, form, input_shape)
    total = session.scalar(select(func.count()).select_from(OperatorConfig).where(*where)) or 0
    rows = session.scalars(
        select(OperatorConfig).where(*where).order_by(OperatorConfig.id).offset(offset).limit(limit)
    )
    return list(rows), total


def configs_by_ids(session: Session, ids: Sequence[int]) -> list[OperatorConfig]:
    """Return the configurations with these ids, by id (unknown ids are left out)."""
    wanted = sorted(set(ids))
    out: list[OperatorConfig] = []
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        out.extend(session.scalars(select(OperatorConfig).where(OperatorConfig.id.in_(chunk))))
    return sorted(out, key=lambda c: c.id)


def get_config(session: Session, key: str) -> OperatorConfig:
    """Return the configuration with ``key``.

    Raises:
        NotFoundError: no such configuration.
    """
    config = session.scalars(select(OperatorConfig).where(OperatorConfig.key == key)).one_or_none()
    if config is None:
        raise NotFoundError(f"no operator configuration with key {key[:64]!r}")
    return config


def config_measurements(
    session: Session,
    config_id: int,
    *,
    device_kind: str | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> tuple[list[tuple[Measurement, str]], int]:
    """Return a page of a configuration's results with their kind's name, and their number.

    Newest first; of ``device_kind``, or on every kind. The raw samples and the provenance are
    not loaded.
    """
    where: list[ColumnElement[bool]] = [Measurement.config_id == config_id]
    if device_kind is not None:
        where.append(DeviceKind.name == device_kind)
    joined = select(Measurement, DeviceKind.name).join(
        DeviceKind, DeviceKind.id == Measurement.device_kind_id
    )
    total = (
        session.scalar(
            select(func.count())
            .select_from(Measurement)
            .join(DeviceKind, DeviceKind.id == Measurement.device_kind_id)
            .where(*where)
        )
        or 0
    )
    rows = session.execute(
        joined.where(*where)
        .options(defer(Measurement.raw), defer(Measurement.provenance))
        .order_by(Measurement.created_at.desc(), Measurement.id.desc())
        .offset(offset)
        .limit(limit)
    )
    return [(m, name) for m, name in rows], total
