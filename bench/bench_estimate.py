"""Benchmark: estimate vs measured full-model time on this machine's CPU.

Measures every configuration of the given specs and each whole model with the worker (fresh SQLite
database), then prints a Markdown table of estimate, measured full-model time and error per model,
and the median absolute error. By default each model is one interleaved job (the model and its
configurations timed in alternating rounds, as `opdb measure` does); ``--separate`` measures each
configuration as its own job, one after the other, and the model last. Run:

    .venv/bin/python bench/bench_estimate.py [SPEC ...] [--separate] [--device cpu] [--db URL]

Settings come from the environment as usual (e.g. OPDB_MEASURE__THREADS=1).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from operator_db.config import get_settings
from operator_db.db import queue
from operator_db.db.ingest import ingest_specs
from operator_db.db.store import Store
from operator_db.devices.factory import open_device
from operator_db.estimate.compose import estimate_model
from operator_db.specs import load_spec
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "specs", nargs="*", default=[str(ROOT / f"measurement_specs/{n}.yaml") for n in DEFAULT]
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--db", default=None, help="Keep the results in this database.")
    parser.add_argument(
        "--passes",
        type=int,
        default=1,
        help="Measure everything this many times, spread over the run, and "
        "estimate from the medians (1: one measurement each).",
    )
    parser.add_argument(
        "--separate",
        action="store_true",
        help="One job per configuration (the fleet's way), not one interleaved job per model.",
    )
    args = parser.parse_args()
    settings = get_settings()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(args.db or f"sqlite:///{tmp}/bench.sqlite")
        specs = [load_spec(p, max_bytes=settings.max_spec_bytes) for p in args.specs]
        device = open_device(args.device, settings=settings)
        kind = device.identity().name
        start = time.perf_counter()
        with store.transaction() as session:
            ingest_specs(session, specs)
        done = failed = 0
        for _ in range(args.passes):
            with store.transaction() as session:
                for loaded in specs:
                    queue.enqueue_model(
                        session,
                        loaded.spec.model.name,
                        kind,
                        remeasure=True,
                        interleaved=not args.separate,
                    )
            stats = Worker(
                store, device, settings.measure, WorkerOptions(until_idle=True, poll_s=0.1)
            ).run()
            done, failed = done + stats.done, failed + stats.failed
        wall = time.perf_counter() - start
        rows = []
        with store.transaction(read_only=True) as session:
            for loaded in specs:
                est = estimate_model(
                    session,
                    loaded.spec.model.name,
                    kind,
                    aggregate="median" if args.passes > 1 else "latest",
                    cache_mode=settings.measure.cache_mode,
                )
                rows.append(est)
        device.close()
        store.close()
    print(
        f"device kind: {kind}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"{done} jobs in {wall:.0f} s ({args.passes} passes, "
        f"{'separate' if args.separate else 'interleaved'}, {settings.measure.cache_mode} "
        f"cache), {failed} failed"
    )
    print()
    print(
        "| model | operators (ms) | between (ms) | estimate (ms) | measured (ms) "
        "| error | error, operators alone |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    errors, errors_ops = [], []
    for est in rows:
        err, err_ops = est.time_error, est.operators_time_error
        if err is not None and err_ops is not None:
            errors.append(abs(err))
            errors_ops.append(abs(err_ops))
        print(
            f"| {est.model} | {_ms(est.time_s)} | {_ms(est.between_ops_s)} | "
            f"{_ms(est.total_time_s)} | {_ms(est.full_run_time_s)} | {_pct(err)} | "
            f"{_pct(err_ops)} |"
        )
    if errors:
        print(
            f"\nmedian absolute error: {statistics.median(errors):.1%} "
            f"(operators alone: {statistics.median(errors_ops):.1%}) over {len(errors)} models"
        )


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


if __name__ == "__main__":
    main()
