"""The routes: health, specs, models. Each is a few lines over library calls."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, status

from api.deps import SessionDep, get_settings_dep, get_store, require_read, require_write
from api.schemas import Health, IngestedSpec, ModelDetail, ModelSummaryOut, OperatorOut
from operator_db import __version__
from operator_db.config import Settings
from operator_db.db import migrate, queries
from operator_db.db.ingest import ingest_specs
from operator_db.errors import SpecError
from operator_db.specs import load_spec_text
from operator_db.store import Store

router = APIRouter()
reads = APIRouter(dependencies=[Depends(require_read)])
writes = APIRouter(dependencies=[Depends(require_write)])


@router.get("/health", tags=["service"])
def health(store: Annotated[Store, Depends(get_store)]) -> Health:
    """Report whether the database answers, and its schema revision."""
    return Health(
        status="ok",
        database=store.display_url,
        revision=migrate.current_revision(store.engine),
        version=__version__,
    )


@writes.post("/specs", status_code=status.HTTP_201_CREATED, tags=["specs"])
async def upload_spec(
    request: Request,
    settings: Annotated[Settings, Depends(get_settings_dep)],
    store: Annotated[Store, Depends(get_store)],
    name: str = "upload.yaml",
) -> IngestedSpec:
    """Validate a YAML spec (the request body) whole and store it in one transaction.

    Re-uploading the same spec changes nothing; changed content replaces the model's operators.
    """
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > settings.max_spec_bytes:
            raise SpecError(name, "", f"body over the limit of {settings.max_spec_bytes} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(name, "", f"not UTF-8 text (byte {exc.start})") from None
    loaded = load_spec_text(text, name)
    with store.transaction() as session:
        [result] = ingest_specs(session, [loaded])
    return IngestedSpec(**vars(result))


@reads.get("/models", tags=["models"])
def list_models(session: SessionDep) -> list[ModelSummaryOut]:
    """List every model with its configurations, calls, FLOPs and parameters."""
    return [ModelSummaryOut(**vars(s)) for s in queries.model_summaries(session)]


@reads.get("/models/{name}", tags=["models"])
def get_model(name: str, session: SessionDep) -> ModelDetail:
    """Return a model with its operator configurations in spec order."""
    model = queries.get_model(session, name)
    summary = next(s for s in queries.model_summaries(session) if s.name == name)
    operators = [OperatorOut(**vars(row)) for row in queries.model_operators(session, name)]
    return ModelDetail(
        **vars(summary),
        inputs=list(model.inputs),
        dtype=model.dtype,
        spec_hash=model.spec_hash,
        operators=operators,
    )


router.include_router(reads)
router.include_router(writes)
