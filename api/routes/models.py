"""Models: list, detail, operators, delete, estimate, roofline plot, comparison across kinds."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Response, status
from sqlalchemy.orm import Session

from api.deps import FIGURE_TURN, ReadSessionDep, SessionDep, get_settings_dep
from api.figures import FIGURES
from api.limits import EXPENSIVE
from api.routes.common import READ, WRITE, Limit, Name, Offset
from api.routes.sources import source_name
from api.schemas import (
    ModelDetail,
    ModelKindOut,
    ModelSummaryOut,
    OperatorOut,
    Page,
)
from api.schemas_compare import CompareOut, CompareRowOut, LeftOutOut
from api.schemas_estimate import EstimateOut
from operator_db.config import Settings
from operator_db.db import queries
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.estimate.rooflines import model_roofline
from operator_db.estimate.rows import finite_values

router = APIRouter(tags=["models"], dependencies=READ)
writes = APIRouter(tags=["models"], dependencies=WRITE)

DETAIL_OPERATORS = 100
"""Operators a model's detail lists (the rest: ``/models/{name}/operators``)."""
COMPARE_KEPT = 64
"""Comparisons across kinds a process keeps (the least recently asked for goes first)."""
COMPARE_KEEP_S = 300.0
"""How long a kept comparison serves at most, s."""
log = logging.getLogger("operator_db.api")


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
    not_measured_on: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=200,
            description="A device kind: only the models with nothing measured on it (no "
            "configuration's result, own or imported, and no whole-model run).",
        ),
    ] = None,
) -> Page[ModelSummaryOut]:
    """List models with their configurations, calls, FLOPs and parameters, by name.

    Every stored model, measured or not; each with the device kinds it has figures on (its
    configurations' results, own or imported, and its whole-model runs). 404 for an unknown
    ``not_measured_on`` kind.
    """
    kind = None if not_measured_on is None else queries.get_device_kind(session, not_measured_on)
    filters: dict[str, Any] = {
        "mode": mode,
        "search": search,
        "unmeasured_on": None if kind is None else kind.id,
    }
    rows = queries.model_summaries(session, **filters, limit=limit, offset=offset)
    kinds = model_kinds(session, [s.name for s in rows])
    return Page(
        items=[ModelSummaryOut(**vars(s), device_kinds=kinds.get(s.name, [])) for s in rows],
        total=queries.model_count(session, **filters),
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


@router.get("/models/{name}/estimate", tags=["estimates"], dependencies=EXPENSIVE)
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
    predictor (`opdb predict train`), or for a GPU without one the cross-device model
    (`opdb predict across train`), with an interval; 404 where the kind has neither.
    `context=alone` composes a CPU model's operators as looped alone even where its run timed
    them in a replay of the model's calls (the default where it did).
    """
    predicted = None
    if predict:  # scikit-learn behind it
        from operator_db.predict.mix import predicted_for

        predicted = predicted_for(session, name, device_kind)
    est = estimate_model(
        session,
        name,
        device_kind,
        EstimateOptions(
            timing=timing,
            energy=energy,
            peaks="best",
            cache_mode=cache_mode,
            aggregate=aggregate,
            between_ops_warn=settings.estimate_between_ops_warn,
            predicted=predicted,
            context=context,
        ),
    )
    ranked = est.ranked_config_rows()
    summary = finite_values(est.summary())
    return EstimateOut(
        **summary,
        by_op=est.op_rows,
        configurations=ranked[offset : offset + limit],
        configurations_total=len(est.config_rows),
    )


_compared: OrderedDict[tuple[object, ...], tuple[float, CompareOut]] = OrderedDict()
_compared_lock = threading.Lock()


def compare_model(session: Session, name: str) -> tuple[CompareOut, int]:
    """Return the model on every device kind, kept per process, and the newest cross version.

    ``predict.across.compare``'s rows, and the version of the newest cross-device model stored
    (0: none). An estimate per kind is too slow to make on every request: the comparison is
    kept, keyed on the database, the model, the newest result's id, the newest cross-device
    model's version and the number of device kinds, so that a new result, a new cross-device
    model or a new kind makes it again; the ``COMPARE_KEPT`` most recently asked for are kept,
    each for ``COMPARE_KEEP_S`` at most (what the key does not see, a new whole-model run or
    new peaks, shows then).

    Raises:
        NotFoundError: unknown model.
    """
    model = queries.get_model(session, name)
    cross = queries.latest_cross_predictor(session, with_model=False)
    version = cross.version if cross is not None else 0
    key = (
        session.get_bind().engine.url.render_as_string(hide_password=False),
        model.name,
        model.id,
        model.spec_hash,
        queries.newest_result_id(session),
        version,
        len(queries.device_kinds(session)),
    )
    now = time.monotonic()
    with _compared_lock:
        kept = _compared.get(key)
        if kept is not None and now - kept[0] <= COMPARE_KEEP_S:
            _compared.move_to_end(key)
            return kept[1], version
    # pandas behind it; scikit-learn too where a cross-device model is stored
    from operator_db.predict.across.compare import compare

    left_out: list[LeftOutOut] = []

    def _left_out(kind: str, why: str) -> None:
        log.info("compare %s: %s left out: %s", model.name, kind, why)
        left_out.append(LeftOutOut(device_kind=kind, why=why))

    rows = compare(session, model.name, on_error=_left_out)
    out = CompareOut(
        model=model.name,
        rows=[CompareRowOut(**finite_values(r.as_dict())) for r in rows],
        left_out=left_out,
    )
    with _compared_lock:
        _compared[key] = (now, out)
        _compared.move_to_end(key)
        while len(_compared) > COMPARE_KEPT:
            _compared.popitem(last=False)
    return out, version


@router.get("/models/{name}/compare", tags=["estimates"], dependencies=EXPENSIVE)
def get_comparison(name: str, session: ReadSessionDep) -> CompareOut:
    """Which GPU for this model: its time on every device kind, fastest first.

    A kind the model has results on is measured (its estimate from its configurations' figures,
    own or imported, or its whole-model run where few configurations are measured); every other
    GPU of the chips table is predicted by the newest cross-device model, with an interval,
    where one is stored (none stored: the measured kinds only).
    """
    return compare_model(session, name)[0]


@router.get(
    "/models/{name}/roofline",
    tags=["estimates"],
    dependencies=[*EXPENSIVE, FIGURE_TURN],
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
    """Draw the model on the device kind's roofline: roofs, one point per configuration.

    Kept per process until a new result, run, peak or counter could change it (``api.figures``).
    """
    model = queries.get_model(session, name)
    kind = queries.get_device_kind(session, device_kind)
    key = (
        session.get_bind().engine.url.render_as_string(hide_password=False),
        "roofline",
        model.id,
        model.spec_hash,
        kind.id,
        fmt,
        queries.roofline_version(session, kind.id),
    )
    body = FIGURES.get(key, lambda: model_roofline(session, name, device_kind).render(fmt))
    return Response(body, media_type="image/png" if fmt == "png" else "image/svg+xml")


router.include_router(writes)
