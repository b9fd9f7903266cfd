"""Real worker processes (``opdb worker`` on the fake device) sharing one database.

Four processes and 200 jobs give exactly 200 measurements, none twice; a worker killed with SIGKILL
mid-job loses its lease, and another worker completes that job, once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from sqlalchemy import func, select

from operator_db.config import FAST_FAKE_MEASURE
from operator_db.db.models import Job, Measurement
from operator_db.db.store import Store
from tests.helpers import relu_op, spec_dict

FAST = FAST_FAKE_MEASURE


def worker_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPDB_")}
    return {**env, **FAST, **extra}


def start_worker(db_url: str, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "operator_db", "worker", "--db", db_url, "--poll", "0.05", *args],
        env=worker_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def ingest_and_enqueue(db_url: str, tmp_path: Path, n: int) -> None:
    path = tmp_path / "many.yaml"
    path.write_text(yaml.safe_dump(spec_dict("many", [relu_op([1, k + 1]) for k in range(n)])))
    env = worker_env()
    for cmd in (
        ["ingest", str(path)],
        ["enqueue", "many", "--device-kind", "fake:FakeGPU", "--no-model-run"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "operator_db", *cmd, "--db", db_url],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_four_workers_two_hundred_jobs(db_url: str, store: Store, tmp_path: Path) -> None:
    ingest_and_enqueue(db_url, tmp_path, 200)
    workers = [start_worker(db_url, "--until-idle") for _ in range(4)]
    outputs = [w.communicate(timeout=300)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0, 0], outputs
    with store.transaction() as session:
        measured = session.scalar(select(func.count()).select_from(Measurement))
        configs = session.scalar(select(func.count(func.distinct(Measurement.config_id))))
        jobs_measured = session.scalar(select(func.count(func.distinct(Measurement.job_id))))
        states = session.execute(
            select(Job.status, Job.attempts, func.count()).group_by(Job.status, Job.attempts)
        ).all()
        hosts = session.scalars(select(Measurement.provenance["host"].as_string())).all()
    assert (measured, configs, jobs_measured) == (200, 200, 200)
    assert states == [("done", 1, 200)]
    assert len(hosts) == 200
    # Every worker printed its own lines; together they finished 200 jobs.
    done_counts = [int(out.rsplit("done ", 1)[1].split(",")[0]) for out in outputs]
    assert sum(done_counts) == 200


@pytest.mark.slow
def test_killed_worker_job_is_completed_once_by_another(
    db_url: str, store: Store, tmp_path: Path
) -> None:
    ingest_and_enqueue(db_url, tmp_path, 1)
    # A slow measurement (two 3 s energy windows) under a 2 s lease renewed by the heartbeat.
    slow = start_worker(
        db_url, "--lease", "2", OPDB_MEASURE__ENERGY_WINDOW_S="3", OPDB_MEASURE__TRIALS="2"
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with store.transaction() as session:
            job = session.get(Job, 1)
            assert job is not None
            if job.status == "running":
                break
        time.sleep(0.05)
    else:
        slow.kill()
        pytest.fail("the first worker never claimed the job: " + (slow.communicate()[0] or ""))
    time.sleep(2.5)  # past one lease: only the heartbeat keeps it
    with store.transaction() as session:
        job = session.get(Job, 1)
        assert job is not None and job.status == "running"
        first_owner = job.lease_owner
    os.kill(slow.pid, signal.SIGKILL)
    slow.communicate(timeout=30)
    with store.transaction() as session:
        assert session.scalar(select(func.count()).select_from(Measurement)) == 0
    second = start_worker(db_url, "--max-jobs", "1", "--lease", "2")
    out = second.communicate(timeout=120)[0]
    assert second.returncode == 0, out
    with store.transaction() as session:
        job = session.get(Job, 1)
        assert job is not None
        assert (job.status, job.attempts, job.lease_owner) == ("done", 2, None)
        rows = session.execute(select(Measurement.job_id, Measurement.config_id)).all()
    assert rows == [(1, 1)]
    assert first_owner is not None and first_owner.endswith(f":{slow.pid}")
