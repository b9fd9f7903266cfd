"""A real `opdb serve` against slow clients: a request head timeout, a cap on connections."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from api.server import connection_cap, raise_open_files_limit
from tests.api.test_serve import _free_port, _wait_for_health

pytestmark = pytest.mark.slow


@contextmanager
def serving(tmp_path: Path, settings: dict[str, str]) -> Iterator[tuple[str, int]]:
    """A real ``opdb serve`` on SQLite with ``settings`` (OPDB_ variables): its host and port."""
    port = _free_port()
    env = {**os.environ, "OPDB_DATABASE_URL": f"sqlite:///{tmp_path}/served.sqlite", **settings}
    with (tmp_path / "serve.log").open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "operator_db", "serve", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=log,
        )
    try:
        _wait_for_health(server, f"http://127.0.0.1:{port}")
        yield "127.0.0.1", port
    finally:
        server.terminate()
        server.wait(timeout=20)


LOOPS = {"uvloop": "event loop: uvloop.Loop", "asyncio": "event loop: asyncio.unix_events."}
"""Each event loop ``opdb serve`` can run on, and the start of what its log says of it."""


@pytest.fixture(scope="module", params=sorted(LOOPS))
def served(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[str, int]]:
    """A server with a 1 s head timeout and room for 16 connections: its host and port.

    Once on each event loop: the guarded protocol keeps its limits on both. One server for the
    module's tests (each closes the connections it opened): a start is 3-4 s on a loaded 2-vCPU
    host, 35 s of the tests' time when each test started its own.
    """
    tmp_path = tmp_path_factory.mktemp(f"served-{request.param}")
    settings = {
        "OPDB_API_HEADER_TIMEOUT_S": "1",
        "OPDB_API_MAX_CONNECTIONS": "16",
        "OPDB_API_EVENT_LOOP": request.param,
    }
    with serving(tmp_path, settings) as where:
        assert LOOPS[request.param] in (tmp_path / "serve.log").read_text()
        yield where


def _answer(sock: socket.socket, within_s: float) -> bytes:
    """What the server sends before it closes ``sock`` (or within ``within_s``)."""
    sock.settimeout(within_s)
    chunks = []
    try:
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    except (TimeoutError, ConnectionResetError):
        pass
    return b"".join(chunks)


def test_a_head_never_finished_is_closed_with_a_408(served: tuple[str, int]) -> None:
    """uvicorn alone never closed it: slow headers held a descriptor for ever."""
    with socket.create_connection(served) as slow, socket.create_connection(served) as silent:
        start = time.monotonic()
        slow.sendall(
            b"GET /health HTTP/1.1\r\nHost: localhost\r\n"
        )  # no blank line: never complete
        answer = _answer(slow, 10)
        assert answer.startswith(b"HTTP/1.1 408 ") and b"application/problem+json" in answer
        assert 0.9 < time.monotonic() - start < 5
        assert _answer(silent, 10).startswith(b"HTTP/1.1 408 ")  # one that sends nothing


def _response(sock: socket.socket) -> bytes:
    """Read one whole response (its head, then ``content-length`` bytes of body)."""
    sock.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(4096)
    return head


def test_a_request_that_cannot_be_parsed_is_a_400_problem_with_the_security_headers(
    served: tuple[str, int],
) -> None:
    """uvicorn's own 400 was plain text, without the headers every other answer carries."""
    with socket.create_connection(served) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nNo colon here\r\n\r\n")
        answer = _answer(sock, 10)
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 400 ") and b"application/problem+json" in head
    assert b"content-security-policy: " in head and b"x-frame-options: DENY" in head
    assert b'"status":400' in body


def test_a_kept_alive_connection_is_timed_on_its_next_head(served: tuple[str, int]) -> None:
    with socket.create_connection(served) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert _response(sock).startswith(b"HTTP/1.1 200 ")  # the whole of it: the body too
        sock.sendall(b"GET /health HTTP/1.1\r\n")
        assert _answer(sock, 10).startswith(b"HTTP/1.1 408 ")


def test_a_next_head_begun_during_the_response_is_timed(served: tuple[str, int]) -> None:
    """Its first bytes came while the response went out: its clock starts with the next cycle
    (it used to start none, and the keep-alive timer closed the connection 5 s later, silent)."""
    with socket.create_connection(served) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\nGET /health HTTP/1.1\r\n")
        assert _response(sock).startswith(b"HTTP/1.1 200 ")
        start = time.monotonic()
        assert _answer(sock, 10).startswith(b"HTTP/1.1 408 ")
        assert time.monotonic() - start < 4  # the 1 s head timeout, not the 5 s keep-alive


def test_slow_connections_beyond_the_cap_do_not_lock_others_out(served: tuple[str, int]) -> None:
    slow = [socket.create_connection(served) for _ in range(40)]
    try:
        for sock in slow:
            sock.sendall(b"GET /he")
        start = time.monotonic()
        assert httpx.get(f"http://{served[0]}:{served[1]}/health", timeout=5).status_code == 200
        assert time.monotonic() - start < 1
        open_ = 0
        for sock in slow:  # the oldest made room for the newer: 16 kept at most
            sock.settimeout(0.2)
            try:
                open_ += sock.recv(1) != b""
            except TimeoutError:
                open_ += 1
            except ConnectionResetError:
                pass
        assert open_ <= 16
    finally:
        for sock in slow:
            sock.close()


def test_the_open_files_limit_is_raised_and_bounds_the_cap() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert raise_open_files_limit() >= soft
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] in (hard, soft)
    assert connection_cap(4096, 1 << 20) == 4096
    assert connection_cap(4096, 1024) == 16  # less than the backlog: the least cap
    assert connection_cap(100_000, 20_000) == 20_000 - 2048 - 256


def test_the_event_loop_setting_reaches_uvicorn_and_a_missing_uvloop_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    from api.server import server_config
    from operator_db.config import Settings
    from operator_db.errors import OperatorDBError

    for loop in ("auto", "uvloop", "asyncio"):
        config = server_config("127.0.0.1", 0, 1, settings=Settings(api_event_loop=loop))
        assert config.loop == loop
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "uvloop" else find_spec(name)
    )
    with pytest.raises(OperatorDBError, match=r"uvloop is not installed \(pip install uvloop\)"):
        server_config("127.0.0.1", 0, 1, settings=Settings(api_event_loop="uvloop"))
    assert server_config("127.0.0.1", 0, 1, settings=Settings()).loop == "auto"
