"""Benchmark: the queue, its workers and the API through faults (issue 46's chaos run).

On a private PostgreSQL cluster (``initdb`` in a temporary folder, on its own port: never the
shared server, which this stops and starts), ``--jobs`` fake-device jobs are measured by
``--workers`` ``opdb worker`` processes while ``--clients`` threads ask ``opdb serve`` for
``/health`` and ``/models``, and these faults come:

- PostgreSQL is **down while the workers and the API start** (``--startup-outage-s``);
- PostgreSQL **stops for ``--outage-s`` while jobs are being claimed** (once, ``--outage-at-s``
  after the start);
- every ``--kill-every-s``, every other connection is ended by ``pg_terminate_backend``;
- every ``--sigkill-every-s``, a random worker is killed (SIGKILL) and started again, as a
  supervisor would; its job comes back when its lease (``--lease-s``) runs out.

At the end every worker gets SIGTERM. Printed: jobs done, failed and lost; duplicate results;
workers that exited on their own (not killed here) and their exit codes; the API's answers by
status, connections dropped, and 503s later than 1 s after the database was back. Exit 1 if a
target of issue 46 is missed: 0 worker exits, 0 lost jobs, 0 duplicates, 0 dropped connections,
no 503 more than 1 s after the database is back. Run (root or the ``postgres`` user: the server
runs as ``postgres``):

    .venv/bin/python bench/bench_chaos.py [--jobs 400] [--workers 3] [--clients 20]
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from operator_db.config import FAST_FAKE_MEASURE
from operator_db.specs import SPEC_VERSION

BIN = Path(
    subprocess.run(
        ["pg_config", "--bindir"], capture_output=True, text=True, check=False
    ).stdout.strip()
    or "/usr/lib/postgresql/15/bin"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A throwaway PostgreSQL cluster in ``folder``, run as ``postgres`` where we are root."""

    def __init__(self, folder: Path, port: int) -> None:
        self.data, self.port, self.log = folder / "data", port, folder / "server.log"
        self.as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if os.geteuid() == 0:
            shutil.chown(folder, "postgres")
        self._run(str(BIN / "initdb"), "-A", "trust", "-U", "postgres", "-D", str(self.data))

    def _run(self, *argv: str) -> None:
        subprocess.run([*self.as_postgres, *argv], check=True, capture_output=True)

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = (
            f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c max_connections=200"
        )
        self._run(
            str(BIN / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            options,
            "-w",
            "start",
        )

    def stop(self) -> None:
        """Stop the server (fast: connections are ended, as at a crash or a restart)."""
        self._run(str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def halt(self) -> None:
        """Stop the server if it runs, whatever state the run left it in (never raises)."""
        subprocess.run(
            [*self.as_postgres, str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
             "stop"],
            check=False, capture_output=True,
        )  # fmt: skip

    def url(self, database: str) -> str:
        """Return the SQLAlchemy URL of ``database`` on this cluster."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def terminate_others(self) -> int:
        """End every other connection to the cluster; how many."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        ) as c:
            rows = c.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
            ).fetchall()
        return len(rows)


@dataclass
class Clients:
    """``n`` threads asking the API in turn for /health and /models; every answer kept."""

    port: int
    tokens: list[str]
    """One read token a client: each its own client to the API's limits, as 20 hosts would be."""
    answers: list[tuple[float, str, int | str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> list[threading.Thread]:
        """Start the clients; their threads."""
        threads = [
            threading.Thread(target=self._client, args=(i,), daemon=True)
            for i in range(len(self.tokens))
        ]
        for t in threads:
            t.start()
        return threads

    def _client(self, i: int) -> None:
        paths = ("/health", "/models")
        k = i
        while not self.stop.is_set():
            path = paths[k % 2]
            k += 1
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                conn.request("GET", path, headers={"Authorization": f"Bearer {self.tokens[i]}"})
                status: int | str = conn.getresponse().status
                conn.close()
            except ConnectionRefusedError:
                status = "refused"  # the API not listening yet: not a dropped connection
            except (OSError, http.client.HTTPException) as exc:
                status = type(exc).__name__
            self.answers.append((time.monotonic(), path, status))
            time.sleep(0.2)


LOGS: dict[int, Path] = {}
"""Each process's output file, by its pid."""
PROCESSES: list[subprocess.Popen[bytes]] = []
"""Every process started, so that an interrupted run leaves none behind."""


def opdb(*args: str, env: dict[str, str], folder: Path) -> subprocess.Popen[bytes]:
    """Start ``opdb ARGS`` with its output in a log file of ``folder`` (:data:`LOGS`)."""
    log = folder / f"{args[0]}-{len(LOGS)}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "operator_db", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    LOGS[process.pid] = log
    PROCESSES.append(process)
    return process


def last_lines(log: Path, n: int = 3) -> str:
    """Return the last ``n`` lines of a log, on one line."""
    lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return " / ".join(lines[-n:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--lease-s", type=float, default=10.0)
    parser.add_argument("--startup-outage-s", type=float, default=10.0)
    parser.add_argument("--outage-at-s", type=float, default=40.0)
    parser.add_argument("--outage-s", type=float, default=30.0)
    parser.add_argument("--kill-every-s", type=float, default=10.0)
    parser.add_argument("--sigkill-every-s", type=float, default=4.0)
    parser.add_argument("--limit-s", type=float, default=900.0)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="opdb-chaos-"))
    cluster = Cluster(folder, free_port())
    # SIGTERM (a timeout's) ends the run through the cleanup below, as Ctrl-C does
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        met = run_chaos(args, cluster, folder)
    finally:  # an interrupted run leaves no server or process behind
        for process in PROCESSES:
            if process.poll() is None:
                process.kill()
                process.wait()
        cluster.halt()
    if met:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        print(f"the processes' output: {folder}/*.log")
    sys.exit(0 if met else 1)


def run_chaos(args: argparse.Namespace, cluster: Cluster, folder: Path) -> bool:
    """Run the chaos on ``cluster`` and print its figures; whether every target was met."""
    rng = random.Random(0)
    cluster.start()
    subprocess.run(
        [
            *cluster.as_postgres,
            str(BIN / "createdb"),
            "-h",
            "127.0.0.1",
            "-p",
            str(cluster.port),
            "-U",
            "postgres",
            "chaos",
        ],
        check=True,
    )
    url = cluster.url("chaos")
    base = {k: v for k, v in os.environ.items() if not k.startswith("OPDB_")}
    env = {**base, **FAST_FAKE_MEASURE, "OPDB_DATABASE_URL": url}
    spec = {
        "spec_version": SPEC_VERSION,
        "model": {
            "name": "chaos",
            "reference": "module:operator_db.examples:mlp",
            "mode": "inference",
            "inputs": [{"name": "x", "shape": [4, 16], "dtype": "float32"}],
        },
        "operators": [
            {
                "op": "torch.nn.ReLU",
                "form": "module",
                "inputs": [{"shape": [1, k + 1], "dtype": "float32"}],
                "outputs": [{"shape": [1, k + 1], "dtype": "float32"}],
                "count": 1,
            }
            for k in range(args.jobs)
        ],
    }
    (folder / "chaos.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    for cmd in (
        ["db", "upgrade"],
        ["ingest", str(folder / "chaos.yaml")],
        ["enqueue", "chaos", "--device-kind", "fake:FakeGPU", "--no-model-run"],
    ):
        subprocess.run(
            [sys.executable, "-m", "operator_db", *cmd], env=env, check=True, capture_output=True
        )

    outages: list[tuple[float, float]] = []
    down_at = time.monotonic()  # from the moment it is told to stop
    cluster.stop()  # down while everything starts
    api_port = free_port()
    tokens = [secrets.token_hex(8) for _ in range(args.clients)]
    api_env = {**env, "OPDB_API_READ_TOKENS": json.dumps(tokens)}
    api = opdb("serve", "--port", str(api_port), env=api_env, folder=folder)
    worker_args = ["worker", "--device", "fake", "--poll", "0.2", "--lease", str(args.lease_s)]
    workers = [opdb(*worker_args, env=env, folder=folder) for _ in range(args.workers)]
    clients = Clients(api_port, tokens)
    threads = clients.run()
    time.sleep(args.startup_outage_s)
    cluster.start()
    outages.append((down_at, time.monotonic()))
    start = time.monotonic()
    kills = terminated = 0
    own_exits: list[int] = []
    down_since: float | None = None
    next_kill, next_terminate, outage_done = (
        start + args.sigkill_every_s,
        start + args.kill_every_s,
        False,
    )
    import psycopg

    def left() -> int:
        with psycopg.connect(
            host="127.0.0.1", port=cluster.port, user="postgres", dbname="chaos"
        ) as c:
            row = c.execute(
                "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')"
            ).fetchone()
        return int(row[0]) if row else -1

    while time.monotonic() - start < args.limit_s:
        now = time.monotonic()
        for i, w in enumerate(workers):
            code = w.poll()
            if code is not None:  # exited on its own: count it, start it again (a supervisor)
                own_exits.append(code)
                print(f"worker exited {code}: {last_lines(LOGS[w.pid])}")
                workers[i] = opdb(*worker_args, env=env, folder=folder)
        if down_since is None and not outage_done and now - start >= args.outage_at_s:
            down_since = now  # stopped while jobs are claimed; SIGKILLs go on meanwhile
            cluster.stop()
        if down_since is not None and now - down_since >= args.outage_s:
            cluster.start()
            outages.append((down_since, time.monotonic()))
            down_since, outage_done = None, True
        if now >= next_kill:
            i = rng.randrange(len(workers))
            workers[i].send_signal(signal.SIGKILL)
            workers[i].wait()
            workers[i] = opdb(*worker_args, env=env, folder=folder)
            kills += 1
            next_kill = now + args.sigkill_every_s
        if now >= next_terminate and down_since is None:
            terminated += cluster.terminate_others()
            next_terminate = now + args.kill_every_s
        try:
            if outage_done and left() == 0:
                break
        except psycopg.Error:
            pass
        time.sleep(0.5)
    elapsed = time.monotonic() - start
    # A supervisor's stop: to running workers (one started a moment ago is still in Python's
    # own start, where SIGTERM's default ends any program; it holds nothing).
    settle = time.monotonic() + 60
    while time.monotonic() < settle and not all(
        "registered" in LOGS[w.pid].read_text(encoding="utf-8", errors="replace") for w in workers
    ):
        time.sleep(0.5)
    for w in workers:
        w.send_signal(signal.SIGTERM)
    sigterm_codes = [w.wait(timeout=120) for w in workers]
    for w, code in zip(workers, sigterm_codes, strict=True):
        if code != 0:
            print(f"worker exited {code} on SIGTERM: {last_lines(LOGS[w.pid])}")
    clients.stop.set()
    for thread in threads:
        thread.join(timeout=15)
    api.send_signal(signal.SIGTERM)
    api.wait(timeout=30)

    with psycopg.connect(host="127.0.0.1", port=cluster.port, user="postgres", dbname="chaos") as c:
        by_status: dict[str, int] = dict(
            c.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall()
        )
        results = c.execute("SELECT count(*) FROM measurements").fetchone()
        twice = c.execute(
            "SELECT count(*) FROM (SELECT config_id FROM measurements "
            "GROUP BY config_id, device_kind_id HAVING count(*) > 1) AS t"
        ).fetchone()
        attempts = c.execute("SELECT max(attempts) FROM jobs").fetchone()
    cluster.stop()

    statuses = collections.Counter(str(s) for _, _, s in clients.answers)
    dropped = sum(n for s, n in statuses.items() if not s.isdigit() and s != "refused")
    late_503 = [
        (t, path)
        for t, path, s in clients.answers
        if s == 503 and not any(a <= t <= b + 1.0 for a, b in outages)
    ]
    for t, path in late_503:
        back = max((b for _, b in outages if b <= t), default=start)
        print(f"503 for {path} {t - back:.1f} s after the database was back")
    done = int(by_status.get("done", 0))
    lost = args.jobs - done
    duplicates = int(twice[0]) if twice else -1
    print(
        f"{args.jobs} jobs, {args.workers} workers, {args.clients} clients; "
        f"{elapsed:.0f} s after the database first came up"
    )
    print(
        f"faults: PostgreSQL down {len(outages)} times "
        f"({', '.join(f'{b - a:.0f} s' for a, b in outages)}), "
        f"{kills} SIGKILLs, {terminated} connections ended by pg_terminate_backend"
    )
    print()
    print("| measure | figure | target | met |")
    print("| --- | ---: | ---: | --- |")
    rows = [
        ("jobs done", done, args.jobs),
        ("jobs failed", int(by_status.get("failed", 0)), 0),
        ("jobs not done when it ended (queued or leased)", lost, 0),
        ("results", int(results[0]) if results else -1, args.jobs),
        ("configurations measured twice", duplicates, 0),
        ("workers that exited on their own", len(own_exits), 0),
        ("workers exiting 0 on SIGTERM", sum(c == 0 for c in sigterm_codes), len(sigterm_codes)),
        ("API connections dropped", dropped, 0),
        ("503s > 1 s after the database was back", len(late_503), 0),
    ]
    for label, figure, target in rows:
        print(f"| {label} | {figure} | {target} | {'yes' if figure == target else 'no'} |")
    print()
    print(
        f"most attempts of a job: {attempts[0] if attempts else '-'}; "
        f"own exits' codes: {own_exits or '-'}"
    )
    print("API answers: " + ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items())))
    return all(figure == target for _, figure, target in rows)


if __name__ == "__main__":
    main()
