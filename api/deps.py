"""Dependencies of the routes: settings, the store, per-request transactions, the token checks."""

from __future__ import annotations

import secrets
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Literal

import anyio
from fastapi import Depends, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from operator_db.config import Settings
from operator_db.db.store import Store
from operator_db.errors import (
    AuthenticationError,
    DatabaseError,
    PermissionDeniedError,
    SchemaMismatchError,
)

Right = Literal["read", "write"]

bearer = HTTPBearer(
    auto_error=False,
    description="A token of the server (OPDB_API_TOKEN, OPDB_API_WRITE_TOKENS, "
    "OPDB_API_READ_TOKENS). Writes need a write token; reads need one only where the server "
    "protects reads.",
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]


async def refuse_nul(request: Request) -> None:
    """Refuse a NUL character in the path or the query: no name holds one (nor can PostgreSQL)."""
    where = "path" if "\x00" in request.scope["path"] else None
    if where is None and any("\x00" in k + v for k, v in request.query_params.multi_items()):
        where = "query"
    if where is not None:
        raise RequestValidationError(
            [{"loc": (where,), "msg": "a NUL character is not allowed", "type": "value_error"}]
        )


async def get_settings_dep(request: Request) -> Settings:
    """Return the settings the app was created with."""
    settings: Settings = request.app.state.settings
    return settings


class SchemaCheck:
    """The schema check of a store opened while its database was away, made once it answers."""

    def __init__(self) -> None:
        self.pending = False
        """True until the check has passed (set where the API started without it)."""
        self._lock = threading.Lock()

    def run(self, store: Store) -> None:
        """Check the schema once (one thread at a time); a failure leaves it pending.

        Raises:
            DatabaseError: the database is still away (a 503 with Retry-After), or at another
                revision (a 503 that says to run ``opdb db upgrade``).
        """
        backend = store.engine.dialect.name  # named, never the URL (as /health does)
        with self._lock:
            if not self.pending:
                return
            try:
                store.ensure_current()
            except SchemaMismatchError:
                raise SchemaMismatchError(
                    f"the {backend} database is not at the code's schema revision: "
                    "run `opdb db upgrade`"
                ) from None
            except DatabaseError:
                raise DatabaseError(f"the {backend} database is unavailable") from None
            self.pending = False


async def get_store(request: Request) -> Store:
    """Return the store opened when the app started, its schema checked."""
    store: Store = request.app.state.store
    check: SchemaCheck | None = getattr(request.app.state, "schema", None)
    if check is not None and check.pending:
        await anyio.to_thread.run_sync(check.run, store)
    return store


async def session_slot(request: Request) -> AsyncIterator[None]:
    """Hold one of the process's ``OPDB_API_CONCURRENCY`` slots for the request's session.

    Waited for in the event loop, before the session opens, and released after it closes. A sync
    route's response is validated on a worker thread after the route returns, while its session
    still holds a connection: without the slots, threads waiting for a pooled connection could
    hold every worker thread, and the sessions holding the connections would wait for a thread
    (a deadlock until the pool's 30 s timeout). With fewer slots than connections, a thread never
    waits for one.
    """
    async with request.app.state.session_slots:
        yield


Slot = Annotated[None, Depends(session_slot, scope="function")]

FIGURE_TURNS = 2
"""Requests for a drawn figure (a roofline) that may hold a session slot at once, per process."""


async def figure_turn(request: Request) -> AsyncIterator[None]:
    """Wait for one of the process's ``FIGURE_TURNS`` turns to draw, before the session's slot.

    A figure is drawn one at a time (``api.figures``): the requests waiting for it held their
    session slots meanwhile, so a burst of distinct figures held every slot and a plain
    ``/models`` waited seconds for one. Waiting here, in the event loop, they hold none.
    """
    async with request.app.state.figure_turns:
        yield


FIGURE_TURN = Depends(figure_turn, scope="function")
"""A route dependency that draws a figure (listed before its session)."""


def get_session(store: Annotated[Store, Depends(get_store)], _slot: Slot) -> Iterator[Session]:
    """Yield a write session; one request is one transaction, committed when the route returns.

    Committed before the response is sent (``SessionDep``'s ``scope="function"``): a commit that
    fails is answered 503 (``DatabaseError``) or 507 (``DiskFullError``), never a success whose
    write was lost.
    """
    with store.transaction() as session:
        yield session


def get_read_session(store: Annotated[Store, Depends(get_store)], _slot: Slot) -> Iterator[Session]:
    """Yield a read-only session: it takes no write lock (SQLite) and commits nothing.

    Ended before the response is sent, as the write session is: a database failure at its end is
    a 503 problem document, not a connection dropped after the response began (with a yield
    dependency's default scope, ``"request"``, its end ran after the response was sent).
    """
    with store.transaction(read_only=True) as session:
        yield session


def server_tokens(settings: Settings) -> list[tuple[bytes, Right]]:
    """Return the server's tokens (UTF-8) with what each may do, the write tokens first."""
    write = [settings.api_token] if settings.api_token is not None else []
    write += settings.api_write_tokens
    return [(t.get_secret_value().encode(), "write") for t in write] + [
        (t.get_secret_value().encode(), "read") for t in settings.api_read_tokens
    ]


def token_right(settings: Settings, token: str) -> Right | None:
    """Return what ``token`` may do (``read`` or ``write``), or None for an unknown token.

    Compared in constant time as UTF-8 bytes, so a non-ASCII token is simply unknown.
    """
    given = token.encode("utf-8", "surrogateescape")
    found: Right | None = None
    for expected, right in server_tokens(settings):
        if secrets.compare_digest(given, expected) and found != "write":
            found = right
    return found


def check_token(
    settings: Settings, credentials: HTTPAuthorizationCredentials | None, need: Right
) -> None:
    """Refuse ``credentials`` where they may not ``need`` (the routes' and ``api.bodies``' check).

    Raises:
        AuthenticationError: no token, or one the server does not know (401).
        PermissionDeniedError: writes are disabled, or the token may only read (403).
    """
    what = "writes" if need == "write" else "reads"
    if need == "write" and not any(right == "write" for _, right in server_tokens(settings)):
        raise PermissionDeniedError(
            "writes are disabled: the server has no write token (OPDB_API_TOKEN) set"
        )
    if credentials is None:
        raise AuthenticationError(f"{what} need the header 'Authorization: Bearer <token>'")
    right = token_right(settings, credentials.credentials)
    if right is None:
        raise AuthenticationError("the bearer token is not valid")
    if need == "write" and right != "write":
        raise PermissionDeniedError("this token may read, not write")


async def require_write(
    settings: Annotated[Settings, Depends(get_settings_dep)], credentials: Credentials = None
) -> None:
    """Refuse a write without a write token (401 without or with a bad one, 403 read-only)."""
    check_token(settings, credentials, "write")


async def require_read(
    settings: Annotated[Settings, Depends(get_settings_dep)], credentials: Credentials = None
) -> None:
    """Refuse a read without a token, where reads are configured to need one."""
    if settings.api_protect_reads:
        check_token(settings, credentials, "read")


SessionDep = Annotated[Session, Depends(get_session, scope="function")]
"""A write transaction (routes that change the database), committed before the response."""
ReadSessionDep = Annotated[Session, Depends(get_read_session, scope="function")]
"""A read-only transaction (routes that only read), ended before the response."""
