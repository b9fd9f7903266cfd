"""Benchmark: request bodies as an attack on a served API (issue 46; docs/api.md, "Limits").

Seeds and serves as ``bench_dos.py`` does (``opdb serve``, its default limits, a write token set)
and, for each attack, prints ``/health``'s latency from another client while it runs (target:
p95 < 100 ms) and the server's peak RSS (target < 600 MB):

- ``silent``: ``--count`` sign-ins with ``Expect: 100-continue`` and ``Content-Length: 100``, then
  silence (the probe's 260 held every in-flight slot: a 503 for everyone);
- ``trickle``: ``--count`` sign-ins with a chunked body, a byte every ``--every`` s;
- ``head-body``: ``--count`` ``GET /health`` with ``Content-Length: 1000000000``, then a byte every
  ``--every`` s (the probe's 4,200 filled the connection cap);
- ``big``: 20 clients each sending a 1.5 GB JSON body to ``POST /models/{name}/jobs``, half
  without a token and half with one, as fast as loopback takes it (the probe's took the server
  from 327 MB to 3.5 GB).

Every attacker reopens what the server closes, for ``--hold`` s.

    .venv/bin/python bench/bench_dos_bodies.py [--count 400] [--hold 45] [--only silent,big]
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_api import ROOT, stop
from bench_dos import _health, _ms, _raise_nofile, _rss_mb, serve

sys.path.insert(0, str(ROOT))

TOKEN = "bench-token"
PROCESSES = 4
HEADS = {
    "silent": b"POST /ui/login HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\n"
    b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n",
    "trickle": b"POST /ui/login HTTP/1.1\r\nHost: localhost\r\n"
    b"Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n",
    "head-body": b"GET /health HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000000\r\n\r\n",
}
TRICKLE = {"silent": b"", "trickle": b"1\r\na\r\n", "head-body": b"a"}
BIG_BYTES = 1_500_000_000


def _attacker(
    port: int, kind: str, count: int, stop_at: float, every_s: float, out: object
) -> None:
    """Hold ``count`` connections of ``kind``, reopening those closed; put the reopen count."""
    socks: list[socket.socket | None] = [None] * count
    reopened = 0
    while time.time() < stop_at:
        for i in range(count):
            sock = socks[i]
            try:
                if sock is None:
                    sock = socket.create_connection(("127.0.0.1", port), timeout=2)
                    sock.setblocking(False)
                    sock.send(HEADS[kind])
                    socks[i] = sock
                    continue
                try:
                    if sock.recv(65536) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    pass
                if TRICKLE[kind]:
                    sock.send(TRICKLE[kind])
            except OSError:
                if sock is not None:
                    sock.close()
                socks[i] = None
                reopened += 1
        time.sleep(every_s)
    for sock in socks:
        if sock is not None:
            sock.close()
    out.put(reopened)  # type: ignore[attr-defined]


def held(base: str, pid: int, kind: str, args: argparse.Namespace) -> None:
    """Print /health's latency and the server's RSS while ``args.count`` ``kind`` clients run."""
    port = int(base.rsplit(":", 1)[1])
    stop_at = time.time() + args.hold
    out: multiprocessing.Queue[int] = multiprocessing.Queue()
    share = -(-args.count // PROCESSES)
    procs = [
        multiprocessing.Process(
            target=_attacker, args=(port, kind, share, stop_at, args.every, out)
        )
        for _ in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    time.sleep(3)
    latencies, failures, fds = _health(base, pid, stop_at - 1)
    reopened = sum(out.get() for _ in procs)
    for p in procs:
        p.join()
    print(
        f"{kind}: /health under {args.count} such clients for {args.hold:g} s: "
        f"{_ms(latencies) if latencies else 'no answer'}; {failures} failed of "
        f"{len(latencies) + failures}; connections the server closed {reopened}; open "
        f"descriptors at most {fds}; RSS now {_rss_mb(pid, 'VmRSS'):.0f} MB"
    )


def _big_body(port: int, token: bool, sent: list[int], codes: list[str]) -> None:
    """Send one 1.5 GB JSON body to a write route (chunked), as fast as it is taken."""
    auth = f"Authorization: Bearer {TOKEN}\r\n".encode() if token else b""
    chunk = b"[" + b"1," * (1 << 19)  # 1 MiB of a JSON list that never closes
    piece = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    total = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(
            b"POST /models/bench/jobs HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/json\r\n" + auth + b"Transfer-Encoding: chunked\r\n\r\n"
        )
        try:
            while total < BIG_BYTES:
                sock.sendall(piece)
                total += len(chunk)
        except OSError:
            pass
        try:
            codes.append(sock.recv(200).split(b"\r\n", 1)[0].decode(errors="replace"))
        except OSError as exc:
            codes.append(type(exc).__name__)
    sent.append(total)


def big_bodies(base: str, pid: int) -> None:
    """Print the server's peak RSS while 20 clients send 1.5 GB bodies at once."""
    port = int(base.rsplit(":", 1)[1])
    before = _rss_mb(pid, "VmRSS")
    sent: list[int] = []
    codes: list[str] = []
    threads = [
        threading.Thread(target=_big_body, args=(port, i % 2 == 1, sent, codes)) for i in range(20)
    ]
    start = time.monotonic()
    for t in threads:
        t.start()
    latencies, failures, _ = _health(base, pid, time.time() + 5)
    for t in threads:
        t.join()
    print(
        f"big: 20 x 1.5 GB bodies (10 without a token, 10 with): the server took "
        f"{sum(sent) / 1e6:.1f} MB in {time.monotonic() - start:.1f} s; answers "
        f"{sorted(set(codes))}; RSS {before:.0f} MB before, peak {_rss_mb(pid, 'VmHWM'):.0f} MB; "
        f"/health meanwhile {_ms(latencies) if latencies else 'no answer'}, {failures} failed"
    )


def main() -> None:
    """Seed, serve, and print each attack's figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=400, help="connections of each attack")
    parser.add_argument("--hold", type=float, default=45.0, help="s each attack runs")
    parser.add_argument("--every", type=float, default=3.0, help="s between trickled bytes")
    parser.add_argument("--only", default="silent,trickle,head-body,big", help="which attacks")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server")
    args = parser.parse_args()
    print(f"open files limit {_raise_nofile()}")
    from tests.ui.seed import seed

    with tempfile.TemporaryDirectory(prefix="opdb-dos-bodies-") as tmp:
        url = f"sqlite:///{tmp}/dos.sqlite"
        seed(url)
        server, base = serve(url, Path(tmp) / "serve.log", [f"OPDB_API_TOKEN={TOKEN}", *args.env])
        try:
            pid = server.pid
            print(f"server RSS at start {_rss_mb(pid, 'VmRSS'):.0f} MB")
            alone = _health(base, pid, time.time() + 5)[0]
            print(f"/health alone: {_ms(alone)}")
            for kind in ("silent", "trickle", "head-body"):
                if kind in args.only.split(","):
                    held(base, pid, kind, args)
            if "big" in args.only.split(","):
                big_bodies(base, pid)
        finally:
            stop(server)


if __name__ == "__main__":
    main()
