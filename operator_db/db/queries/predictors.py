"""Stored cost models of operator types (``opdb predict train``): add, the newest, list."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session, defer

from operator_db.db.predictor_tables import CrossPredictor, Predictor


def next_predictor_version(session: Session, kind_id: int) -> int:
    """Return the version a new training run on kind ``kind_id`` gets (1 for the first)."""
    newest = session.scalar(
        select(func.max(Predictor.version)).where(Predictor.device_kind_id == kind_id)
    )
    return (newest or 0) + 1


def has_predictor(session: Session, kind_id: int) -> bool:
    """Whether a predictor of kind ``kind_id`` was ever stored (no model is read)."""
    found = session.scalar(select(Predictor.id).where(Predictor.device_kind_id == kind_id).limit(1))
    return found is not None


def add_predictors(session: Session, rows: Sequence[Predictor]) -> None:
    """Store the rows of one training run (one version of one kind)."""
    session.add_all(rows)
    session.flush()


def latest_predictors(session: Session, kind_id: int) -> list[Predictor]:
    """Return the rows of kind ``kind_id``'s newest version, by target and op ([] for none)."""
    newest = select(func.max(Predictor.version)).where(Predictor.device_kind_id == kind_id)
    query = (
        select(Predictor)
        .where(Predictor.device_kind_id == kind_id, Predictor.version == newest.scalar_subquery())
        .order_by(Predictor.target, Predictor.op)
    )
    return list(session.scalars(query))


def list_predictors(session: Session, kind_ids: Sequence[int] | None = None) -> list[Predictor]:
    """Return every stored predictor without its estimator, newest version first.

    ``kind_ids`` keeps those of these device kinds.
    """
    query = select(Predictor).options(defer(Predictor.estimator))
    if kind_ids is not None:
        query = query.where(Predictor.device_kind_id.in_(list(kind_ids)))
    query = query.order_by(
        Predictor.device_kind_id, Predictor.version.desc(), Predictor.target, Predictor.op
    )
    return list(session.scalars(query))


def add_cross_predictor(session: Session, row: CrossPredictor) -> CrossPredictor:
    """Store a cross-device training run as the next version; return it with its version."""
    newest = session.scalar(select(func.max(CrossPredictor.version)))
    row.version = (newest or 0) + 1
    session.add(row)
    session.flush()
    return row


def latest_cross_predictor(session: Session, *, with_model: bool = True) -> CrossPredictor | None:
    """Return the newest cross-device model (None: never trained); ``with_model`` False: no blob."""
    query = select(CrossPredictor).order_by(CrossPredictor.version.desc()).limit(1)
    if not with_model:
        query = query.options(defer(CrossPredictor.model))
    return session.scalars(query).first()
