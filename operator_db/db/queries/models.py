"""Models and their operator configurations: summaries, lookups, configurations in spec order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session, aliased

from operator_db.db.models import FullModelRun, Measurement, Model, ModelOperator, OperatorConfig
from operator_db.errors import NotFoundError

if TYPE_CHECKING:  # the spec's pydantic models: imported by the one function that builds one
    from operator_db.specs.schema import OperatorSpec

_CHUNK = 500
"""Ids per ``IN (...)`` list: well under SQLite's and PostgreSQL's parameter limits."""


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


def _model_filters(
    name: str | None, mode: str | None, search: str | None, unmeasured_on: int | None = None
) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = []
    if unmeasured_on is not None:  # no run and no configuration's result on the kind
        run = select(FullModelRun.id).where(
            FullModelRun.model_id == Model.id, FullModelRun.device_kind_id == unmeasured_on
        )
        # Its own alias: the summaries' query joins ModelOperator outside, which would swallow it.
        link = aliased(ModelOperator)
        result = select(Measurement.id).where(
            Measurement.device_kind_id == unmeasured_on, Measurement.config_id == link.config_id
        )
        measured = (
            select(link.config_id)
            .where(link.model_id == Model.id, result.exists())
            .correlate(Model)
        )
        where += [~run.exists(), ~measured.exists()]
    if name is not None:
        where.append(Model.name == name)
    if mode is not None:
        where.append(Model.mode == mode)
    if search:
        where.append(Model.name.contains(search, autoescape=True))
    return where


def model_summaries(
    session: Session,
    *,
    name: str | None = None,
    mode: str | None = None,
    search: str | None = None,
    unmeasured_on: int | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> list[ModelSummary]:
    """Return the models with their totals, by name: all, or those matching the filters.

    ``name`` exactly, ``mode`` (inference, training), ``search`` a part of the name,
    ``unmeasured_on`` a kind's id (the models with nothing measured there: neither a run nor a
    configuration's result, own or imported); ``limit`` and ``offset`` page through them.
    Totals: configurations, calls, FLOPs and parameters (see
    :class:`ModelSummary`).
    """
    query = (
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
    query = query.where(*_model_filters(name, mode, search, unmeasured_on))
    query = query.offset(offset).limit(limit)
    return [ModelSummary(*(row[:4]), *(int(v) for v in row[4:])) for row in session.execute(query)]


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


def list_models(
    session: Session,
    *,
    ids: Sequence[int] | None = None,
    names: Sequence[str] | None = None,
    mode: str | None = None,
) -> list[Model]:
    """Return the models (those with ``ids``, those named ``names``, of ``mode``, or all), by name.

    Raises:
        NotFoundError: a name in ``names`` is not a stored model (of ``mode``, if given).
    """
    query = select(Model).order_by(Model.name)
    if ids is not None:
        query = query.where(Model.id.in_(list(ids)))
    if mode is not None:
        query = query.where(Model.mode == mode)
    if names is None:
        return list(session.scalars(query))
    wanted = sorted(set(names))
    found: list[Model] = []
    for start in range(0, len(wanted), _CHUNK):
        found.extend(session.scalars(query.where(Model.name.in_(wanted[start : start + _CHUNK]))))
    missing = sorted(set(wanted) - {m.name for m in found})
    if missing:
        shown = ", ".join(repr(n) for n in missing[:10])
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        raise NotFoundError(f"no model named {shown}{more} in the database")
    return sorted(found, key=lambda m: m.name)


def model_count(
    session: Session,
    *,
    mode: str | None = None,
    search: str | None = None,
    unmeasured_on: int | None = None,
) -> int:
    """Return the number of models stored (filtered as :func:`model_summaries` filters)."""
    where = _model_filters(None, mode, search, unmeasured_on)
    return session.scalar(select(func.count()).select_from(Model).where(*where)) or 0


def config_models(
    session: Session, config_id: int, *, limit: int | None = None
) -> tuple[list[tuple[int, str, int]], int]:
    """Return the models that run a configuration, by name, as (model id, name, calls per pass).

    With how many models run it in all (``limit`` lists the first ones).
    """
    query = (
        select(Model.id, Model.name, ModelOperator.count)
        .join(ModelOperator, ModelOperator.model_id == Model.id)
        .where(ModelOperator.config_id == config_id)
        .order_by(Model.name)
        .limit(limit)
    )
    rows = [(int(i), str(n), int(c)) for i, n, c in session.execute(query)]
    total = session.scalar(
        select(func.count()).select_from(ModelOperator).where(ModelOperator.config_id == config_id)
    )
    return rows, int(total or 0)


def delete_model(session: Session, name: str) -> None:
    """Delete the model ``name``: its operator list, jobs and full-model runs go with it.

    Its configurations and their measurements stay: other models may share them. Flushes.

    Raises:
        NotFoundError: no such model.
    """
    session.delete(get_model(session, name))
    session.flush()


@dataclass(frozen=True)
class ModelConfig:
    """One configuration of a model, with how often (``count``) and where the model runs it."""

    config: OperatorConfig
    count: int
    """Calls per forward (or training step)."""
    position: int
    """Its place in the spec (0 first)."""
    locations: list[str]
    """The module names (or call sites) that run it."""


def models_configs(
    session: Session,
    model_ids: Sequence[int],
    *,
    measurable_only: bool = False,
    form: str | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> dict[int, list[ModelConfig]]:
    """Return the configurations of each model, in spec order, by model id.

    ``measurable_only`` leaves out opaque configurations; ``form`` keeps only that form
    (``module``, ``function`` or ``opaque``). A model without configurations maps to ``[]``.
    ``limit`` and ``offset`` page through one model's configurations (with several models they
    apply to all of them together).
    """
    out: dict[int, list[ModelConfig]] = {model_id: [] for model_id in model_ids}
    ids = sorted(out)
    for start in range(0, len(ids), _CHUNK):
        query = (
            select(ModelOperator, OperatorConfig)
            .join(OperatorConfig, OperatorConfig.id == ModelOperator.config_id)
            .where(ModelOperator.model_id.in_(ids[start : start + _CHUNK]))
            .order_by(ModelOperator.model_id, ModelOperator.position)
        )
        if measurable_only:
            query = query.where(OperatorConfig.form != "opaque")
        if form is not None:
            query = query.where(OperatorConfig.form == form)
        if limit is not None or offset:
            query = query.offset(offset).limit(limit)
        for link, cfg in session.execute(query):
            out[link.model_id].append(
                ModelConfig(cfg, link.count, link.position, [str(x) for x in link.locations])
            )
    return out


def model_configs(
    session: Session,
    model_id: int,
    *,
    measurable_only: bool = False,
    form: str | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> list[ModelConfig]:
    """Return a model's configurations in spec order (see :func:`models_configs`)."""
    return models_configs(
        session,
        [model_id],
        measurable_only=measurable_only,
        form=form,
        limit=limit,
        offset=offset,
    )[model_id]


