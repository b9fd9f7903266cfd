"""The pages' sign-ins (``ui_sessions``): start, find, end, and forget the expired."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from operator_db.db.session_tables import UiSession


def add_ui_session(
    session: Session, digest: str, token_digest: str, created: datetime, expires: datetime
) -> None:
    """Store a sign-in whose cookie's value has SHA-256 ``digest``; forget those expired."""
    session.execute(delete(UiSession).where(UiSession.expires_at <= created))
    session.add(
        UiSession(digest=digest, token_digest=token_digest, created_at=created, expires_at=expires)
    )


def find_ui_session(session: Session, digest: str) -> UiSession | None:
    """Return the sign-in whose cookie's value has SHA-256 ``digest``, or None."""
    return session.scalars(select(UiSession).where(UiSession.digest == digest)).one_or_none()


def end_ui_session(session: Session, digest: str) -> None:
    """End the sign-in whose cookie's value has SHA-256 ``digest`` (none: nothing to end)."""
    session.execute(delete(UiSession).where(UiSession.digest == digest))
