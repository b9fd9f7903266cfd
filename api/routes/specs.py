"""Uploading a spec."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, status
from starlette.concurrency import run_in_threadpool

from api.deps import get_settings_dep, get_store
from api.routes.common import WRITE
from api.schemas import IngestedSpec
from operator_db.config import Settings
from operator_db.db.ingest import ingest_specs
from operator_db.db.store import Store
from operator_db.errors import SpecError
from operator_db.ops.admission import admit_spec
from operator_db.specs import load_spec_text

router = APIRouter(tags=["specs"], dependencies=WRITE)

SPEC_BODY = {
    "requestBody": {
        "required": True,
        "description": "A YAML spec (docs/spec-format.md), UTF-8; at most OPDB_MAX_SPEC_BYTES "
        "bytes (413 past it).",
        "content": {
            "application/yaml": {
                "schema": {"type": "string"},
                "example": "spec_version: 3\nmodel: {name: tiny, batch_size: 1}\noperators:\n"
                "- op: torch.nn.Linear\n  form: module\n  dtype: float32\n"
                "  args: {in_features: 8, out_features: 4}\n  inputs: [{shape: [1, 8]}]\n",
            }
        },
    }
}
"""The upload's body in OpenAPI: the route reads it itself, in bounded chunks."""


@router.post("/specs", status_code=status.HTTP_201_CREATED, openapi_extra=SPEC_BODY)
async def upload_spec(
    request: Request,
    settings: Annotated[Settings, Depends(get_settings_dep)],
    store: Annotated[Store, Depends(get_store)],
    name: Annotated[str, Query(min_length=1, max_length=200)] = "upload.yaml",
) -> IngestedSpec:
    """Validate a YAML spec (the request body) whole and store it in one transaction.

    The spec is checked as ``opdb ingest`` checks a file (``ops.admission.admit_spec``): allowed
    ops, typed constructor arguments, tensors within ``OPDB_MAX_TENSOR_NUMEL``.

    Re-uploading the same spec changes nothing; changed content replaces the model's operators.
    The body is bounded by ``OPDB_MAX_SPEC_BYTES`` (413 past it, ``api.bodies``); parsing,
    validation and storing run in a worker thread, so the server goes on answering meanwhile.
    """
    body = await request.body()  # bounded (413) and timed (408) by api.bodies.BodyGuard
    return await run_in_threadpool(_ingest, store, body, name, settings)


def _ingest(store: Store, body: bytes, name: str, settings: Settings) -> IngestedSpec:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(name, "", f"not UTF-8 text (byte {exc.start})") from None
    loaded = admit_spec(
        load_spec_text(text, name),
        max_tensor_numel=settings.max_tensor_numel,
        max_tensor_bytes=settings.max_tensor_bytes,
        max_call_flops=settings.max_call_flops,
        recompute=True,
    )
    with store.transaction() as session:
        [result] = ingest_specs(session, [loaded])
    return IngestedSpec(
        source=result.source,
        model=result.model,
        status=result.status,
        operators=result.operators,
        new_configs=result.new_configs,
        known_configs=result.known_configs,
        disagreeing_configs=result.disagreeing_configs,
        warnings=result.warnings(),
    )
