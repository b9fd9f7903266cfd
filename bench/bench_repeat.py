"""Repeatability: the demo's measurement N times, each in a fresh database, and its noise.

Each repeat ingests the spec into a new SQLite file, measures the model and its configurations
as one interleaved job (what `opdb demo` and `opdb measure` do) and composes the estimate. The
thread settings alternate repeat by repeat, so that a drift of the machine touches them alike.
Per setting it prints every repeat's error with its 95 % interval, then:

- the spread of the error (max − min, percentage points) and the median |error|;
- how often a repeat's interval holds the median of the others, and the median of all;
- the device time each repeat used (the worker's wall time), and how many ended tight.

    .venv/bin/python bench/bench_repeat.py [--spec measurement_specs/resnet50-b1.yaml]
        [--repeats 10] [--threads all,1] [--db-dir DIR]

Targets (issue 35, ResNet-50 b1 at the default threads): spread ≤ 4 points, every interval
holds the median of the ten, median |error| ≤ 3 %. Settings come from the environment as
usual (``OPDB_MEASURE__*``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from operator_db.cli.process_env import ensure_start_env
from operator_db.config import get_settings
from operator_db.db import queue
from operator_db.db.ingest import ingest_specs
from operator_db.db.store import Store
from operator_db.devices.factory import open_device
from operator_db.estimate.compose import estimate_model
from operator_db.specs import load_spec
from operator_db.stats import Interval, format_percent
from operator_db.worker.daemon import Worker, WorkerOptions

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Repeat:
    """One repeat: its error with its interval, and the device time it used."""

    error: float
    interval: Interval | None
    seconds: float
    estimate_ms: float
    measured_ms: float
    flags: list[str] = field(default_factory=list)


def _settings(text: str) -> list[tuple[str, int | None]]:
    out: list[tuple[str, int | None]] = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        out.append(("all", None) if item == "all" else (item, int(item)))
    return out


def _one(spec_path: Path, folder: Path, label: str, index: int, threads: int | None) -> Repeat:
    settings = get_settings()
    loaded = load_spec(spec_path, max_bytes=settings.max_spec_bytes)
    path = folder / f"repeat-{label}-{index}.sqlite"
    path.unlink(missing_ok=True)
    store = Store.open(f"sqlite:///{path}")
    default_threads = torch.get_num_threads()
    try:
        with store.transaction() as session:
            ingest_specs(session, [loaded])
        device = open_device("cpu", settings=settings)
        kind = device.identity().name
        name = loaded.spec.model.name
        with store.transaction() as session:
            queue.enqueue_model(session, name, kind, remeasure=True, interleaved=True)
        measure = settings.measure.model_copy(update={"threads": threads})
        start = time.perf_counter()
        Worker(store, device, measure, WorkerOptions(until_idle=True, poll_s=0.1)).run()
        seconds = time.perf_counter() - start
        torch.set_num_threads(default_threads)
        device.close()
        with store.transaction(read_only=True) as session:
            est = estimate_model(session, name, kind)
        flags = sorted({f for r in est.config_rows for f in (r["flags"] or "").split(",") if f})
        return Repeat(
            est.time_error or 0.0,
            est.time_error_interval,
            seconds,
            est.total_time_s * 1e3,
            (est.full_run_time_s or 0.0) * 1e3,
            flags,
        )
    finally:
        store.close()


def main() -> None:
    ensure_start_env()  # glibc's allocator as `opdb measure` sets it (cli/process_env.py)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default=str(ROOT / "measurement_specs/resnet50-b1.yaml"))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", default="all,1", help="Comma-separated: a count or 'all'.")
    parser.add_argument("--db-dir", default=None, help="Keep the databases here.")
    args = parser.parse_args()
    default_threads = torch.get_num_threads()
    results: dict[str, list[Repeat]] = {label: [] for label, _ in _settings(args.threads)}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.db_dir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(args.repeats):
            for label, threads in _settings(args.threads):
                r = _one(Path(args.spec), folder, label, i, threads)
                results[label].append(r)
                shown = format_percent(r.interval) if r.interval else f"{r.error:+.1%}"
                print(
                    f"threads {label} repeat {i + 1}: error {shown}, {r.seconds:.0f} s", flush=True
                )
    load_after = os.getloadavg()
    print(
        f"\n{Path(args.spec).name}, {args.repeats} repeats; default threads {default_threads}; "
        f"load average (1, 5, 15 min) {', '.join(f'{v:.2f}' for v in load_before)} before, "
        f"{', '.join(f'{v:.2f}' for v in load_after)} after\n"
    )
    print(
        "| threads | median error | spread (max − min) | median abs error | holds the median "
        "of all | holds the median of the others | median width | device time per repeat |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, repeats in results.items():
        errors = [r.error for r in repeats]
        median = statistics.median(errors)
        held_all = sum(1 for r in repeats if r.interval is not None and r.interval.holds(median))
        held_others = 0
        for i, r in enumerate(repeats):
            others = errors[:i] + errors[i + 1 :]
            if r.interval is not None and others and r.interval.holds(statistics.median(others)):
                held_others += 1
        widths = [r.interval.high - r.interval.low for r in repeats if r.interval is not None]
        print(
            f"| {label} | {median:+.1%} | {(max(errors) - min(errors)) * 100:.1f} pp | "
            f"{statistics.median(abs(e) for e in errors):.1%} | {held_all}/{len(repeats)} | "
            f"{held_others}/{len(repeats)} | "
            f"{(statistics.median(widths) * 100 if widths else float('nan')):.1f} pp | "
            f"{statistics.median(r.seconds for r in repeats):.0f} s |"
        )


if __name__ == "__main__":
    main()
