"""A database for the pages: a small model measured for real on two fake device kinds, its
peaks, and jobs in every state a lab sees (done, queued, running under a lease, failed)."""

from __future__ import annotations

from dataclasses import dataclass

from operator_db.db import queries, queue
from operator_db.db.queries.peaks import PeakFigure
from operator_db.db.store import Store
from operator_db.devices.fake import FakeDevice
from operator_db.measure.settings import fast_settings
from operator_db.worker.daemon import Worker, WorkerOptions
from tests.worker.test_interleaved import ingest_mlp

MODEL = "tiny"
OTHER = "tiny-wide"
KINDS = ("fake:LabGPU", "fake:OtherGPU")
OWNER = "worker-7@gpu-host-3"
ERROR = "CUDA error: an illegal memory access was encountered"


@dataclass(frozen=True)
class Seeded:
    """What the seed put in: the failed and the running job's ids."""

    failed_job: int
    running_job: int


def seed(url: str) -> Seeded:
    """Fill the database at ``url``: measure, add peaks, queue, lease and fail jobs."""
    with Store.open(url) as store:
        ingest_mlp(store, MODEL)
        ingest_mlp(store, OTHER)
        for name, watts in zip(KINDS, (300_000.0, 120_000.0), strict=True):
            device = FakeDevice(name=name.removeprefix("fake:"), power_mw=watts)
            with store.transaction() as session:
                queue.enqueue_model(session, MODEL, device.identity().name, interleaved=True)
            Worker(
                store,
                device,
                fast_settings(model_min_time_s=0.01, idle_window_s=0.01),
                WorkerOptions(until_idle=True, poll_s=0.01),
            ).run()
        with store.transaction() as session:
            kind = queries.get_device_kind(session, KINDS[0])
            queries.replace_peaks(
                session,
                kind.id,
                "spec",
                [
                    PeakFigure("float32", 60e12, "seed"),
                    PeakFigure(None, 3.35e12, "seed"),
                ],
            )
            queue.enqueue_model(session, OTHER, KINDS[0], remeasure=True)
        with store.transaction() as session:
            running = queue.claim_job(session, kind.id, OWNER, 600.0)
            assert running is not None
            failing = queue.claim_job(session, kind.id, "worker-2@gpu-host-1", 600.0)
            assert failing is not None
            running_id, failing_id = running.id, failing.id
        with store.transaction() as session:
            queue.fail_job(session, failing_id, "worker-2@gpu-host-1", ERROR, retry=False)
    return Seeded(failed_job=failing_id, running_job=running_id)
