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
from operator_db.errors import ConnectionLostError, DatabaseError

router = APIRouter(tags=["service"])


@router.get("/health")
def health(store: Annotated[Store, Depends(get_store)]) -> Health:
    """Report whether the database answers and is at the code's schema revision (else 503).

    Open to anyone: it names the database's kind (``sqlite``, ``postgresql``), never its URL, host
    or path. The migration scripts are parsed once (``migrate.head_revision``).
    """
    backend = store.engine.dialect.name
    head = migrate.head_revision()
    try:
        revision = migrate.current_revision(store.engine)
    except ConnectionLostError:  # ended under the read: asked again at once (api.retry)
        raise ConnectionLostError(f"the {backend} database ended the connection") from None
    except Exception:  # noqa: BLE001 - any failure to read the revision: not healthy
        raise DatabaseError(f"the {backend} database is unavailable") from None
    if revision != head:
        raise DatabaseError(
            f"the {backend} database is at revision {revision or 'none'}; the code expects "
            f"{head}: run `opdb db upgrade`"
        )
    return Health(status="ok", database=backend, revision=revision, head=head, version=__version__)


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format."}},
)
def metrics(request: Request, store: Annotated[Store, Depends(get_store)]) -> Response:
    """Prometheus metrics: requests, their latency, and the queue's jobs per kind and status."""
    body, content_type = render_metrics(store, request.app.state.metrics)
    return Response(body, media_type=content_type)
