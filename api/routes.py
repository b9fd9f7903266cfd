"""The routes: health, specs, models. Each is a few lines over library calls."""

from __future__ import annotations

import json
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Request, status
from starlette.concurrency import run_in_threadpool

from api.deps import (
    ReadSessionDep,
    SessionDep,
    get_settings_dep,
    get_store,
    require_read,
    require_write,
)
from api.schemas import (
    EnqueueIn,
    EnqueueOut,
    EstimateOut,
    Health,
    IngestedSpec,
    ModelDetail,
    ModelSummaryOut,
    OperatorOut,
)
from operator_db import __version__
from operator_db.config import Settings
from operator_db.db import migrate, queries, queue
from operator_db.db.ingest import ingest_specs
from operator_db.db.store import Store
from operator_db.errors import SpecError, TooLargeError
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.peaks import best_peaks, peaks_for_kind
from operator_db.estimate.significant import enqueue_significant_first
from operator_db.specs import load_spec_text

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


SPEC_BODY = {
    "requestBody": {
        "required": True,
        "description": "A YAML spec (docs/spec-format.md), UTF-8; at most OPDB_MAX_SPEC_BYTES "
        "bytes (413 past it).",
        "content": {
            "application/yaml": {
                "schema": {"type": "string"},
                "example": "spec_version: 2\nmodel: {name: tiny, batch_size: 1}\noperators:\n"
                "- op: torch.nn.Linear\n  form: module\n  dtype: float32\n"
                "  args: {in_features: 8, out_features: 4}\n  inputs: [{shape: [1, 8]}]\n",
            }
        },
    }
}
"""The upload's body in OpenAPI: the route reads it itself, in bounded chunks."""


@writes.post("/specs", status_code=status.HTTP_201_CREATED, tags=["specs"], openapi_extra=SPEC_BODY)
async def upload_spec(
    request: Request,
    settings: Annotated[Settings, Depends(get_settings_dep)],
    store: Annotated[Store, Depends(get_store)],
    name: str = "upload.yaml",
) -> IngestedSpec:
    """Validate a YAML spec (the request body) whole and store it in one transaction.

    Re-uploading the same spec changes nothing; changed content replaces the model's operators.
    The body is read in bounded chunks (413 past the limit); parsing, validation and storing run
    in a worker thread, so the server goes on answering meanwhile.
    """
    limit = settings.max_spec_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise TooLargeError(f"{name}: body of {declared} bytes, over the limit of {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise TooLargeError(f"{name}: body over the limit of {limit} bytes")
    return await run_in_threadpool(_ingest, store, bytes(body), name)


def _ingest(store: Store, body: bytes, name: str) -> IngestedSpec:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(name, "", f"not UTF-8 text (byte {exc.start})") from None
    loaded = load_spec_text(text, name)
    with store.transaction() as session:
        [result] = ingest_specs(session, [loaded])
    return IngestedSpec(**vars(result))


@reads.get("/models", tags=["models"])
def list_models(session: ReadSessionDep) -> list[ModelSummaryOut]:
    """List every model with its configurations, calls, FLOPs and parameters."""
    return [ModelSummaryOut(**vars(s)) for s in queries.model_summaries(session)]


@reads.get("/models/{name}", tags=["models"])
def get_model(name: str, session: ReadSessionDep) -> ModelDetail:
    """Return a model with its operator configurations in spec order."""
    model = queries.get_model(session, name)
    [summary] = queries.model_summaries(session, name=name)
    operators = [OperatorOut(**vars(row)) for row in queries.model_operators(session, name)]
    return ModelDetail(
        **vars(summary),
        inputs=list(model.inputs),
        dtype=model.dtype,
        spec_hash=model.spec_hash,
        operators=operators,
    )


@reads.get("/models/{name}/estimate", tags=["estimates"])
def get_estimate(
    name: str,
    session: ReadSessionDep,
    device_kind: str,
    timing: Literal["eager", "graph"] = "eager",
    energy: Literal["total", "dynamic"] = "total",
    cache_mode: Literal["warm", "cold"] = "warm",
) -> EstimateOut:
    """Compose the model's time and energy on a device kind from its measured operators."""
    model = queries.get_model(session, name)
    peaks = best_peaks(peaks_for_kind(session, device_kind), model.dtype)
    est = estimate_model(
        session,
        name,
        device_kind,
        timing=timing,
        energy=energy,
        peaks=peaks,
        cache_mode=cache_mode,
    )
    return EstimateOut(
        **est.summary(),
        by_op=json.loads(est.by_op.to_json(orient="records")),
        configurations=json.loads(est.configs.to_json(orient="records")),
    )


@writes.post("/models/{name}/jobs", status_code=status.HTTP_201_CREATED, tags=["jobs"])
def enqueue(name: str, body: EnqueueIn, session: SessionDep) -> EnqueueOut:
    """Queue the model's configurations not measured on the kind yet, and a full-model run."""
    result = enqueue_significant_first(
        session,
        name,
        body.device_kind,
        coverage=body.coverage,
        priority=body.priority,
        with_model_run=body.model_run,
        interleaved=body.interleaved and body.model_run,
    )
    return EnqueueOut(**vars(result))


@reads.get("/jobs", tags=["jobs"])
def job_counts(session: ReadSessionDep) -> dict[str, int]:
    """Count the jobs per status."""
    return queue.queue_counts(session)


router.include_router(reads)
router.include_router(writes)
