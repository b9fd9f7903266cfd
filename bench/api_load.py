"""bench_api's load: the clients of the estimate endpoint, the writer process, CPU accounting.

The clients are asyncio tasks, each with its own keep-alive connection (httpx), asking for the
estimate of a random model on a random device kind, one request after another (or, with a rate,
on a schedule, latency counted from the scheduled time so that a slow server is not hidden).

The writer (``python bench/api_load.py writer URL ...``) stores results as a worker does, one
write transaction each (SQLite: ``BEGIN IMMEDIATE``, the database's write lock), for configurations
the estimates read, until its time is up; then it deletes what it wrote and prints its figures
as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class LoadResult:
    """What the clients saw during the measured period."""

    latencies_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    """Requests that got no answer, by exception type."""
    samples: list[str] = field(default_factory=list)
    """A few answers that were not 200, for the report."""
    wall_s: float = 0.0
    client_cpu_s: float = 0.0
    probes: dict[str, float] = field(default_factory=dict)
    """What each probe of :func:`drive` counted over the measured period (its end − its start)."""

    @property
    def requests(self) -> int:
        """Requests answered in the measured period."""
        return len(self.latencies_ms)

    @property
    def errors(self) -> int:
        """Answers other than 200, and requests without an answer."""
        return sum(n for status, n in self.statuses.items() if status != 200) + sum(
            self.failures.values()
        )

    def percentile(self, q: float) -> float:
        """Return the ``q``-quantile (nearest rank) of the latencies, in ms; NaN if none."""
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


async def _client(
    base: str,
    targets: list[tuple[str, str]],
    rng: random.Random,
    interval_s: float,
    begin: float,
    measure_from: float,
    end: float,
    out: LoadResult,
) -> None:
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30.0) as client:
        scheduled = begin + (rng.random() * interval_s if interval_s else 0.0)
        while True:
            now = time.perf_counter()
            if interval_s:
                if scheduled > now:
                    await asyncio.sleep(scheduled - now)
                start = scheduled
                scheduled += interval_s
            else:
                start = now
            if start >= end:
                return
            model, kind = rng.choice(targets)
            try:
                response = await client.get(
                    f"/models/{model}/estimate", params={"device_kind": kind}
                )
                status: int | None = response.status_code
            except httpx.HTTPError as exc:
                status, response = None, None
                if start >= measure_from:
                    name = type(exc).__name__
                    out.failures[name] = out.failures.get(name, 0) + 1
            if start < measure_from or status is None:
                continue
            out.latencies_ms.append((time.perf_counter() - start) * 1e3)
            out.statuses[status] = out.statuses.get(status, 0) + 1
            if status != 200 and response is not None and len(out.samples) < 5:
                out.samples.append(f"{status} {model} {kind}: {response.text[:300]}")


async def _drive(
    base: str,
    targets: list[tuple[str, str]],
    clients: int,
    warmup_s: float,
    duration_s: float,
    rate: float,
    seed: int,
    probes: dict[str, Callable[[], float]],
) -> LoadResult:
    out = LoadResult()
    begin = time.perf_counter()
    measure_from = begin + warmup_s
    end = measure_from + duration_s
    interval_s = clients / rate if rate > 0 else 0.0
    cpu = [0.0]

    async def mark() -> None:  # CPU times over the measured period only
        await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
        cpu[0] = time.process_time()
        out.probes = {name: probe() for name, probe in probes.items()}

    marker = asyncio.create_task(mark())
    await asyncio.gather(
        *(
            _client(
                base,
                targets,
                random.Random(seed * 1000 + i),
                interval_s,
                begin,
                measure_from,
                end,
                out,
            )
            for i in range(clients)
        )
    )
    await marker
    out.wall_s = time.perf_counter() - measure_from
    out.client_cpu_s = time.process_time() - cpu[0]
    out.probes = {name: probe() - out.probes[name] for name, probe in probes.items()}
    return out


def drive(
    base: str,
    targets: list[tuple[str, str]],
    *,
    clients: int,
    warmup_s: float,
    duration_s: float,
    rate: float = 0.0,
    seed: int = 0,
    probes: dict[str, Callable[[], float]] | None = None,
) -> LoadResult:
    """Ask ``base`` for estimates of ``targets`` from ``clients`` clients; time ``duration_s``.

    ``rate`` > 0: requests per second over all clients, each on its own schedule; 0: each client
    sends its next request as soon as the last one is answered. The first ``warmup_s`` are not
    counted. ``probes`` are read when the measured period starts and ends (e.g. a server's CPU
    seconds).
    """
    return asyncio.run(
        _drive(base, targets, clients, warmup_s, duration_s, rate, seed, probes or {})
    )


def _stat(pid: int) -> list[str]:
    """Return the fields of /proc/PID/stat after the command's name (state first)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """Return the CPU time (user + system) of process ``pid`` and its descendants, in s.

    Ended descendants count where they were waited for (their parent's ``cutime``); a process
    that is gone counts 0.
    """
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(_stat(int(entry.name))[1])
            except (OSError, IndexError, ValueError):
                continue
    family, total = [pid], 0.0
    while family:
        current = family.pop()
        family.extend(child for child, parent in parents.items() if parent == current)
        try:
            total += sum(int(v) for v in _stat(current)[11:15]) / _TICK  # utime .. cstime
        except (OSError, IndexError, ValueError):
            continue
    return total


def run_writer(url: str, duration_s: float, interval_s: float, seed: int) -> dict[str, float]:
    """Store results of measured configurations, one transaction each, for ``duration_s``.

    Returns commits, rows, the longest commit (ms), CPU seconds and failures; the rows are
    deleted at the end.
    """
    from api_fill import result_row, targets
    from sqlalchemy import delete

    from operator_db.db import queries
    from operator_db.db.models import Host, Measurement
    from operator_db.db.store import Store

    rng = random.Random(seed)
    commits = rows = failures = 0
    longest = 0.0
    with Store.open(url, migrate=False) as store:
        found, _ = targets(store)
        with store.transaction() as session:
            host_ids = {
                kind_id: queries.get_or_create_host(
                    session, "bench-writer", str(kind_id), kind_id
                ).id
                for kind_id in {t.kind_id for t in found}
            }
        cpu = time.process_time()
        end = time.perf_counter() + duration_s
        while time.perf_counter() < end:
            target = rng.choice(found)
            results = [
                result_row(target, rng, datetime.now(UTC), host_ids[target.kind_id])
                | {"created_at": datetime.now(UTC)}
                for _ in range(rng.randint(1, 3))
            ]
            start = time.perf_counter()
            try:
                with store.transaction() as session:
                    session.add_all(Measurement(**row) for row in results)
            except Exception as exc:  # noqa: BLE001 - counted and reported, the run goes on
                failures += 1
                print(f"writer: {exc}", file=sys.stderr)
            else:
                commits += 1
                rows += len(results)
            longest = max(longest, time.perf_counter() - start)
            time.sleep(interval_s)
        cpu = time.process_time() - cpu
        with store.transaction() as session:
            ids = list(host_ids.values())
            session.execute(delete(Measurement).where(Measurement.host_id.in_(ids)))
            session.execute(delete(Host).where(Host.id.in_(ids)))
    return {
        "commits": commits,
        "rows": rows,
        "longest_commit_ms": longest * 1e3,
        "cpu_s": cpu,
        "failures": failures,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="bench_api's writer process")
    parser.add_argument("role", choices=["writer"])
    parser.add_argument("url")
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--interval-ms", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    figures = run_writer(args.url, args.duration, args.interval_ms / 1e3, args.seed)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
