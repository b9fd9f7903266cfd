"""Benchmark: how long each web page takes to serve, on bench_api's database or another.

By default fills (or reuses, cached) the database of bench/bench_api.py (≥ 200 models, ≥
1,000,000 results on eight device kinds; api_fill); ``--neusight PATH`` builds (or reuses) the
NeuSight database instead (the public data set at PATH imported as ``opdb import`` does, ~280,000
results of eight GPUs, with ``--models`` models of its configurations; api_fill); ``--db URL``
takes any database as it is. Adds a queue of jobs in every state (to a copy of a SQLite file; to
a PostgreSQL database itself), serves it with ``opdb serve --workers 1`` on a free loopback
port, and asks each page in turn, one request at a time after a warm-up: the overview, the
models, a model (random, among those with a whole-model run; each kind it has figures on
composed for the side-by-side table, one in full), the jobs, one job, and a configuration
(random; its results and their chart). Prints per page the requests, p50, p95 and the largest
latency in ms (target: p95 under 200 ms per page) and the page's size. Run:

    .venv/bin/python bench/bench_ui.py [--db sqlite|postgresql|URL] [--neusight PATH]
        [--pages overview,model,...] [--requests 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import platformdirs
from api_fill import FillParams, NeuSightParams, postgres_database, sqlite_database, workload
from bench_api import cpu_model, serve, stop
from sqlalchemy import select
from sqlalchemy.engine import make_url

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


PAGES = ("overview", "models", "model", "jobs", "job", "configuration")
"""The pages timed, in order (``--pages`` picks some: a server before /ui/models had none)."""


def pages(url: str, rng: random.Random, count: int) -> dict[str, list[str]]:
    """Return ``count`` paths of each page, with random models, configurations and jobs.

    A model page is asked for a model on a kind it has a whole-model run on, else (no run in
    the database) on a kind it has figures on.
    """
    with Store.open(url) as store, store.transaction(read_only=True) as session:
        measured = queries.models_measured_per_kind(session)
        pairs = [(m, k) for k, names in measured.items() for m in names]
        keys = list(session.scalars(select(OperatorConfig.key).limit(5000)))
        jobs = [j.id for j in queue.list_jobs(session, limit=500)[0]]
    pairs = pairs or workload(url)
    return {
        "overview": ["/ui/"] * count,
        "models": ["/ui/models"] * count,
        "model": [
            f"/ui/models/{quote(m)}?device_kind={quote(k)}"
            for m, k in (rng.choice(pairs) for _ in range(count))
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


def database(args: argparse.Namespace) -> tuple[str, str]:
    """Return the URL of the database to serve and its backend (sqlite or postgresql)."""
    if "://" in args.db:
        return args.db, make_url(args.db).get_backend_name()
    params: FillParams | NeuSightParams
    if args.neusight:
        params = NeuSightParams(args.neusight, args.models or 100, args.seed)
    else:
        params = FillParams(args.models or 200, args.measurements, args.seed)
    if args.db == "sqlite":
        url, _ = sqlite_database(Path(args.cache_dir), params, refill=False)
    else:
        url, _ = postgres_database(args.pg_url, params, refill=False)
    return url, args.db


def main() -> None:
    cache = Path(platformdirs.user_cache_dir("operator-db", appauthor=False)) / "bench-api"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db",
        default="sqlite",
        help="sqlite or postgresql (bench_api's or NeuSight's database, filled and cached), or "
        "the URL of a database to serve as it is (a SQLite file is copied first).",
    )
    parser.add_argument(
        "--neusight",
        metavar="PATH",
        help="Serve the NeuSight database: the data set at PATH (../shared/data/neusight) "
        "imported, with --models models of its configurations (default 100).",
    )
    parser.add_argument("--models", type=int, default=None, help="Default 200 (NeuSight: 100).")
    parser.add_argument("--measurements", type=int, default=1_000_000)
    parser.add_argument("--pages", default=",".join(PAGES), help="Pages to time, by name.")
    parser.add_argument("--requests", type=int, default=40, help="Timed requests per page.")
    parser.add_argument("--warmup", type=int, default=3, help="Requests per page not timed.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", default=str(cache))
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    start = time.perf_counter()
    url, backend = database(args)
    with tempfile.TemporaryDirectory() as tmp:
        if backend == "sqlite":  # the jobs go into a copy: the cached or given file stays as is
            copy = Path(tmp) / "ui.sqlite"
            original = make_url(url).database or ""
            with closing(sqlite3.connect(original)) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the file holds everything
            shutil.copyfile(original, copy)
            url = f"sqlite:///{copy}"
        add_jobs(url, rng)
        print(f"database {backend} ready in {time.perf_counter() - start:.0f} s", flush=True)
        chosen = [p.strip() for p in args.pages.split(",") if p.strip()]
        every = pages(url, rng, args.requests + args.warmup)
        paths = {name: every[name] for name in chosen}
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
        "db": backend,
        "database": "given" if "://" in args.db else ("neusight" if args.neusight else "bench_api"),
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
