"""The FastAPI application factory; the store opens at start-up, never at import."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import Depends, FastAPI

from api import limits, metrics, openapi, problems, ui
from api.bodies import BodyGuard
from api.deps import FIGURE_TURNS, SchemaCheck, refuse_nul
from api.retry import RetryRead
from api.routes import router
from api.security import AllowedHosts, SecurityHeaders
from operator_db import __version__
from operator_db.config import Settings, get_settings
from operator_db.db.store import Store
from operator_db.errors import DatabaseError


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the API for ``settings`` (default: the environment's)."""
    chosen = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.settings = chosen
        loop = type(asyncio.get_running_loop())
        logging.getLogger("uvicorn.error").info("event loop: %s.%s", loop.__module__, loop.__name__)
        # A request holds one slot from before its session opens until after it closes, so that
        # no thread ever waits for a pooled connection (see api.deps.session_slot).
        app.state.session_slots = anyio.Semaphore(chosen.api_concurrency)
        app.state.figure_turns = anyio.Semaphore(FIGURE_TURNS)  # taken before a slot
        app.state.schema = SchemaCheck()
        try:
            store = Store.from_settings(chosen)
        except DatabaseError as exc:
            if not exc.retryable:
                raise  # at another revision: an admin's work, not a wait
            # The database is away as the API starts (a host's boot, a rollout): serve anyway,
            # 503 with Retry-After until it answers; the schema is checked then (api.deps).
            store = Store.from_settings(chosen, migrate=False)
            app.state.schema.pending = True
        with store:
            app.state.store = store
            # What is alive now (modules: torch, pandas, SQLAlchemy; ~300,000 objects) lives as
            # long as the process: out of the collector's sight, a full collection takes well
            # under a millisecond instead of ~160 ms, which every request in flight waited for.
            gc.freeze()
            yield

    app = FastAPI(
        title="operator-db",
        version=__version__,
        summary="Per-operator time and energy of PyTorch models.",
        lifespan=lifespan,
        generate_unique_id_function=openapi.operation_id,
        dependencies=[Depends(refuse_nul)],
        docs_url=None,  # /docs is api.ui.reference: no script from a CDN
        redoc_url=None,
    )
    problems.install(app)
    openapi.install(app, chosen)
    # Innermost of the middleware: a read run again is not counted or charged twice.
    app.add_middleware(RetryRead)
    metrics.install(app)
    limits.install(app, chosen)
    app.include_router(router)
    ui.install(app)
    # Outside the in-flight count: a body is bounded, timed and read (after the route's token
    # check) before the request holds a slot.
    app.add_middleware(BodyGuard, settings=chosen)
    # Before any work: a request for another host (DNS rebinding) is refused.
    app.add_middleware(
        AllowedHosts, allowed=chosen.api_allowed_hosts, public_origin=chosen.api_public_origin
    )
    # Outermost: every answer, a refusal of the limits' included, carries the headers.
    app.add_middleware(SecurityHeaders, public_origin=chosen.api_public_origin)
    return app
