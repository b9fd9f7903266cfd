"""LLMs: list, detail, and a generation composed per token against its generate() runs."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from sqlalchemy.orm import Session

from api.deps import ReadSessionDep
from api.limits import EXPENSIVE
from api.routes.common import READ, Limit, Offset
from api.schemas import Page
from api.schemas_llm import GenerationOut, LlmCompareOut, LlmOut, PlanOut
from operator_db.db import queries
from operator_db.db.llm_tables import Llm
from operator_db.llm.estimate import harvested_point

router = APIRouter(tags=["llms"], dependencies=READ)

Size = Annotated[int | None, Query(ge=1, le=1_000_000)]


def _llm_out(session: Session, llm: Llm) -> LlmOut:
    info = dict(llm.info or {})
    return LlmOut(
        name=llm.name,
        reference=llm.reference,
        overrides=dict(llm.overrides or {}),
        dtype=llm.dtype,
        params=llm.params,
        weight_bytes=llm.weight_bytes,
        kv_bytes_per_token=llm.kv_bytes_per_token,
        max_context=llm.max_context,
        shape={k: v for k, v in info.items() if k != "plans"},
        plans=[PlanOut(**p) for p in info.get("plans") or []],
        steps=[s.model_name for s in queries.llm_steps(session, llm.id)],
    )


def _point(
    session: Session,
    name: str,
    batch: int | None,
    prompt: int | None,
    new_tokens: int | None,
    *,
    required: bool = False,
) -> tuple[int, int, int] | None:
    """Return the (batch, prompt, new tokens) asked for, a size not given from the first harvested.

    None where none is given and none is ``required``.

    Raises:
        NotFoundError: unknown LLM, or a size to fill and no point harvested.
    """
    if all(x is None for x in (batch, prompt, new_tokens)) and not required:
        return None
    return harvested_point(queries.get_llm(session, name), batch, prompt, new_tokens)


@router.get("/llms")
def list_llms(session: ReadSessionDep, limit: Limit = 100, offset: Offset = 0) -> Page[LlmOut]:
    """List the stored causal LMs (`opdb llm harvest`), by name, with their step models."""
    llms = queries.list_llms(session)
    return Page(
        items=[_llm_out(session, llm) for llm in llms[offset : offset + limit]],
        total=len(llms),
        limit=limit,
        offset=offset,
    )


@router.get("/llms/{name}")
def get_llm(name: str, session: ReadSessionDep) -> LlmOut:
    """One stored causal LM: reference, dtype, size, KV-cache bytes per token, step models."""
    return _llm_out(session, queries.get_llm(session, name))


@router.get("/llms/{name}/generation", tags=["estimates"], dependencies=EXPENSIVE)
def get_generation(
    name: str,
    session: ReadSessionDep,
    batch: Size = None,
    prompt: Size = None,
    new_tokens: Size = None,
    device_kind: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    source: Literal["operators", "runs"] = "operators",
) -> list[GenerationOut]:
    """Compose the LLM's generation: TTFT, TPOT by context, total, tokens/s, J/token.

    The same figures as `opdb llm estimate`: at `batch`, `prompt` and `new_tokens` (a size not
    given: the first harvested point's; none: every point with measured `generate()` runs), on
    `device_kind` (default: the one the LLM was run on), each with its interval and against the
    measured runs where they exist. `source=runs` composes each step model's own measured run
    instead of its operators. 404 for an unknown LLM or kind; 422 for a context past the model's
    maximum.
    """
    from operator_db.llm.estimate import estimate_generation, measured_table

    point = _point(session, name, batch, prompt, new_tokens)
    if point is not None:
        found = [estimate_generation(session, name, device_kind, *point, source=source)]
    else:
        found = measured_table(session, name, device_kind, source)
    return [GenerationOut.model_validate(e.as_dict()) for e in found]


@router.get("/llms/{name}/compare", tags=["estimates"], dependencies=EXPENSIVE)
def get_llm_comparison(
    name: str,
    session: ReadSessionDep,
    batch: Size = None,
    prompt: Size = None,
    new_tokens: Size = None,
) -> list[LlmCompareOut]:
    """Which GPU serves this LLM best: its generation on every kind, measured or predicted.

    The same rows as `opdb llm compare`, fastest TPOT first, at `batch`, `prompt` and
    `new_tokens` (a size not given: the first point harvested's). `how` is `measured` (the
    kind's own step figures) or `predicted` (the cross-device model, the forwards alone).
    """
    from operator_db.llm.compare import compare_llm

    point = _point(session, name, batch, prompt, new_tokens, required=True)
    assert point is not None
    rows = compare_llm(session, name, *point)
    return [LlmCompareOut.model_validate(r.as_dict()) for r in rows]
