"""The pages' sign-ins, kept server-side so that each can be ended (``api/ui/session.py``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, String
from sqlalchemy.orm import Mapped, mapped_column

from operator_db.db.models import Base, utcnow


class UiSession(Base):
    """One browser's sign-in: what its cookie stands for, until it expires or is ended.

    Neither the cookie's value nor the token is stored: ``digest`` is the SHA-256 of the cookie's
    random value, ``token_digest`` the SHA-256 of the token it was made with (so taking the token
    out of the settings ends every sign-in made with it).
    """

    __tablename__ = "ui_sessions"

    id: Mapped[int] = mapped_column(primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    token_digest: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
