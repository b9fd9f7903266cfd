"""The API under load: no thread waits for a pooled connection; no full collection stalls it."""

from __future__ import annotations

import asyncio
import gc

import anyio.to_thread
import httpx
from fastapi.testclient import TestClient

from api.app import create_app
from operator_db.config import Settings
from operator_db.db.engine import POOL_OVERFLOW, POOL_SIZE
from operator_db.db.ingest import ingest_specs
from operator_db.db.store import Store
from operator_db.specs import load_spec
from tests.helpers import EXAMPLE_SPECS

REQUESTS = 40
"""More than the connections a process keeps (POOL_SIZE + POOL_OVERFLOW = 15)."""


def test_the_concurrency_limit_stays_below_the_connection_pool() -> None:
    limit = Settings.model_fields["api_concurrency"].metadata
    assert max(m.le for m in limit if hasattr(m, "le")) == POOL_SIZE + POOL_OVERFLOW - 1


def test_more_requests_than_connections_on_two_threads_all_answer(db_url: str) -> None:
    """Sync routes hold their session while their answer is validated on a worker thread.

    With two worker threads and 40 requests at once, sessions would otherwise take every pooled
    connection and wait for a thread while both threads wait for a connection, until the pool's
    30 s timeout.
    """
    with Store.open(db_url) as store, store.transaction() as session:
        ingest_specs(session, [load_spec(EXAMPLE_SPECS / "mlp-small-b8.yaml", max_bytes=10**6)])
    app = create_app(Settings(database_url=db_url))

    async def run() -> list[int]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = 2
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                answers = await asyncio.wait_for(
                    asyncio.gather(*(client.get("/models/mlp-small-b8") for _ in range(REQUESTS))),
                    timeout=20,
                )
        return [answer.status_code for answer in answers]

    assert asyncio.run(run()) == [200] * REQUESTS


def test_what_lives_from_start_up_is_out_of_the_collectors_sight(db_url: str) -> None:
    """A full collection over torch, pandas and SQLAlchemy's objects took ~160 ms per process."""
    gc.unfreeze()
    try:
        with TestClient(create_app(Settings(database_url=db_url))) as client:
            assert client.get("/health").status_code == 200
            assert gc.get_freeze_count() > 100_000
    finally:
        gc.unfreeze()
