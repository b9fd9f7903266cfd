"""Benchmark: what clients that anyone can be cost a served API (docs/api.md, "Limits").

Seeds a SQLite database as the pages' tests do (tests/ui/seed.py: a small model measured on a
fake kind with spec peaks; the NeuSight excerpt with a model of its configurations), serves it
with ``opdb serve`` on a free loopback port (its default limits; the expensive reads' rate limit
off, so that the figures' own cost is what is measured) and prints:

- ``/health`` latency while ``--slow`` connections send their request heads a byte at a time
  (several processes open them, each reopening those the server closes; target: p95 < 100 ms
  at 20,000), with the server's open descriptors and its log's "Too many open files";
- the size of ``/metrics`` after ``--methods`` requests with invented methods (target < 100 KB);
- the server's peak RSS while ``--clients`` clients ask for rooflines at once (every model, kind
  and format in turn; target < 600 MB), and their latency.

Run (raises its own open files limit to the hard one; ``--env OPDB_API_EVENT_LOOP=asyncio``
serves on asyncio's own loop instead of uvloop):

    .venv/bin/python bench/bench_dos.py [--slow 20000] [--methods 10000] [--clients 40]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from api_load import cpu_seconds
from bench_api import ROOT, _env, _free_port, stop

sys.path.insert(0, str(ROOT))

SLOW_PROCESSES = 4
"""Processes that hold the slow connections (each under its own open files limit)."""


def _raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return int(hard)


def _slowloris(port: int, count: int, stop_at: float, every_s: float) -> None:
    """Keep ``count`` connections sending a request head a byte each ``every_s`` until ``stop_at``.

    A connection the server closes is opened again on the next pass. Niced: a real attack's
    clients are other machines, not the server's cores.
    """
    os.nice(19)
    _raise_nofile()
    socks: list[socket.socket | None] = [None] * count
    sent = [0] * count
    head = b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-slow: " + b"a" * 10_000
    while time.time() < stop_at:
        for i, sock in enumerate(socks):
            if time.time() >= stop_at:
                break
            try:
                if sock is None:
                    sock = socket.create_connection(("127.0.0.1", port), timeout=2)
                    socks[i], sent[i] = sock, 0
                sock.send(head[sent[i] : sent[i] + 1])
                sent[i] += 1
            except OSError:
                if sock is not None:
                    sock.close()
                socks[i] = None
        time.sleep(every_s)
    for sock in socks:
        if sock is not None:
            sock.close()


def _open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def _rss_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _ms(values: list[float]) -> str:
    q = statistics.quantiles(values, n=20) if len(values) > 1 else values * 19
    return f"p50 {statistics.median(values):.1f} ms, p95 {q[18]:.1f} ms, max {max(values):.1f} ms"


def _health(base: str, pid: int, until: float) -> tuple[list[float], int, int]:
    """Ask /health (a new connection each time) until ``until`` (``time.time()``), 5 a second.

    Return the latencies (ms), the failures and the most descriptors the server held open.
    """
    latencies, failures, fds = [], 0, 0
    with httpx.Client(timeout=10) as client:
        while time.time() < until:
            start = time.perf_counter()
            try:
                client.get(f"{base}/health", headers={"Connection": "close"}).raise_for_status()
                latencies.append((time.perf_counter() - start) * 1000)
            except httpx.HTTPError:
                failures += 1
            fds = max(fds, _open_fds(pid))
            time.sleep(0.2)
    return latencies, failures, fds


def slow_clients(base: str, pid: int, count: int, args: argparse.Namespace, log: Path) -> None:
    """Print /health's latency while ``count`` slow connections are held for ``args.hold``."""
    port, hold_s = int(base.rsplit(":", 1)[1]), args.hold
    alone = _health(base, pid, time.time() + 5)[0]
    print(f"/health alone: {_ms(alone)}")
    stop_at = time.time() + hold_s
    share = -(-count // SLOW_PROCESSES)
    procs = [
        multiprocessing.Process(target=_slowloris, args=(port, share, stop_at, args.every))
        for _ in range(SLOW_PROCESSES)
    ]
    for p in procs:
        p.start()
    time.sleep(min(15.0, hold_s / 3))  # let them open
    cpu, start_s = cpu_seconds(pid), time.monotonic()
    latencies, failures, fds = _health(base, pid, stop_at - 1)
    busy = (cpu_seconds(pid) - cpu) / (time.monotonic() - start_s)
    for p in procs:
        p.join()
    emfile = log.read_text(errors="replace").count("Too many open files")
    print(
        f"/health under {count} slow connections ({SLOW_PROCESSES} processes, a byte of each "
        f"head every {args.every:g} s): {_ms(latencies) if latencies else 'no answer'}; "
        f"{failures} failed of {len(latencies) + failures}; server's CPU {busy:.2f} s/s, open "
        f"descriptors at most {fds}; "
        f"'Too many open files' in its log: {emfile}"
    )


def invented_methods(base: str, count: int) -> None:
    """Print /metrics's size before and after ``count`` requests with invented methods."""
    with httpx.Client(base_url=base, timeout=10) as client:
        before = len(client.get("/metrics").content)
        for i in range(count):
            client.request(f"M{i}", "/health" if i % 2 else f"/x/{i}")
        after = len(client.get("/metrics").content)
    print(f"/metrics after {count} invented methods: {before / 1e3:.1f} KB -> {after / 1e3:.1f} KB")


def rooflines(base: str, pid: int, clients: int, requests: int, paths: list[str]) -> None:
    """Print the server's peak RSS while ``clients`` ask for rooflines at once."""
    rss_before = _rss_mb(pid, "VmRSS")
    latencies: list[float] = []
    codes: dict[int, int] = {}
    lock = threading.Lock()

    def one_client(n: int) -> None:
        with httpx.Client(base_url=base, timeout=120) as client:
            for i in range(requests):
                start = time.perf_counter()
                code = client.get(paths[(n + i) % len(paths)]).status_code
                with lock:
                    latencies.append((time.perf_counter() - start) * 1000)
                    codes[code] = codes.get(code, 0) + 1

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one_client, range(clients)))
    print(
        f"rooflines, {clients} clients x {requests} requests over {len(paths)} figures: "
        f"RSS {rss_before:.0f} MB before, peak {_rss_mb(pid, 'VmHWM'):.0f} MB, now "
        f"{_rss_mb(pid, 'VmRSS'):.0f} MB; {_ms(latencies)}; statuses {codes}"
    )


