"""Read queries over the store; they take ``session`` and never commit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from operator_db.db.models import Model, ModelOperator, OperatorConfig
from operator_db.errors import NotFoundError
from operator_db.specs.schema import OperatorSpec


@dataclass(frozen=True)
class ModelSummary:
    """A model with its totals per forward (or training step)."""

    name: str
    reference: str | None
    mode: str
    batch_size: int | None
    configs: int
    calls: int
    flops: int
    """Σ count × forward FLOPs, in FLOPs (configurations without a count add nothing)."""
    params: int
    """Σ count × parameters, in elements (a module called twice counts twice)."""


def model_summaries(session: Session) -> list[ModelSummary]:
    """Return every model with its number of configurations, calls, FLOPs and parameters."""
    rows = session.execute(
        select(
            Model.name,
            Model.reference,
            Model.mode,
            Model.batch_size,
            func.count(ModelOperator.config_id),
            func.coalesce(func.sum(ModelOperator.count), 0),
            func.coalesce(
                func.sum(ModelOperator.count * func.coalesce(OperatorConfig.flops, 0)), 0
            ),
            func.coalesce(func.sum(ModelOperator.count * OperatorConfig.params), 0),
        )
        .outerjoin(ModelOperator, ModelOperator.model_id == Model.id)
        .outerjoin(OperatorConfig, OperatorConfig.id == ModelOperator.config_id)
        .group_by(Model.id)
        .order_by(Model.name)
    )
    return [ModelSummary(*(row[:4]), *(int(v) for v in row[4:])) for row in rows]


def get_model(session: Session, name: str) -> Model:
    """Return the model called ``name``.

    Raises:
        NotFoundError: no such model; the message lists a few that exist.
    """
    model = session.scalars(select(Model).where(Model.name == name)).one_or_none()
    if model is None:
        names = session.scalars(select(Model.name).order_by(Model.name).limit(10)).all()
        hint = f"; known: {', '.join(names)}" if names else "; the database holds no model yet"
        raise NotFoundError(f"no model named {name!r}{hint}")
    return model


@dataclass(frozen=True)
class ModelOperatorRow:
    """One configuration of a model, with the model's count and locations."""

    key: str
    op: str
    kind: str
    inputs: list[dict[str, Any]]
    count: int
    flops: int | None
    bytes: int | None
    params: int
    locations: list[str]


def model_operators(session: Session, name: str) -> list[ModelOperatorRow]:
    """Return the configurations of model ``name`` in spec order.

    Raises:
        NotFoundError: no such model.
    """
    model = get_model(session, name)
    rows = session.execute(
        select(ModelOperator, OperatorConfig)
        .join(OperatorConfig, OperatorConfig.id == ModelOperator.config_id)
        .where(ModelOperator.model_id == model.id)
        .order_by(ModelOperator.position)
    )
    return [
        ModelOperatorRow(
            cfg.key,
            cfg.op,
            cfg.kind,
            list(cfg.inputs),
            mo.count,
            cfg.flops,
            cfg.bytes,
            cfg.params,
            list(mo.locations),
        )
        for mo, cfg in rows
    ]


def config_spec(config: OperatorConfig) -> OperatorSpec:
    """Return the spec form of a stored configuration (what ``operator_db.ops`` rebuilds)."""
    return OperatorSpec.model_validate(
        {
            "op": config.op,
            "kind": config.kind,
            "args": config.args,
            "dtype": config.dtype,
            "inputs": config.inputs,
            "call": config.call,
            "outputs": config.outputs,
        }
    )
