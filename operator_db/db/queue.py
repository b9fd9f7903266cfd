"""The job queue in SQL: enqueue, claim under a lease, renew, finish, fail, hand back.

Claiming is one atomic ``UPDATE ... WHERE id = (SELECT ... LIMIT 1) RETURNING id``: on PostgreSQL
the sub-select takes its row ``FOR UPDATE SKIP LOCKED``, so concurrent workers never wait on or
take the same job; on SQLite the UPDATE takes the database's write lock, which serialises claimers
(each waits up to the busy timeout). A job whose lease expired (its worker died) is claimable
again; every state change after the claim checks that the caller still owns the lease, so a worker
that lost its job can never write a second result for it.

Functions take ``session`` and never commit: the worker commits at each step.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from operator_db.db.models import (
    ACTIVE_JOB_STATUSES,
    DeviceKind,
    Job,
    JobStatus,
    Model,
    ModelOperator,
    OperatorConfig,
    utcnow,
)
from operator_db.db.queries import (
    check_device_kind_name,
    check_not_look_alike,
    get_model,
    get_or_create_device_kind,
    has_model_run,
    measured_config_ids,
    model_configs,
)
from operator_db.errors import ConflictError, NotFoundError


@dataclass(frozen=True)
class EnqueueResult:
    """What enqueueing a model on a device kind did."""

    model: str
    device_kind: str
    queued_configs: int
    already_measured: int
    already_queued: int
    opaque: int
    queued_model_run: bool


def enqueue_model(
    session: Session,
    model_name: str,
    device_kind: str,
    *,
    priority: int = 0,
    priorities: dict[int, int] | None = None,
    with_model_run: bool = True,
    max_attempts: int = 3,
    remeasure: bool = False,
    interleaved: bool = False,
    operators: bool = True,
) -> EnqueueResult:
    """Queue every configuration of a model not yet measured on a kind, and a full-model run.

    ``operators=False`` queues the full-model run alone (a study's whole-model measurement).

    A configuration already measured, or already queued or running (for this model or another), is
    not queued again. ``priorities`` maps config ids to a priority that overrides ``priority``.

    ``interleaved`` queues one model job instead, which measures the whole model and all its
    configurations in interleaved rounds on one host (``measure_interleaved``): the sum and the
    model are then compared at the same moments. It is queued when anything is missing (or with
    ``remeasure``), and remeasures every configuration of the model. A model without a reference
    cannot run whole: its configurations are queued one by one as usual.

    Raises:
        InvalidInputError: ``device_kind`` is empty, over 200 characters or not printable.
        NotFoundError: no such model.
    """
    check_device_kind_name(device_kind)
    model = get_model(session, model_name)
    check_not_look_alike(session, device_kind)
    kind = get_or_create_device_kind(session, device_kind)
    configs = model_configs(session, model.id)
    ids = [mc.config.id for mc in configs if mc.config.form != "opaque"]
    measured = set() if remeasure else measured_config_ids(session, ids, kind.id)
    active = _active_config_ids(session, ids, kind.id)
    now = utcnow()
    todo = [cid for cid in ids if cid not in measured and cid not in active] if operators else []
    if interleaved and operators and model.reference:
        return _enqueue_interleaved(
            session,
            model.id,
            model.name,
            kind,
            ids,
            todo,
            remeasure,
            priority,
            max_attempts,
            len(configs) - len(ids),
        )
    for cid in todo:
        session.add(
            Job(
                target="operator",
                config_id=cid,
                device_kind_id=kind.id,
                priority=(priorities or {}).get(cid, priority),
                max_attempts=max_attempts,
                created_at=now,
                updated_at=now,
            )
        )
    queued_run = False
    if with_model_run:
        has_active, has_run = _model_job_state(session, model.id, kind.id)
        if not has_active and (remeasure or not has_run):
            # The whole model last: its operators' figures are what users compare it with.
            session.add(
                Job(
                    target="model",
                    model_id=model.id,
                    device_kind_id=kind.id,
                    priority=priority - 1,
                    max_attempts=max_attempts,
                    created_at=now,
                    updated_at=now,
                )
            )
            queued_run = True
    session.flush()
    return EnqueueResult(
        model=model.name,
        device_kind=kind.name,
        queued_configs=len(todo),
        already_measured=len([c for c in ids if c in measured]),
        already_queued=len([c for c in ids if c in active and c not in measured]),
        opaque=len(configs) - len(ids),
        queued_model_run=queued_run,
    )


def enqueue_left_out(session: Session, model_names: Sequence[str], device_kind: str) -> int:
    """Queue alone each configuration of the models that is still not measured on the kind.

    After interleaved model jobs (``enqueue_model(interleaved=True)``): a configuration such a
    job could not rebuild is measured on its own, so that its own job says why. Returns how many
    were queued.
    """
    return sum(
        enqueue_model(session, name, device_kind, with_model_run=False).queued_configs
        for name in model_names
    )


def _active_config_ids(session: Session, config_ids: list[int], kind_id: int) -> set[int]:
    """Return the configurations among ``config_ids`` with a queued or running job on the kind."""
    return {
        cid
        for cid in session.scalars(
            select(Job.config_id).where(
                Job.device_kind_id == kind_id,
                Job.status.in_(ACTIVE_JOB_STATUSES),
                Job.config_id.in_(config_ids),
            )
        )
        if cid is not None
    }


def _model_job_state(session: Session, model_id: int, kind_id: int) -> tuple[bool, bool]:
    """Return whether a model job is queued or running on the kind, and whether a run is stored."""
    active = session.scalar(
        select(Job.id).where(
            Job.model_id == model_id,
            Job.device_kind_id == kind_id,
            Job.status.in_(ACTIVE_JOB_STATUSES),
        )
    )
    return active is not None, has_model_run(session, model_id, kind_id)


def _enqueue_interleaved(
    session: Session,
    model_id: int,
    model_name: str,
    kind: DeviceKind,
    ids: list[int],
    todo: list[int],
    remeasure: bool,
    priority: int,
    max_attempts: int,
    opaque: int,
) -> EnqueueResult:
    has_active, has_run = _model_job_state(session, model_id, kind.id)
    queue = not has_active and (remeasure or bool(todo) or not has_run)
    if queue:
        now = utcnow()
        session.add(
            Job(
                target="model",
                model_id=model_id,
                device_kind_id=kind.id,
                priority=priority,
                max_attempts=max_attempts,
                options={"interleaved": True},
                created_at=now,
                updated_at=now,
            )
        )
        session.flush()
    return EnqueueResult(
        model=model_name,
        device_kind=kind.name,
        queued_configs=len(ids) if queue else 0,
        already_measured=0 if queue else len(ids) - len(todo),
        already_queued=0,
        opaque=opaque,
        queued_model_run=queue,
    )


def _claimable(device_kind_id: int, now: datetime, model_ids: Collection[int] | None) -> object:
    claimable = and_(
        Job.device_kind_id == device_kind_id,
        Job.attempts < Job.max_attempts,
        or_(
            Job.status == JobStatus.QUEUED,
            and_(Job.status == JobStatus.RUNNING, Job.lease_expires_at < now),
        ),
    )
    if model_ids is None:
        return claimable
    ids = sorted(set(model_ids))
    their_configs = select(ModelOperator.config_id).where(ModelOperator.model_id.in_(ids))
    return and_(claimable, or_(Job.model_id.in_(ids), Job.config_id.in_(their_configs)))


def has_claimable_job(
    session: Session, device_kind_id: int, *, model_ids: Collection[int] | None = None
) -> bool:
    """Whether a job of the kind could be claimed now (:func:`claim_job`'s rule); takes nothing."""
    now = utcnow()
    found = session.execute(
        select(Job.id).where(_claimable(device_kind_id, now, model_ids)).limit(1)  # type: ignore[arg-type]
    ).first()
    return found is not None


def claim_job(
    session: Session,
    device_kind_id: int,
    owner: str,
    lease_s: float,
    *,
    model_ids: Collection[int] | None = None,
) -> Job | None:
    """Take the most urgent claimable job of a kind under a lease of ``lease_s`` seconds.

    ``model_ids`` restricts it to those models' jobs: their full-model runs and the jobs of their
    configurations (shared configurations included). Returns None when there is nothing to do.
    The caller commits at once, so the lease is visible.
    """
    now = utcnow()
    pick = (
        select(Job.id)
        .where(_claimable(device_kind_id, now, model_ids))  # type: ignore[arg-type]
        .order_by(Job.priority.desc(), Job.id)
        .limit(1)
    )
    if session.get_bind().dialect.name == "postgresql":
        pick = pick.with_for_update(skip_locked=True)
    job_id = session.execute(
        update(Job)
        .where(Job.id == pick.scalar_subquery())
        .values(
            status=JobStatus.RUNNING,
            lease_owner=owner,
            lease_expires_at=now + timedelta(seconds=lease_s),
            attempts=Job.attempts + 1,
            updated_at=now,
        )
        .returning(Job.id)
        .execution_options(synchronize_session=False)
    ).scalar_one_or_none()
    if job_id is None:
        return None
    return session.get(Job, job_id, populate_existing=True)


def _owned(job_id: int, owner: str) -> object:
    return and_(Job.id == job_id, Job.lease_owner == owner, Job.status == JobStatus.RUNNING)


def renew_lease(session: Session, job_id: int, owner: str, lease_s: float) -> bool:
    """Extend the lease by ``lease_s`` seconds from now; False if the job is no longer ours."""
    now = utcnow()
    result = session.execute(
        update(Job)
        .where(_owned(job_id, owner))  # type: ignore[arg-type]
        .values(lease_expires_at=now + timedelta(seconds=lease_s), updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def finish_job(session: Session, job_id: int, owner: str) -> bool:
    """Mark the job done; False (and nothing changed) if the lease was lost meanwhile.

    The caller writes the result in the same transaction and rolls back when this returns False.
    """
    now = utcnow()
    result = session.execute(
        update(Job)
        .where(_owned(job_id, owner))  # type: ignore[arg-type]
        .values(
            status=JobStatus.DONE,
            lease_owner=None,
            lease_expires_at=None,
            updated_at=now,
            finished_at=now,
        )
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def fail_job(
    session: Session, job_id: int, owner: str, error: str, *, retry: bool = True
) -> str | None:
    """Record a failed attempt: back to the queue, or ``failed`` once attempts are used up.

    ``retry=False`` fails the job at once (an error that would only repeat, like a bad spec).
    Returns the new status, or None if the lease was lost meanwhile.
    """
    job = session.get(Job, job_id, populate_existing=True)
    if job is None or job.lease_owner != owner or job.status != JobStatus.RUNNING:
        return None
    now = utcnow()
    job.last_error = error[:2000]
    job.lease_owner = None
    job.lease_expires_at = None
    job.updated_at = now
    if not retry or job.attempts >= job.max_attempts:
        job.status = JobStatus.FAILED
        job.finished_at = now
    else:
        job.status = JobStatus.QUEUED
    session.flush()
    return job.status


def release_job(session: Session, job_id: int, owner: str) -> bool:
    """Hand an unfinished job back to the queue (a worker stopping); the attempt is not counted."""
    now = utcnow()
    result = session.execute(
        update(Job)
        .where(_owned(job_id, owner))  # type: ignore[arg-type]
        .values(
            status=JobStatus.QUEUED,
            lease_owner=None,
            lease_expires_at=None,
            attempts=Job.attempts - 1,
            updated_at=now,
        )
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def expire_exhausted(session: Session) -> int:
    """Mark failed the running jobs whose lease expired after their last allowed attempt."""
    now = utcnow()
    result = session.execute(
        update(Job)
        .where(
            Job.status == JobStatus.RUNNING,
            Job.lease_expires_at < now,
            Job.attempts >= Job.max_attempts,
        )
        .values(
            status=JobStatus.FAILED,
            last_error="lease expired on the last attempt (worker died or hung)",
            lease_owner=None,
            lease_expires_at=None,
            updated_at=now,
            finished_at=now,
        )
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def queue_counts_by_kind(
    session: Session, device_kind_id: int | None = None
) -> list[tuple[str, str, int]]:
    """Return (device kind name, status, jobs) per kind and status with jobs, sorted.

    ``device_kind_id`` keeps one kind; None gives all.
    """
    query = (
        select(DeviceKind.name, Job.status, func.count())
        .join(Job, Job.device_kind_id == DeviceKind.id)
        .group_by(DeviceKind.name, Job.status)
        .order_by(DeviceKind.name, Job.status)
    )
    if device_kind_id is not None:
        query = query.where(DeviceKind.id == device_kind_id)
    return [(name, status, int(n)) for name, status, n in session.execute(query)]


def queue_counts(session: Session, device_kind_id: int | None = None) -> dict[str, int]:
    """Return the number of jobs per status (of one kind, or all kinds together)."""
    counts: dict[str, int] = {}
    for _kind, status, n in queue_counts_by_kind(session, device_kind_id):
        counts[status] = counts.get(status, 0) + n
    return counts


def job_target_name(session: Session, job: Job) -> str:
    """Return a short description of what a job measures (for logs)."""
    if job.config_id is not None:
        cfg = session.get(OperatorConfig, job.config_id)
        if cfg is None:
            raise NotFoundError(f"job {job.id}: configuration {job.config_id} is gone")
        return f"{cfg.op} {' '.join('x'.join(map(str, t['shape'])) for t in cfg.inputs)}"
    model = session.get(Model, job.model_id)
    name = model.name if model is not None else f"#{job.model_id}"
    if (job.options or {}).get("interleaved"):
        return f"model {name} with its operators, interleaved"
    return f"model {name}"


def list_jobs(
    session: Session,
    *,
    status: str | None = None,
    device_kind_id: int | None = None,
    model_id: int | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> tuple[list[Job], int]:
    """Return a page of jobs, newest first, and how many match in all.

    Filters: ``status``, ``device_kind_id``, ``model_id`` (the model's own job).
    """
    where = []
    if status is not None:
        where.append(Job.status == status)
    if device_kind_id is not None:
        where.append(Job.device_kind_id == device_kind_id)
    if model_id is not None:
        where.append(Job.model_id == model_id)
    total = session.scalar(select(func.count()).select_from(Job).where(*where)) or 0
    jobs = session.scalars(
        select(Job).where(*where).order_by(Job.id.desc()).offset(offset).limit(limit)
    )
    return list(jobs), total


def get_job(session: Session, job_id: int) -> Job:
    """Return job ``job_id``.

    Raises:
        NotFoundError: no such job.
    """
    job = session.get(Job, job_id)
    if job is None:
        raise NotFoundError(f"no job {job_id}")
    return job


def cancel_job(session: Session, job_id: int) -> Job:
    """Cancel a queued or running job; a worker measuring it then drops its result.

    Flushes; the caller commits.

    Raises:
        NotFoundError: no such job.
        ConflictError: the job has ended already (done, failed or cancelled).
    """
    job = get_job(session, job_id)
    if job.status not in ACTIVE_JOB_STATUSES:
        raise ConflictError(f"job {job_id} has ended already ({job.status}): nothing to cancel")
    now = utcnow()
    job.status = JobStatus.CANCELLED
    job.lease_owner = None
    job.lease_expires_at = None
    job.updated_at = now
    job.finished_at = now
    session.flush()
    return job
