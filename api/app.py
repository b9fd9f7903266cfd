"""The FastAPI application factory; the store opens at start-up, never at import."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from api.routes import router
from operator_db import __version__
from operator_db.config import Settings, get_settings
from operator_db.db.store import Store
from operator_db.errors import (
    ConflictError,
    DatabaseError,
    NotFoundError,
    OperatorDBError,
    PermissionDeniedError,
    SpecError,
)

_STATUS: list[tuple[type[OperatorDBError], int]] = [
    (SpecError, 422),
    (NotFoundError, 404),
    (ConflictError, 409),
    (PermissionDeniedError, 403),
    (DatabaseError, 503),
    (OperatorDBError, 400),
]


def http_status(exc: OperatorDBError) -> int:
    """Map a domain error to its HTTP status (the only place that knows about HTTP codes)."""
    return next(code for cls, code in _STATUS if isinstance(exc, cls))


async def _domain_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, OperatorDBError)
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, PermissionDeniedError) else None
    return JSONResponse(
        {"error": type(exc).__name__, "detail": str(exc)},
        status_code=http_status(exc),
        headers=headers,
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the API for ``settings`` (default: the environment's)."""
    chosen = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.settings = chosen
        with Store.from_settings(chosen) as store:
            app.state.store = store
            yield

    app = FastAPI(
        title="operator-db",
        version=__version__,
        summary="Per-operator time and energy of PyTorch models.",
        lifespan=lifespan,
    )
    app.add_exception_handler(OperatorDBError, _domain_error)
    app.include_router(router)
    return app
