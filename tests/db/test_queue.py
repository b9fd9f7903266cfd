"""The SQL job queue: enqueue without duplicates, claim by priority under leases, retries."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, update

from operator_db.db import queries, queue
from operator_db.db.ingest import ingest_specs
from operator_db.db.models import Job, Measurement, utcnow
from operator_db.db.store import Store
from operator_db.errors import InvalidInputError
from operator_db.specs import parse_spec
from tests.helpers import linear_op, relu_op, result_row, spec_dict

KIND = "fake:FakeGPU"
PRINTABLE = "names hold printable characters only"


def seed(store: Store) -> None:
    a = parse_spec(spec_dict("a", [linear_op(), relu_op([4, 32])]), "a.yaml")
    b = parse_spec(spec_dict("b", [linear_op(count=2), relu_op([4, 64])]), "b.yaml")
    with store.transaction() as session:
        ingest_specs(session, [a, b])


def add_measurement(store: Store, config_id: int, kind_id: int) -> None:
    with store.transaction() as session:
        session.add(Measurement(config_id=config_id, device_kind_id=kind_id, **result_row()))


def test_enqueue_skips_shared_measured_and_active(store: Store) -> None:
    seed(store)
    with store.transaction() as session:
        first = queue.enqueue_model(session, "a", KIND)
    assert (first.queued_configs, first.already_queued, first.queued_model_run) == (2, 0, True)
    with store.transaction() as session:
        second = queue.enqueue_model(session, "b", KIND)
        kind_id = queries.get_device_kind(session, KIND).id
    # b's Linear is a's Linear: already queued, not queued twice.
    assert (second.queued_configs, second.already_queued) == (1, 1)
    with store.transaction() as session:
        again = queue.enqueue_model(session, "a", KIND)
        assert (again.queued_configs, again.already_queued, again.queued_model_run) == (0, 2, False)
        assert queue.queue_counts(session) == {"queued": 5}
        # Finish everything of a's; a measured configuration is not queued again.
        config_id = session.scalars(select(Job.config_id).where(Job.target == "operator")).first()
        session.execute(update(Job).values(status="done"))
    assert config_id is not None
    add_measurement(store, config_id, kind_id)
    with store.transaction() as session:
        redo = queue.enqueue_model(session, "a", KIND, with_model_run=False)
    assert (redo.queued_configs, redo.already_measured) == (1, 1)


def test_claim_order_lease_and_finish(store: Store) -> None:
    seed(store)
    with store.transaction() as session:
        queue.enqueue_model(session, "a", KIND, priority=5)
        queue.enqueue_model(session, "b", KIND, priority=1)
        kind_id = queries.get_device_kind(session, KIND).id
    claimed = []
    while True:
        with store.transaction() as session:
            job = queue.claim_job(session, kind_id, "w1", lease_s=60)
            if job is None:
                break
            claimed.append((job.target, job.priority, job.attempts, job.lease_owner))
            assert queue.finish_job(session, job.id, "w1")
    assert claimed == [
        ("operator", 5, 1, "w1"),
        ("operator", 5, 1, "w1"),
        ("model", 4, 1, "w1"),
        ("operator", 1, 1, "w1"),
        ("model", 0, 1, "w1"),
    ]
    with store.transaction() as session:
        assert queue.queue_counts(session, kind_id) == {"done": 5}


def test_expired_lease_is_taken_over_and_old_owner_cannot_finish(store: Store) -> None:
    seed(store)
    with store.transaction() as session:
        queue.enqueue_model(session, "a", KIND, with_model_run=False)
        kind_id = queries.get_device_kind(session, KIND).id
    with store.transaction() as session:
        job = queue.claim_job(session, kind_id, "dead", lease_s=60)
        assert job is not None
        job_id = job.id
    with store.transaction() as session:  # the next claim takes the other job, not the leased one
        other = queue.claim_job(session, kind_id, "w2", lease_s=60)
        assert other is not None and other.id != job_id
        assert queue.finish_job(session, other.id, "w2")
    with store.transaction() as session:
        assert queue.claim_job(session, kind_id, "w2", lease_s=60) is None
        session.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    with store.transaction() as session:
        taken = queue.claim_job(session, kind_id, "w2", lease_s=60)
        assert taken is not None
        assert (taken.id, taken.attempts, taken.lease_owner) == (job_id, 2, "w2")
    with store.transaction() as session:
        assert not queue.renew_lease(session, job_id, "dead", 60)
        assert not queue.finish_job(session, job_id, "dead")
        assert queue.renew_lease(session, job_id, "w2", 60)
        assert queue.finish_job(session, job_id, "w2")


def test_failures_retry_then_fail(store: Store) -> None:
    seed(store)
    with store.transaction() as session:
        queue.enqueue_model(session, "a", KIND, with_model_run=False, max_attempts=2)
        kind_id = queries.get_device_kind(session, KIND).id
        session.execute(update(Job).where(Job.id != 1).values(status="cancelled"))
    statuses = []
    for _ in range(3):
        with store.transaction() as session:
            job = queue.claim_job(session, kind_id, "w", lease_s=60)
            if job is None:
                statuses.append(None)
                continue
            statuses.append(queue.fail_job(session, job.id, "w", "CUDA out of memory"))
    assert statuses == ["queued", "failed", None]
    with store.transaction() as session:
        job = session.get(Job, 1)
        assert job is not None
        assert (job.status, job.attempts, job.last_error) == ("failed", 2, "CUDA out of memory")


def test_release_does_not_count_an_attempt(store: Store) -> None:
    seed(store)
    with store.transaction() as session:
        queue.enqueue_model(session, "a", KIND, with_model_run=False)
        kind_id = queries.get_device_kind(session, KIND).id
        job = queue.claim_job(session, kind_id, "w", lease_s=60)
        assert job is not None
        assert queue.release_job(session, job.id, "w")
        session.refresh(job)
        assert (job.status, job.attempts, job.lease_owner) == ("queued", 0, None)


def test_expire_exhausted(store: Store) -> None:
    seed(store)
    with store.transaction() as session:
        queue.enqueue_model(session, "a", KIND, with_model_run=False, max_attempts=1)
        kind_id = queries.get_device_kind(session, KIND).id
        job = queue.claim_job(session, kind_id, "dead", lease_s=60)
        assert job is not None
        session.execute(
            update(Job)
            .where(Job.id == job.id)
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    with store.transaction() as session:
        assert queue.expire_exhausted(session) == 1
        assert queue.queue_counts(session, kind_id) == {"failed": 1, "queued": 1}


def test_enqueue_checks_the_kind_name_before_anything(store: Store) -> None:
    seed(store)
    for name, message in [
        ("", "a device kind's name must not be empty"),
        ("k" * 201, "device kind name of 201 characters, over the limit of 200"),
        ("fake:\x00", f"device kind 'fake:\\x00' holds a control character U+0000: {PRINTABLE}"),
        (" \xa0 ", "a device kind's name must not be empty"),
        (
            "A\u202eB",
            f"device kind 'A\\u202eB' holds a format character U+202E "
            f"(RIGHT-TO-LEFT OVERRIDE): {PRINTABLE}",
        ),
        (
            "A\u200bB",
            f"device kind 'A\\u200bB' holds a format character U+200B "
            f"(ZERO WIDTH SPACE): {PRINTABLE}",
        ),
        (
            "A\u2028B",
            f"device kind 'A\\u2028B' holds a line separator U+2028 (LINE SEPARATOR): {PRINTABLE}",
        ),
        ("A\ue000", f"device kind 'A\\ue000' holds a private-use character U+E000: {PRINTABLE}"),
        ("A/B", "device kind 'A/B' holds '/', which a URL's path cannot carry in a name"),
        (" GPU", "device kind ' GPU' begins or ends with white space"),
        ("GPU\xa0", "device kind 'GPU\\xa0' begins or ends with white space"),
    ]:
        with pytest.raises(InvalidInputError) as info, store.transaction() as session:
            queue.enqueue_model(session, "no such model either", name)
        assert str(info.value) == message
    with store.transaction() as session:
        assert queries.device_kinds(session) == []
        assert queries.check_device_kind_name("k" * 200) == "k" * 200
        for name in ("NVIDIA H100 80GB HBM3", "cpu:Intel(R) Xeon(R) @ 2.2GHz", "Büro ™ A\xa0B"):
            assert queries.check_device_kind_name(name) == name
