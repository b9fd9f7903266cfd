"""Dependencies of the routes: settings, the store, a per-request transaction, the token check."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from operator_db.config import Settings
from operator_db.db.store import Store
from operator_db.errors import PermissionDeniedError


def get_settings_dep(request: Request) -> Settings:
    """Return the settings the app was created with."""
    settings: Settings = request.app.state.settings
    return settings


def get_store(request: Request) -> Store:
    """Return the store opened when the app started."""
    store: Store = request.app.state.store
    return store


def get_session(store: Annotated[Store, Depends(get_store)]) -> Iterator[Session]:
    """Yield a session; one request is one transaction, committed when the route returns."""
    with store.transaction() as session:
        yield session


def _check_token(settings: Settings, authorization: str | None, what: str) -> None:
    if settings.api_token is None:
        raise PermissionDeniedError(f"{what} are disabled: the server has no OPDB_API_TOKEN set")
    expected = f"Bearer {settings.api_token.get_secret_value()}"
    if authorization is None or not secrets.compare_digest(authorization, expected):
        raise PermissionDeniedError(f"{what} need the header 'Authorization: Bearer <token>'")


def require_write(
    settings: Annotated[Settings, Depends(get_settings_dep)],
    authorization: Annotated[str | None, Header()] = None,
) -> None:
    """Refuse a write without the configured bearer token."""
    _check_token(settings, authorization, "writes")


def require_read(
    settings: Annotated[Settings, Depends(get_settings_dep)],
    authorization: Annotated[str | None, Header()] = None,
) -> None:
    """Refuse a read without the token, where reads are configured to need it."""
    if settings.api_protect_reads:
        _check_token(settings, authorization, "reads")


SessionDep = Annotated[Session, Depends(get_session)]
