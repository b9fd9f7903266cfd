"""The FastAPI application factory; the store opens at start-up, never at import."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from api import metrics, openapi, problems
from api.deps import refuse_nul
from api.routes import router
from operator_db import __version__
from operator_db.config import Settings, get_settings
from operator_db.db.store import Store


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
        generate_unique_id_function=openapi.operation_id,
        dependencies=[Depends(refuse_nul)],
    )
    problems.install(app)
    openapi.install(app, chosen)
    metrics.install(app)
    app.include_router(router)
    return app
