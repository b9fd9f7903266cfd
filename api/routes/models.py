"""Models: list, detail, operators, delete, estimate, roofline plot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Response, status
from sqlalchemy.orm import Session

from api.deps import ReadSessionDep, SessionDep, get_settings_dep
from api.routes.common import READ, WRITE, Limit, Name, Offset
from api.routes.sources import source_name
from api.schemas import (
    EstimateOut,
    ModelDetail,
    ModelKindOut,
    ModelSummaryOut,
    OperatorOut,
    Page,
)
from operator_db.config import Settings
from operator_db.db import queries
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.rooflines import model_roofline
from operator_db.estimate.rows import finite_values

router = APIRouter(tags=["models"], dependencies=READ)
writes = APIRouter(tags=["models"], dependencies=WRITE)

DETAIL_OPERATORS = 100
"""Operators a model's detail lists (the rest: ``/models/{name}/operators``)."""


def model_kinds(session: Session, names: Sequence[str]) -> dict[str, list[ModelKindOut]]:
    """Return, per model named, what it has on each device kind (``queries.model_kind_figures``)."""
    figures = queries.model_kind_figures(session, names)
    if not figures:
        return {}
    kinds = {k.id: k.name for k in queries.device_kinds(session)}
    sources = queries.data_source_names(session)
    out: dict[str, list[ModelKindOut]] = {}
    for f in figures:
        out.setdefault(f.model, []).append(
            ModelKindOut(
                device_kind=kinds[f.device_kind_id],
                configs_with_results=f.configs,
                configs_imported=f.configs - f.configs_own,
                model_runs={source_name(s, sources): n for s, n in f.runs.items()},
            )
        )
    return {name: sorted(rows, key=lambda r: r.device_kind) for name, rows in out.items()}


@router.get("/models")
def list_models(
    session: ReadSessionDep,
    limit: Limit = 100,
    offset: Offset = 0,
    mode: Literal["inference", "training"] | None = None,
    search: Annotated[str | None, Query(max_length=200, description="Part of the name.")] = None,
) -> Page[ModelSummaryOut]:
    """List models with their configurations, calls, FLOPs and parameters, by name.

    Every stored model, measured or not; each with the device kinds it has figures on (its
    configurations' results, own or imported, and its whole-model runs).
    """
    rows = queries.model_summaries(session, mode=mode, search=search, limit=limit, offset=offset)
    kinds = model_kinds(session, [s.name for s in rows])
    return Page(
        items=[ModelSummaryOut(**vars(s), device_kinds=kinds.get(s.name, [])) for s in rows],
        total=queries.model_count(session, mode=mode, search=search),
        limit=limit,
        offset=offset,
    )


@router.get("/models/{name}")
def get_model(name: str, session: ReadSessionDep) -> ModelDetail:
    """Return a model with its totals and its first configurations in spec order."""
    model = queries.get_model(session, name)
    [summary] = queries.model_summaries(session, name=name)
    operators = queries.model_operators(session, name, limit=DETAIL_OPERATORS)
    return ModelDetail(
        **vars(summary),
        device_kinds=model_kinds(session, [name]).get(name, []),
        inputs=list(model.inputs),
        dtype=model.dtype,
        spec_hash=model.spec_hash,
        operators=[OperatorOut(**vars(row)) for row in operators],
    )


@router.get("/models/{name}/operators")
def list_model_operators(
    name: str, session: ReadSessionDep, limit: Limit = 100, offset: Offset = 0
) -> Page[OperatorOut]:
    """Page through a model's configurations in spec order, with its counts and locations."""
    rows = queries.model_operators(session, name, limit=limit, offset=offset)
    [summary] = queries.model_summaries(session, name=name)
    return Page(
        items=[OperatorOut(**vars(row)) for row in rows],
        total=summary.configs,
        limit=limit,
        offset=offset,
    )


@writes.delete("/models/{name}", status_code=status.HTTP_204_NO_CONTENT)
def delete_model(name: str, session: SessionDep) -> Response:
    """Delete a model with its jobs and full-model runs; its configurations' results stay."""
    queries.delete_model(session, name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/models/{name}/estimate", tags=["estimates"])
def get_estimate(
    name: str,
    session: ReadSessionDep,
    settings: Annotated[Settings, Depends(get_settings_dep)],
    device_kind: Name,
    timing: Literal["eager", "graph"] = "eager",
    energy: Literal["total", "dynamic"] = "total",
    cache_mode: Literal["warm", "cold"] = "warm",
    aggregate: Literal["latest", "median"] = "latest",
    context: Literal["replay", "alone"] = "replay",
    predict: bool = False,
    limit: Limit = 100,
    offset: Offset = 0,
) -> EstimateOut:
    """Compose the model's time and energy on a device kind from its measured operators.

    The same figures as `opdb estimate`; the configurations come a page at a time, costliest
    first. `predict=true` fills the configurations not measured on the kind with its newest
    predictor (`opdb predict train`), with an interval; 404 where the kind has none.
    `context=alone` composes a CPU model's operators as looped alone even where its run timed
    them in a replay of the model's calls (the default where it did).
    """
    predicted = None
    if predict:  # scikit-learn behind it
        from operator_db.predict.mix import predicted_costs

        predicted = predicted_costs(session, name, device_kind)
    est = estimate_model(
        session,
        name,
        device_kind,
        timing=timing,
        energy=energy,
        peaks="best",
        cache_mode=cache_mode,
        aggregate=aggregate,
        between_ops_warn=settings.estimate_between_ops_warn,
        predicted=predicted,
        context=context,
    )
    ranked = est.ranked_config_rows()
    summary = finite_values(est.summary())
    return EstimateOut(
        **summary,
        by_op=est.op_rows,
        configurations=ranked[offset : offset + limit],
        configurations_total=len(est.config_rows),
    )


@router.get(
    "/models/{name}/roofline",
    tags=["estimates"],
    response_class=Response,
    responses={
        200: {
            "content": {"image/png": {}, "image/svg+xml": {}},
            "description": "The roofline plot.",
        }
    },
)
def get_roofline(
    name: str,
    session: ReadSessionDep,
    device_kind: Name,
    fmt: Annotated[Literal["png", "svg"], Query(alias="format")] = "png",
) -> Response:
    """Draw the model on the device kind's roofline: roofs, one point per configuration."""
    body = model_roofline(session, name, device_kind).render(fmt)
    return Response(body, media_type="image/png" if fmt == "png" else "image/svg+xml")


router.include_router(writes)