@dataclass(frozen=True)
class ConfigCost:
    """What an estimate reads of one configuration of a model: no arguments, call or outputs."""

    id: int
    key: str
    op: str
    form: str
    inputs: list[dict[str, Any]]
    flops: int | None
    bytes: int | None
    params: int
    count: int
    """Calls per forward (or training step)."""


def model_config_costs(session: Session, model_id: int) -> list[ConfigCost]:
    """Return a model's configurations in spec order with their counts, in one query.

    Only the columns an estimate needs are read (see :class:`ConfigCost`).
    """
    query = (
        select(
            OperatorConfig.id,
            OperatorConfig.key,
            OperatorConfig.op,
            OperatorConfig.form,
            OperatorConfig.inputs,
            OperatorConfig.flops,
            OperatorConfig.bytes,
            OperatorConfig.params,
            ModelOperator.count,
        )
        .join(ModelOperator, ModelOperator.config_id == OperatorConfig.id)
        .where(ModelOperator.model_id == model_id)
        .order_by(ModelOperator.position)
    )
    return [ConfigCost(*row) for row in session.execute(query)]


@dataclass(frozen=True)
class ModelOperatorRow:
    """One configuration of a model, with the model's count and locations."""

    key: str
    op: str
    form: str
    inputs: list[dict[str, Any]]
    count: int
    flops: int | None
    bytes: int | None
    params: int
    locations: list[str]


def model_operators(
    session: Session, name: str, *, limit: int | None = None, offset: int = 0
) -> list[ModelOperatorRow]:
    """Return the configurations of model ``name`` in spec order (``limit``/``offset``: a page).

    Raises:
        NotFoundError: no such model.
    """
    model = get_model(session, name)
    return [
        ModelOperatorRow(
            mc.config.key,
            mc.config.op,
            mc.config.form,
            list(mc.config.inputs),
            mc.count,
            mc.config.flops,
            mc.config.bytes,
            mc.config.params,
            list(mc.locations),
        )
        for mc in model_configs(session, model.id, limit=limit, offset=offset)
    ]


def config_ids_by_key(session: Session, keys: Sequence[str]) -> dict[str, int]:
    """Return the ids of the stored configurations among ``keys``, by key."""
    found: dict[str, int] = {}
    wanted = sorted(set(keys))
    for start in range(0, len(wanted), _CHUNK):
        rows = session.execute(
            select(OperatorConfig.key, OperatorConfig.id).where(
                OperatorConfig.key.in_(wanted[start : start + _CHUNK])
            )
        )
        found.update({key: config_id for key, config_id in rows})
    return found


def config_spec(config: OperatorConfig) -> OperatorSpec:
    """Return the spec form of a stored configuration (what ``operator_db.ops`` rebuilds)."""
    from operator_db.specs.schema import OperatorSpec

    return OperatorSpec.model_validate(
        {
            "op": config.op,
            "form": config.form,
            "args": config.args,
            "dtype": config.dtype,
            "inputs": config.inputs,
            "call": config.call,
            "outputs": config.outputs,
        }
    )
