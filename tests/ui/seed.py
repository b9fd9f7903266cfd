"""A database for the pages: a small model measured for real on two fake device kinds, its
peaks, and jobs in every state a lab sees (done, queued, running under a lease, failed); and
the NeuSight excerpt imported (two GPUs) with a model of its configurations (``NS_MODEL``): one
of them also measured here, a whole-model run imported on the T4."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from operator_db.datasets.importer import import_data_set
from operator_db.datasets.neusight.reader import NeuSight
from operator_db.db import queries, queue
from operator_db.db.ingest import ingest_specs
from operator_db.db.models import Measurement, utcnow
from operator_db.db.queries.peaks import PeakFigure
from operator_db.db.store import Store
from operator_db.devices.fake import FakeDevice
from operator_db.measure.settings import fast_settings
from operator_db.specs import SPEC_VERSION
from operator_db.specs.io import parse_spec
from operator_db.worker.daemon import Worker, WorkerOptions
from tests.worker.test_interleaved import ingest_mlp

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "neusight"
NS_MODEL = "ns-mix"
"""A model of the NeuSight excerpt's configurations: imported figures on the T4 and the L4."""
NS_KINDS = ("NVIDIA L4", "Tesla T4")
NS_RUN_S = 0.0125
"""The whole-model run of ``NS_MODEL`` imported on the T4, s."""
MODEL = "tiny"
OTHER = "tiny-wide"
KINDS = ("fake:LabGPU", "fake:OtherGPU")
OWNER = "worker-7@gpu-host-3"
ERROR = "CUDA error: an illegal memory access was encountered"


@dataclass(frozen=True)
class Seeded:
    """What the seed put in: the failed and the running job's ids; the own result's config."""

    failed_job: int
    running_job: int
    own_key: str = ""
    """The configuration of ``NS_MODEL`` measured here on the T4 as well as imported there."""


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
        with store.transaction() as session:
            own_key = seed_neusight(session)
    return Seeded(failed_job=failing_id, running_job=running_id, own_key=own_key)


def model_of_configs(session: Session, name: str, ids: list[int]) -> None:
    """Ingest a model running the stored configurations ``ids`` (each twice), keys unchanged."""
    configs = queries.configs_by_ids(session, ids)
    operators = [
        {
            **queries.config_spec(c).model_dump(mode="json", exclude_none=True),
            "count": 2,
            "flops": c.flops,
            "bytes": c.bytes,
            "params": c.params,
        }
        for c in configs
    ]
    spec = {"spec_version": SPEC_VERSION, "model": {"name": name}, "operators": operators}
    loaded = parse_spec(spec, f"{name}.yaml")
    assert list(loaded.keys) == [c.key for c in configs]
    ingest_specs(session, [loaded])


def seed_neusight(session: Session) -> str:
    """Import the NeuSight excerpt and add ``NS_MODEL``; return the key measured here too.

    The model runs the excerpt's first two T4 configurations of each family and its four L4
    ones; the first is also measured by operator-db on the T4 (own before imported), and a
    whole-model run of it is imported on the T4 (as a data set's whole-model latencies are).
    """
    import_data_set(session, NeuSight(FIXTURE))
    rows = [
        (m.config_id, m.device_kind_id, m.source_id)
        for m in session.query(Measurement).order_by(Measurement.id)
        if m.source_id is not None
    ]
    t4 = queries.get_device_kind(session, "Tesla T4").id
    on_t4 = [c for c, k, _ in rows if k == t4]
    on_l4 = [c for c, k, _ in rows if k != t4]
    ids = list(dict.fromkeys(on_t4[::3] + on_t4[1::3] + on_l4))
    model_of_configs(session, NS_MODEL, ids)
    first = queries.configs_by_ids(session, [ids[0]])[0]
    session.add(
        Measurement(
            config_id=first.id,
            device_kind_id=t4,
            dtype="float32",
            calls_per_block=100,
            blocks=20,
            time_median_s=2e-5,
            time_mean_s=2.1e-5,
            time_iqr_s=1e-6,
            time_cv=0.02,
            provenance={"torch": "seed"},
        )
    )
    model = queries.get_model(session, NS_MODEL)
    queries.add_results(
        session,
        "full_model_runs",
        [
            {
                "model_id": model.id,
                "device_kind_id": t4,
                "source_id": rows[0][2],
                "source_ref": "seed:ns-mix@T4",
                "dtype": "float32",
                "calls_per_block": 1,
                "blocks": 1,
                "time_median_s": NS_RUN_S,
                "time_mean_s": NS_RUN_S,
                "time_iqr_s": 0.0,
                "time_cv": 0.0,
                "trials": 0,
                "energy_unavailable": "not in the data set",
                "flags": [],
                "raw": {},
                "provenance": {"source": "neusight", "file": "label/Tesla_T4/seed.json"},
                "created_at": utcnow(),
            }
        ],
    )
    session.flush()
    return first.key
