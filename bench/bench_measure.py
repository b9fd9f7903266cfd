"""Benchmark: `opdb measure` of a shipped spec on this machine's CPU, end to end.

Prints the wall time, the number of configurations measured, and the median coefficient of
variation of the per-call times (over configurations), with the settings used. Run:

    .venv/bin/python bench/bench_measure.py [measurement_specs/resnet50-b1.yaml] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from sqlalchemy import select

from operator_db.config import get_settings
from operator_db.db import queue
from operator_db.db.ingest import ingest_specs
from operator_db.db.models import FullModelRun, Measurement
from operator_db.db.store import Store
from operator_db.devices.factory import open_device
from operator_db.specs import load_spec
from operator_db.worker.daemon import Worker, WorkerOptions

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default=str(ROOT / "measurement_specs/resnet50-b1.yaml"))
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    settings = get_settings()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{tmp}/bench.sqlite")
        loaded = load_spec(args.spec, max_bytes=settings.max_spec_bytes)
        device = open_device(args.device, settings=settings)
        kind = device.identity().name
        start = time.perf_counter()
        with store.transaction() as session:
            ingest_specs(session, [loaded])
            queued = queue.enqueue_model(session, loaded.spec.model.name, kind)
        stats = Worker(
            store, device, settings.measure, WorkerOptions(until_idle=True, poll_s=0.1)
        ).run()
        wall = time.perf_counter() - start
        with store.transaction() as session:
            rows = session.scalars(select(Measurement).where(Measurement.timing == "eager")).all()
            runs = session.scalars(select(FullModelRun)).all()
        device.close()
        store.close()
    cvs = [r.time_cv for r in rows]
    flagged = sum(1 for r in rows if r.flags)
    print(f"spec: {Path(args.spec).name} ({loaded.spec.model.name}), device kind: {kind}")
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"blocks {settings.measure.blocks} x >= {settings.measure.block_min_s * 1e3:.0f} ms, "
        f"energy: {rows[0].energy_unavailable or rows[0].energy_source if rows else '-'}"
    )
    print(
        f"configurations queued: {queued.queued_configs}, measured: {len(rows)}, "
        f"failed jobs: {stats.failed}, flagged (noisy/unstable): {flagged}"
    )
    print(f"wall time: {wall:.1f} s (ingest, enqueue, measure every configuration and the model)")
    if cvs:
        print(f"median CV of per-call times: {statistics.median(cvs):.4f} (max {max(cvs):.4f})")
    for run in runs:
        print(f"full model: {run.time_median_s * 1e3:.3f} ms per forward (CV {run.time_cv:.4f})")


if __name__ == "__main__":
    main()
