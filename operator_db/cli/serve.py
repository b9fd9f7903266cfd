"""``opdb serve``: the REST API under uvicorn."""

from __future__ import annotations

from typing import Annotated

import typer


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="Processes (stateless; share the DB).")] = 1,
) -> None:
    """Serve the REST API (OpenAPI at /docs); the database is OPDB_DATABASE_URL."""
    import uvicorn

    uvicorn.run("api.app:create_app", factory=True, host=host, port=port, workers=workers)
