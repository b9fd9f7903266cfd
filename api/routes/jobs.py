"""Jobs: list, counts, detail, enqueue a model, cancel."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, status

from api.deps import ReadSessionDep, SessionDep
from api.routes.common import READ, WRITE, Limit, Offset
from api.schemas import EnqueueIn, EnqueueOut, JobOut, Page
from operator_db.db import queries, queue
from operator_db.db.models import DeviceKind, Job, Model, OperatorConfig
from operator_db.estimate.significant import enqueue_significant_first

router = APIRouter(tags=["jobs"], dependencies=READ)
writes = APIRouter(tags=["jobs"], dependencies=WRITE)

JobId = Annotated[int, Path(ge=1, le=2**31 - 1)]
"""A job id (the column is a 32-bit integer on PostgreSQL)."""


def _job_out(session: ReadSessionDep | SessionDep, job: Job) -> JobOut:
    config = session.get(OperatorConfig, job.config_id) if job.config_id is not None else None
    model = session.get(Model, job.model_id) if job.model_id is not None else None
    kind = session.get(DeviceKind, job.device_kind_id)
    return JobOut(
        id=job.id,
        target=job.target,
        config_key=None if config is None else config.key,
        model=None if model is None else model.name,
        device_kind="" if kind is None else kind.name,
        status=job.status,
        priority=job.priority,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        lease_owner=job.lease_owner,
        lease_expires_at=job.lease_expires_at,
        last_error=job.last_error,
        options=dict(job.options or {}),
        created_at=job.created_at,
        updated_at=job.updated_at,
        finished_at=job.finished_at,
    )


@router.get("/jobs")
def list_jobs(
    session: ReadSessionDep,
    limit: Limit = 100,
    offset: Offset = 0,
    status_: Annotated[
        Literal["queued", "running", "done", "failed", "cancelled"] | None,
        Query(alias="status"),
    ] = None,
    device_kind: Annotated[str | None, Query(max_length=200)] = None,
    model: Annotated[str | None, Query(max_length=200)] = None,
) -> Page[JobOut]:
    """List jobs, newest first."""
    kind_id = None if device_kind is None else queries.get_device_kind(session, device_kind).id
    model_id = None if model is None else queries.get_model(session, model).id
    jobs, total = queue.list_jobs(
        session,
        status=status_,
        device_kind_id=kind_id,
        model_id=model_id,
        limit=limit,
        offset=offset,
    )
    return Page(items=[_job_out(session, j) for j in jobs], total=total, limit=limit, offset=offset)


@router.get("/jobs/counts")
def job_counts(session: ReadSessionDep) -> dict[str, int]:
    """Count the jobs per status (all device kinds)."""
    return queue.queue_counts(session)


@router.get("/jobs/{job_id}")
def get_job(job_id: JobId, session: ReadSessionDep) -> JobOut:
    """Return one job."""
    return _job_out(session, queue.get_job(session, job_id))


@writes.post("/jobs/{job_id}/cancel")
def cancel_job(job_id: JobId, session: SessionDep) -> JobOut:
    """Cancel a queued or running job (409 if it has ended); a worker drops its result."""
    return _job_out(session, queue.cancel_job(session, job_id))


@writes.post("/models/{name}/jobs", status_code=status.HTTP_201_CREATED)
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


router.include_router(writes)
