"""Causal LMs' generation: an LLM, its step models, its generate() runs (add, find, list)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from operator_db.db.llm_tables import GenerationRun, Llm, LlmStep
from operator_db.db.models import DeviceKind, Model
from operator_db.errors import ConflictError, NotFoundError


@dataclass(frozen=True)
class StepModel:
    """One step model of an LLM: what it computes and the model that holds its spec."""

    phase: str
    batch: int
    tokens: int
    model_id: int
    model_name: str


def put_llm(
    session: Session,
    *,
    name: str,
    reference: str,
    overrides: Mapping[str, Any],
    dtype: str,
    params: int,
    weight_bytes: int,
    kv_bytes_per_token: int,
    max_context: int | None,
    info: Mapping[str, Any],
) -> Llm:
    """Return the LLM called ``name``, stored now if it is new.

    Raises:
        ConflictError: an LLM of that name is stored with another reference, overrides or dtype.
    """
    found = session.scalars(select(Llm).where(Llm.name == name)).one_or_none()
    if found is not None:
        if (found.reference, found.overrides, found.dtype) != (reference, dict(overrides), dtype):
            raise ConflictError(
                f"an LLM named {name!r} is stored as {found.reference} {found.overrides} in "
                f"{found.dtype}; give this one another name (--name)"
            )
        return found
    llm = Llm(
        name=name,
        reference=reference,
        overrides=dict(overrides),
        dtype=dtype,
        params=params,
        weight_bytes=weight_bytes,
        kv_bytes_per_token=kv_bytes_per_token,
        max_context=max_context,
        info=dict(info),
    )
    session.add(llm)
    session.flush()
    return llm


def get_llm(session: Session, name: str) -> Llm:
    """Return the LLM called ``name``.

    Raises:
        NotFoundError: no such LLM; the message lists a few that exist.
    """
    llm = session.scalars(select(Llm).where(Llm.name == name)).one_or_none()
    if llm is None:
        names = session.scalars(select(Llm.name).order_by(Llm.name).limit(10)).all()
        hint = f"; known: {', '.join(names)}" if names else "; none is stored (opdb llm harvest)"
        raise NotFoundError(f"no LLM named {name!r}{hint}")
    return llm


def list_llms(session: Session) -> list[Llm]:
    """Return every stored LLM, by name."""
    return list(session.scalars(select(Llm).order_by(Llm.name)))


def put_llm_step(
    session: Session, llm_id: int, model_id: int, *, phase: str, batch: int, tokens: int
) -> None:
    """Link a step model to its LLM (nothing if the step is linked already)."""
    found = session.scalars(
        select(LlmStep).where(
            LlmStep.llm_id == llm_id,
            LlmStep.phase == phase,
            LlmStep.batch == batch,
            LlmStep.tokens == tokens,
        )
    ).one_or_none()
    if found is None:
        session.add(
            LlmStep(llm_id=llm_id, model_id=model_id, phase=phase, batch=batch, tokens=tokens)
        )
    else:
        found.model_id = model_id
    session.flush()


def llm_steps(session: Session, llm_id: int) -> list[StepModel]:
    """Return the LLM's step models, by phase, batch and tokens."""
    rows = session.execute(
        select(LlmStep.phase, LlmStep.batch, LlmStep.tokens, Model.id, Model.name)
        .join(Model, Model.id == LlmStep.model_id)
        .where(LlmStep.llm_id == llm_id)
        .order_by(LlmStep.phase.desc(), LlmStep.batch, LlmStep.tokens)
    )
    return [StepModel(*row) for row in rows]


def add_generation_run(session: Session, run: GenerationRun) -> GenerationRun:
    """Store one set of generate() runs; return it with its id."""
    session.add(run)
    session.flush()
    return run


def generation_runs(session: Session, llm_id: int, kind_id: int) -> list[GenerationRun]:
    """Return the newest generate() runs of the LLM on the kind per (batch, prompt, new tokens)."""
    rows = session.scalars(
        select(GenerationRun)
        .where(GenerationRun.llm_id == llm_id, GenerationRun.device_kind_id == kind_id)
        .order_by(GenerationRun.created_at.desc(), GenerationRun.id.desc())
    )
    newest: dict[tuple[int, int, int], GenerationRun] = {}
    for row in rows:
        newest.setdefault((row.batch, row.prompt, row.new_tokens), row)
    return [newest[k] for k in sorted(newest)]


def kinds_with_llm(session: Session, llm_id: int) -> list[DeviceKind]:
    """Return the device kinds with generate() runs of the LLM, by name."""
    ran = select(GenerationRun.device_kind_id).where(GenerationRun.llm_id == llm_id)
    return list(
        session.scalars(select(DeviceKind).where(DeviceKind.id.in_(ran)).order_by(DeviceKind.name))
    )
