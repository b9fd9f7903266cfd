"""Benchmark: estimate vs measured full-model time on this machine's CPU, at 1 and all threads.

Measures every configuration of the given specs and each whole model with the worker, once per
thread setting (``--threads``, default ``1,all``: one thread, and torch's default, every core
the process may use), each setting into its own SQLite database, the settings alternating model
by model so that a drift of the machine moves them alike. Then prints, side by side, each
model's estimate, measured full-model time and error per setting, and the median and worst
absolute errors. By default each model is one interleaved job (the model and its configurations
timed in alternating rounds, as `opdb measure` does); ``--separate`` measures each configuration
as its own job, one after the other, and the model last. Run:

    .venv/bin/python bench/bench_estimate.py [SPEC ...] [--threads 1,all] [--separate]
        [--device cpu] [--db-dir DIR]

Other settings come from the environment as usual (``OPDB_MEASURE__*``); the load average while
it ran is printed with the figures.
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
from operator_db.estimate.compose import Estimate, estimate_model
from operator_db.estimate.options import EstimateOptions
from operator_db.specs import load_spec
from operator_db.stats import describe_error
from operator_db.worker.daemon import Worker, WorkerOptions

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = [
    *(f"{m}-b{b}" for m in ("resnet50", "mobilenetv2", "bert-base") for b in (1, 8)),
    "ftransformer-b1",
    "ftransformer-b8",
    "gpt2-b1",
]
"""The shipped transformers specs, GPT-2 (custom Conv1D leaves, traced) and a functional-style
transformer of our own (everything a functional call)."""


@dataclass
class Setting:
    """One thread setting: its label, its thread count (None: torch's default) and results."""

    label: str
    threads: int | None
    store: Store
    estimates: list[Estimate] = field(default_factory=list)
    alone: list[Estimate] = field(default_factory=list)
    """The same models composed from the operators looped alone (``context="alone"``)."""
    done: int = 0
    failed: int = 0
    wall_s: float = 0.0


def _settings(text: str) -> list[tuple[str, int | None]]:
    out: list[tuple[str, int | None]] = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        out.append(("all", None) if item == "all" else (item, int(item)))
    return out


def main() -> None:
    ensure_start_env()  # glibc's allocator as `opdb measure` sets it (cli/process_env.py)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "specs", nargs="*", default=[str(ROOT / f"measurement_specs/{n}.yaml") for n in DEFAULT]
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads",
        default="1,all",
        help="Thread settings, comma-separated: a count, or 'all' (torch's default).",
    )
    parser.add_argument(
        "--db-dir", default=None, help="Keep each setting's database here (threads-<label>.sqlite)."
    )
    parser.add_argument(
        "--separate",
        action="store_true",
        help="One job per configuration (the fleet's way), not one interleaved job per model.",
    )
    args = parser.parse_args()
    settings = get_settings()
    default_threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.db_dir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        specs = [load_spec(p, max_bytes=settings.max_spec_bytes) for p in args.specs]
        runs = []
        for label, threads in _settings(args.threads):
            path = folder / f"threads-{label}.sqlite"
            path.unlink(missing_ok=True)
            run = Setting(label, threads, Store.open(f"sqlite:///{path}"))
            with run.store.transaction() as session:
                ingest_specs(session, specs)
            runs.append(run)
        device = open_device(args.device, settings=settings)
        kind = device.identity().name
        load_before = os.getloadavg()
        for loaded in specs:  # the settings alternate model by model
            name = loaded.spec.model.name
            for run in runs:
                measure = settings.measure.model_copy(update={"threads": run.threads})
                start = time.perf_counter()
                with run.store.transaction() as session:
                    queue.enqueue_model(
                        session, name, kind, remeasure=True, interleaved=not args.separate
                    )
                stats = Worker(
                    run.store, device, measure, WorkerOptions(until_idle=True, poll_s=0.1)
                ).run()
                torch.set_num_threads(default_threads)  # the next setting starts from the default
                run.done, run.failed = run.done + stats.done, run.failed + stats.failed
                run.wall_s += time.perf_counter() - start
                with run.store.transaction(read_only=True) as session:
                    for out, context in ((run.estimates, "replay"), (run.alone, "alone")):
                        options = EstimateOptions(
                            cache_mode=settings.measure.cache_mode,
                            context=context,  # type: ignore[arg-type]
                        )
                        out.append(estimate_model(session, name, kind, options))
        load_after = os.getloadavg()
        device.close()
        for run in runs:
            run.store.close()
    _print(runs, kind, default_threads, load_before, load_after, args.separate)


def _print(
    runs: list[Setting],
    kind: str,
    default_threads: int,
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
    separate: bool,
) -> None:
    print(
        f"device kind: {kind}; torch {torch.__version__}; default threads {default_threads}; "
        f"{'separate' if separate else 'interleaved'} jobs; load average (1, 5, 15 min) "
        f"{', '.join(f'{v:.2f}' for v in load_before)} before, "
        f"{', '.join(f'{v:.2f}' for v in load_after)} after"
    )
    for run in runs:
        threads = default_threads if run.threads is None else run.threads
        print(
            f"- threads {run.label} ({threads}): {run.done} jobs in {run.wall_s:.0f} s, "
            f"{run.failed} failed"
        )
    print()
    head = " | ".join(
        f"estimate {r.label} (ms) | measured {r.label} (ms) | error {r.label} | "
        f"looped alone {r.label}"
        for r in runs
    )
    print(f"| model | {head} |")
    print("| --- |" + " ---: | ---: | ---: | ---: |" * len(runs))
    for i, est in enumerate(runs[0].estimates):
        cells = []
        for run in runs:
            e = run.estimates[i]
            cells += [
                _ms(e.total_time_s),
                _ms(e.full_run_time_s),
                _with_interval(e),
                _pct(run.alone[i].time_error),
            ]
        print(f"| {est.model} | " + " | ".join(cells) + " |")
    print()
    print(
        "| threads | operators | models | median absolute error | worst | "
        "operators alone (no time between): median | within noise |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for run in runs:
        for label, estimates in (("in a replay", run.estimates), ("looped alone", run.alone)):
            errors = [abs(e.time_error) for e in estimates if e.time_error is not None]
            ops = [
                abs(e.operators_time_error) for e in estimates if e.operators_time_error is not None
            ]
            if not errors:
                print(f"| {run.label} | {label} | 0 | - | - | - | - |")
                continue
            quiet = sum(
                1 for e in estimates if (iv := e.time_error_interval) is not None and iv.holds(0.0)
            )
            print(
                f"| {run.label} | {label} | {len(errors)} | {statistics.median(errors):.1%} | "
                f"{max(errors):.1%} | {statistics.median(ops):.1%} | {quiet}/{len(errors)} |"
            )


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def _with_interval(est: Estimate) -> str:
    """Return the error with its 95 % interval, and whether it is within noise."""
    iv = est.time_error_interval
    if iv is None or not iv.high > iv.low:
        return _pct(est.time_error)
    return describe_error(iv)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


if __name__ == "__main__":
    main()
