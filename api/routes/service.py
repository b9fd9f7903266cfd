"""Health and Prometheus metrics."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from api.deps import get_store
from api.metrics import render_metrics
from api.schemas import Health
from operator_db import __version__
from operator_db.db import migrate
from operator_db.db.store import Store
from operator_db.errors import DatabaseError

router = APIRouter(tags=["service"])


@router.get("/health")
def health(store: Annotated[Store, Depends(get_store)]) -> Health:
    """Report whether the database answers and is at the code's schema revision (else 503)."""
    head = migrate.head_revision()
    try:
        revision = migrate.current_revision(store.engine)
    except DatabaseError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to read the revision: not healthy
        raise DatabaseError(
            f"database {store.display_url} is unavailable: {type(exc).__name__}"
        ) from None
    if revision != head:
        raise DatabaseError(
            f"database {store.display_url} is at revision {revision or 'none'}; "
            f"the code expects {head}: run `opdb db upgrade`"
        )
    return Health(
        status="ok", database=store.display_url, revision=revision, head=head, version=__version__
    )


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format."}},
)
def metrics(request: Request, store: Annotated[Store, Depends(get_store)]) -> Response:
    """Prometheus metrics: requests, their latency, and the queue's jobs per kind and status."""
    body, content_type = render_metrics(store, request.app.state.metrics)
    return Response(body, media_type=content_type)
