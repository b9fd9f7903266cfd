"""Benchmark: the estimate endpoint of `opdb serve` under load while a worker writes results.

For each database (SQLite, PostgreSQL): fill it (api_fill: ≥ 200 models, ≥ 1,000,000 results;
cached between runs with the same parameters), serve it with ``opdb serve --workers 2`` on a free
loopback port, start a writer process that stores results in short write transactions the whole
time (api_load), and let 50 clients ask ``GET /models/{name}/estimate?device_kind=`` for random
models and kinds, each on its own keep-alive connection, for 60 s per load after a warm-up. The
loads (``--rates``): a closed loop, each client asking again as soon as it is answered (what the
server can do: its latency is mostly the queue), then 50 requests/s in all (each client once a
second, on its own schedule; latency counted from when a request was due). Prints requests,
requests/s, latency percentiles, errors (answers other than 200, and no answer), the server's
and the clients' CPU per request and the writer's commits; exits 1 on any error.

``--neusight PATH`` serves the NeuSight database instead (the public data set at PATH imported as
``opdb import`` does, ~280,000 results of eight GPUs, with ``--models`` models of its
configurations, default 100; api_fill, cached), and ``--db URL`` any database as it is: the
clients then ask for each model on each kind it has figures on, and the writer writes results of
the models' configurations at their stored figures. Run:

    .venv/bin/python bench/bench_api.py [--db sqlite|postgresql|both|URL] [--neusight PATH]
        [--rates 0,50] ...

The clients run on the same machine as the server and take a share of its CPU (reported);
PostgreSQL's own processes are not counted in the server's CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import platformdirs
from api_fill import (
    FillParams,
    NeuSightParams,
    counts,
    drop_database,
    postgres_database,
    sqlite_database,
    workload,
)
from api_load import cpu_seconds, drive
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
TARGET_P99_MS = {"postgresql": 50.0, "sqlite": 100.0}
"""Issue 12's targets: p99 latency of the estimate under this load, in ms."""
PHASE_WARMUP_S = 2.0
"""Seconds each load after the first runs before it is timed (the first: ``--warmup``)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPDB_")}
    env["OPDB_DATABASE_URL"] = url
    # Every client of the load is 127.0.0.1: the per-client rate limit (docs/api.md, "Limits")
    # would answer most of them 429. The benchmarks measure what the server can serve.
    env["OPDB_API_RATE_PER_S"] = "0"
    env["OPDB_API_CLIENT_SHARE"] = "0"
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), str(HERE), os.environ.get("PYTHONPATH")) if p
    )
    return env


def serve(url: str, workers: int, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``opdb serve`` on ``url`` and wait until /health answers 200; return it and its URL.

    Raises:
        RuntimeError: the server exited or did not answer within 120 s (its log's tail).
    """
    port = _free_port()
    cmd = [sys.executable, "-m", "operator_db", "serve", "--port", str(port)]
    with log.open("wb") as out:
        server = subprocess.Popen(
            [*cmd, "--workers", str(workers)], env=_env(url), stdout=out, stderr=out, cwd=ROOT
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{base}/health", timeout=5).status_code == 200:
                return server, base
        except httpx.HTTPError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            stop(server)
            raise RuntimeError(f"the server did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.3)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process started here (SIGTERM, then SIGKILL after 20 s)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def backend(db: str) -> str:
    """Return ``db``'s backend: ``sqlite`` or ``postgresql`` (a name, or a database's URL)."""
    return make_url(db).get_backend_name() if "://" in db else db


def fill(db: str, args: argparse.Namespace) -> tuple[str, float, bool]:
    """Return the URL of the filled database ``db``, the seconds it took, and if it was filled.

    ``db``: ``sqlite`` or ``postgresql`` (bench_api's database, or NeuSight's with
    ``--neusight``), or a database's URL (taken as it is).
    """
    if "://" in db:
        return db, 0.0, False
    params: FillParams | NeuSightParams
    if args.neusight:
        params = NeuSightParams(args.neusight, args.models or 100, args.seed)
    else:
        params = FillParams(args.models or 200, args.measurements, args.seed)
    start = time.perf_counter()
    if db == "sqlite":
        url, filled = sqlite_database(Path(args.cache_dir), params, refill=args.refill)
    else:
        url, filled = postgres_database(args.pg_url, params, refill=args.refill)
    return url, time.perf_counter() - start, filled


def start_writer(url: str, duration_s: float, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    """Start the writer process (api_load) on ``url`` for ``duration_s``."""
    return subprocess.Popen(
        [
            sys.executable,
            str(HERE / "api_load.py"),
            "writer",
            url,
            "--duration",
            str(duration_s),
            "--interval-ms",
            str(args.writer_interval_ms),
            "--seed",
            str(args.seed),
        ],
        env=_env(url),
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )


def run_one(db: str, args: argparse.Namespace, logs: Path) -> list[dict[str, Any]]:
    """Fill, serve, write and load ``db``, one phase per rate; return a row of figures for each."""
    url, fill_s, filled = fill(db, args)
    held = counts(url)
    print(
        f"{db}: {held['models']} models, {held['operator_configs']} configurations, "
        f"{held['measurements']} results, {held['full_model_runs']} model runs "
        f"({'filled' if filled else 'cached'} in {fill_s:.1f} s)",
        file=sys.stderr,
    )
    targets = workload(url)
    server, base = serve(url, args.workers, logs / f"server-{backend(db)}.log")
    writer = None
    loads = []
    try:
        phases = len(args.rates)
        phases_s = args.warmup + phases * args.duration + (phases - 1) * PHASE_WARMUP_S
        writer = start_writer(url, phases_s + 1, args)
        time.sleep(args.warmup / 2)  # the writer is writing before the clients are timed
        for i, rate in enumerate(args.rates):
            load = drive(
                base,
                targets,
                clients=args.clients,
                warmup_s=args.warmup / 2 if i == 0 else PHASE_WARMUP_S,
                duration_s=args.duration,
                rate=rate,
                seed=args.seed + i,
                probes={"server_cpu_s": lambda: cpu_seconds(server.pid)},
            )
            loads.append((rate, load))
        out, _ = writer.communicate(timeout=300)
        wrote = json.loads(out) if writer.returncode == 0 and out.strip() else None
    finally:
        if writer is not None:
            stop(writer)
        stop(server)
    if args.drop and "://" not in db:
        drop_database(url, args.pg_url)
    if wrote is not None:
        wrote["commits_per_s"] = wrote["commits"] / (phases_s + 1)
    return [
        {
            "db": backend(db),
            **held,
            "clients": args.clients,
            "rate": rate,
            "requests": load.requests,
            "requests_per_s": load.requests / load.wall_s if load.wall_s else 0.0,
            "p50_ms": load.percentile(0.50),
            "p90_ms": load.percentile(0.90),
            "p95_ms": load.percentile(0.95),
            "p99_ms": load.percentile(0.99),
            "max_ms": max(load.latencies_ms, default=float("nan")),
            "errors": load.errors,
            "statuses": {str(k): v for k, v in sorted(load.statuses.items())},
            "failures": load.failures,
            "error_samples": load.samples,
            "writer": wrote,
            "client_cpu_s": load.client_cpu_s,
            "server_cpu_s": load.probes["server_cpu_s"],
            "wall_s": load.wall_s,
            "target_p99_ms": TARGET_P99_MS[backend(db)],
        }
        for rate, load in loads
    ]


def render(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """Return the figures as a Markdown table with a line on the load and the machine."""
    lines = [
        f"{args.clients} clients, {args.duration:g} s per load after a warm-up, `opdb serve "
        f"--workers {args.workers}`, a writer committing results every "
        f"{args.writer_interval_ms:g} ms; {os.cpu_count()} CPUs, {cpu_model()}, "
        f"Python {platform.python_version()}. closed: each client asks again as soon as it is "
        "answered; N/s: the clients ask N times a second in all, each on its own schedule.",
        "",
        "| db | load | requests | req/s | p50 ms | p90 ms | p95 ms | p99 ms | max ms | errors "
        "| server CPU ms/req | client CPU ms/req | writer commits/s | p99 target |",
        "| --- | --- |" + " ---: |" * 11 + " --- |",
    ]
    for r in rows:
        w = r["writer"] or {}
        n = r["requests"] or 1
        met = "met" if r["p99_ms"] < r["target_p99_ms"] else "missed"
        load = f"{r['rate']:g}/s" if r["rate"] else "closed"
        lines.append(
            f"| {r['db']} | {load} | {r['requests']} | {r['requests_per_s']:.0f} "
            f"| {r['p50_ms']:.1f} | {r['p90_ms']:.1f} | {r['p95_ms']:.1f} | {r['p99_ms']:.1f} "
            f"| {r['max_ms']:.1f} "
            f"| {r['errors']} | {r['server_cpu_s'] / n * 1e3:.1f} "
            f"| {r['client_cpu_s'] / n * 1e3:.1f} | {w.get('commits_per_s', float('nan')):.0f} "
            f"| < {r['target_p99_ms']:g} ms: {met} |"
        )
    for r in rows:
        for sample in r["error_samples"]:
            lines.append(f"{r['db']}: {sample}")
        if r["failures"]:
            lines.append(f"{r['db']}: no answer: {r['failures']}")
        if not r["writer"]:
            lines.append(f"{r['db']}: the writer failed")
    return "\n".join(lines)


def cpu_model() -> str:
    """Return the CPU's model name (Linux), else the platform's processor."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _rates(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part.strip()]


def main() -> None:
    cache = Path(platformdirs.user_cache_dir("operator-db", appauthor=False)) / "bench-api"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db",
        default="both",
        help="sqlite, postgresql or both (bench_api's or NeuSight's database, filled and "
        "cached), or the URL of a database to serve as it is.",
    )
    parser.add_argument(
        "--neusight",
        metavar="PATH",
        help="Serve the NeuSight database: the data set at PATH (../shared/data/neusight) "
        "imported, with --models models of its configurations.",
    )
    parser.add_argument("--models", type=int, default=None, help="Default 200 (NeuSight: 100).")
    parser.add_argument("--measurements", type=int, default=1_000_000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=60.0, help="Seconds measured.")
    parser.add_argument("--warmup", type=float, default=6.0, help="Seconds before, not counted.")
    parser.add_argument("--workers", type=int, default=2, help="Server processes.")
    parser.add_argument(
        "--rates",
        type=_rates,
        default=[0.0, 50.0],
        help="Loads, one after another: requests/s in all, 0 for a closed loop (each client asks "
        "again as soon as it is answered). Default 0,50.",
    )
    parser.add_argument("--writer-interval-ms", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", default=str(cache), help="Where filled SQLite files stay.")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get(
            "OPDB_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
        ),
        help="A PostgreSQL database to connect to; the bench's databases are created beside it.",
    )
    parser.add_argument("--refill", action="store_true", help="Fill again even if cached.")
    parser.add_argument("--drop", action="store_true", help="Remove the filled databases after.")
    parser.add_argument("--json", type=Path, help="Also write the figures here as JSON.")
    parser.add_argument("--log-dir", type=Path, help="Keep the servers' logs here.")
    args = parser.parse_args()
    dbs = ["sqlite", "postgresql"] if args.db == "both" else [args.db]
    with tempfile.TemporaryDirectory() as tmp:
        logs = args.log_dir or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        rows = [row for db in dbs for row in run_one(db, args, logs)]
    print(render(rows, args))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"args": vars(args) | {"json": str(args.json)}, "rows": rows}, indent=2, default=str
            )
        )
    bad = [r["db"] for r in rows if r["errors"] or not r["writer"] or r["writer"]["failures"]]
    if bad:
        print(f"errors on {', '.join(bad)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