def serve(url: str, log: Path, extra: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``opdb serve`` on ``url``, expensive reads unlimited; wait for /health (120 s).

    ``extra``: ``NAME=VALUE`` settings of the server's environment.
    """
    port = _free_port()
    env = {
        **_env(url),
        "OPDB_API_RATE_PER_S": "0",
        "OPDB_API_CLIENT_SHARE": "0",
        **dict(e.split("=", 1) for e in extra),
    }
    cmd = [sys.executable, "-m", "operator_db", "serve", "--port", str(port)]
    with log.open("wb") as out:
        server = subprocess.Popen(cmd, env=env, stdout=out, stderr=out, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and server.poll() is None:
        try:
            if httpx.get(f"{base}/health", timeout=5).status_code == 200:
                return server, base
        except httpx.HTTPError:
            time.sleep(0.3)
    stop(server)
    raise RuntimeError(f"the server did not start:\n{log.read_text()[-3000:]}")


def main() -> None:
    """Seed, serve, and print the three figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", type=int, default=20_000, help="slow connections")
    parser.add_argument("--only", default="rooflines,methods,slow", help="which figures")
    parser.add_argument("--hold", type=float, default=45.0, help="s the slow ones are held")
    parser.add_argument("--every", type=float, default=1.0, help="s between a head's bytes")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server")
    parser.add_argument("--methods", type=int, default=10_000, help="invented methods")
    parser.add_argument("--clients", type=int, default=40, help="clients asking for rooflines")
    parser.add_argument("--requests", type=int, default=5, help="rooflines each client asks")
    args = parser.parse_args()
    print(f"open files limit {_raise_nofile()}")
    from tests.ui.seed import KINDS, MODEL, NS_KINDS, NS_MODEL, seed

    with tempfile.TemporaryDirectory(prefix="opdb-dos-") as tmp:
        url = f"sqlite:///{tmp}/dos.sqlite"
        seed(url)
        log = Path(tmp) / "serve.log"
        server, base = serve(url, log, args.env)
        try:
            pid = server.pid
            loop = next(
                (line for line in log.read_text().splitlines() if "event loop:" in line), "?"
            )
            rss = _rss_mb(pid, "VmRSS")
            print(f"server RSS at start {rss:.0f} MB; event loop {loop.split(': ')[-1]}")
            figures = [(MODEL, KINDS[0])] + [(NS_MODEL, k) for k in NS_KINDS]
            paths = [
                f"/models/{m}/roofline?device_kind={k}&format={f}"
                for m, k in figures
                for f in ("png", "svg")
            ]
            if "rooflines" in args.only:
                rooflines(base, pid, args.clients, args.requests, paths)
            if "methods" in args.only:
                invented_methods(base, args.methods)
            if "slow" in args.only:
                slow_clients(base, pid, args.slow, args, log)
        finally:
            stop(server)


if __name__ == "__main__":
    main()
