"""Benchmark: how long each web page takes to serve on bench_api's 1,000,000-result database.

Fills (or reuses, cached) the database of bench/bench_api.py (≥ 200 models, ≥ 1,000,000 results
on eight device kinds; api_fill), adds a queue of jobs in every state (to a copy of the SQLite
file; to PostgreSQL's bench database itself), serves it with ``opdb serve --workers 1`` on a free
loopback port, and asks each page in turn, one request at a time after a warm-up: the overview, a
model (random; each of its measured kinds composed for the side-by-side table, one in full), the
jobs, one job, and a configuration (random; its results and their chart). Prints per page the
requests, p50, p95 and the largest latency in ms (target: p95 under 200 ms per page) and the
page's size. Run:

    .venv/bin/python bench/bench_ui.py [--db sqlite|postgresql] [--requests 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import platformdirs
from api_fill import FillParams, postgres_database, sqlite_database
from bench_api import cpu_model, serve, stop
from sqlalchemy import select

from operator_db.db import queries, queue
from operator_db.db.models import Model, OperatorConfig
from operator_db.db.store import Store

TARGET_P95_MS = 200.0
"""Issue 28's target: p95 latency of each page, in ms."""
JOBS = 2000
"""Jobs the benchmark queues (then leases and fails some) before it asks the pages."""


def add_jobs(url: str, rng: random.Random) -> None:
    """Queue models' configurations until ``JOBS`` jobs exist; lease some, fail some."""
    with Store.open(url) as store, store.transaction() as session:
        if sum(queue.queue_counts(session).values()) >= JOBS:
            return
        names = list(session.scalars(select(Model.name).order_by(Model.name)))
        kinds = [k.name for k in queries.device_kinds(session)]
        while sum(queue.queue_counts(session).values()) < JOBS:
            queue.enqueue_model(session, rng.choice(names), rng.choice(kinds), remeasure=True)
            session.flush()
        for kind in queries.device_kinds(session)[:4]:
            for n in range(3):
                job = queue.claim_job(session, kind.id, f"worker-{n}@bench", 600.0)
                if job is not None and n == 0:
                    queue.fail_job(
                        session,
                        job.id,
                        job.lease_owner or "",
                        "bench: failed on purpose",
                        retry=False,
                    )


def pages(url: str, rng: random.Random, count: int) -> dict[str, list[str]]:
    """Return ``count`` paths of each page, with random models, configurations and jobs."""
    with Store.open(url) as store, store.transaction(read_only=True) as session:
        measured = queries.models_measured_per_kind(session)
        pairs = [(m, k) for k, names in measured.items() for m in names]
        keys = list(session.scalars(select(OperatorConfig.key).limit(5000)))
        jobs = [j.id for j in queue.list_jobs(session, limit=500)[0]]
    return {
        "overview": ["/ui/"] * count,
        "model": [
            f"/ui/models/{m}?device_kind={k}" for m, k in (rng.choice(pairs) for _ in range(count))
        ],
        "jobs": ["/ui/jobs"] * count,
        "job": [f"/ui/jobs/{rng.choice(jobs)}" for _ in range(count)],
        "configuration": [f"/ui/configurations/{rng.choice(keys)}" for _ in range(count)],
    }


def time_pages(base: str, paths: dict[str, list[str]], warmup: int) -> list[dict[str, Any]]:
    """Ask every path one at a time; return per page its latencies' percentiles (ms)."""
    rows = []
    with httpx.Client(base_url=base, timeout=60) as client:
        for name, urls in paths.items():
            for path in urls[:warmup]:
                client.get(path).raise_for_status()
            took, size = [], 0
            for path in urls[warmup:]:
                start = time.perf_counter()
                response = client.get(path)
                took.append((time.perf_counter() - start) * 1000)
                response.raise_for_status()
                size = max(size, len(response.content))
            took.sort()
            p95 = took[round(0.95 * (len(took) - 1))]
            rows.append(
                {
                    "page": name,
                    "requests": len(took),
                    "p50_ms": statistics.median(took),
                    "p95_ms": p95,
                    "max_ms": took[-1],
                    "largest_bytes": size,
                    "meets_target": p95 < TARGET_P95_MS,
                }
            )
    return rows


def main() -> None:
    cache = Path(platformdirs.user_cache_dir("operator-db", appauthor=False)) / "bench-api"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--measurements", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=40, help="Timed requests per page.")
    parser.add_argument("--warmup", type=int, default=3, help="Requests per page not timed.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", default=str(cache))
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    params = FillParams(args.models, args.measurements, args.seed)
    start = time.perf_counter()
    if args.db == "sqlite":
        url, _ = sqlite_database(Path(args.cache_dir), params, refill=False)
    else:
        url, _ = postgres_database(args.pg_url, params, refill=False)
    with tempfile.TemporaryDirectory() as tmp:
        if args.db == "sqlite":  # the jobs go into a copy: bench_api's cached file stays as it is
            copy = Path(tmp) / "ui.sqlite"
            shutil.copyfile(url.removeprefix("sqlite:///"), copy)
            url = f"sqlite:///{copy}"
        add_jobs(url, rng)
        print(f"database {args.db} ready in {time.perf_counter() - start:.0f} s", flush=True)
        paths = pages(url, rng, args.requests + args.warmup)
        server, base = serve(url, 1, Path(tmp) / "serve.log")
        try:
            rows = time_pages(base, paths, args.warmup)
        finally:
            stop(server)
    print(f"{'page':<14} {'requests':>8} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'KiB':>6}")
    for r in rows:
        print(
            f"{r['page']:<14} {r['requests']:>8} {r['p50_ms']:>8.1f} {r['p95_ms']:>8.1f} "
            f"{r['max_ms']:>8.1f} {r['largest_bytes'] / 1024:>6.0f}"
            f"{'' if r['meets_target'] else '  over the target'}"
        )
    report = {
        "db": args.db,
        "models": args.models,
        "measurements": args.measurements,
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "target_p95_ms": TARGET_P95_MS,
        "pages": rows,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
