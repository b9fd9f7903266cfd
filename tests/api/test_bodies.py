"""Request bodies: bounded per route, timed, read after the token check (issue 46's findings).

The served tests run a real ``opdb serve`` with a 1 s body timeout, 16 connections and 4 requests
in flight, and attack it with raw sockets as the probe did.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import APIRouter
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from api.app import create_app
from api.bodies import body_limit, token_needed
from api.deps import require_write
from api.routes import MODULES as ROUTE_MODULES
from api.ui import pages as pages_module
from operator_db.config import Settings
from tests.api.test_serve_limits import _answer, _response, serving

TOKEN = "s3cret-token"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A server with a 1 s body timeout, 16 connections, 4 requests in flight: host and port."""
    settings = {
        "OPDB_API_BODY_TIMEOUT_S": "1",
        "OPDB_API_HEADER_TIMEOUT_S": "1",
        "OPDB_API_MAX_CONNECTIONS": "16",
        "OPDB_API_MAX_REQUESTS": "4",
        "OPDB_API_TOKEN": TOKEN,
    }
    with serving(tmp_path, settings) as where:
        yield where


def _health_ms(where: tuple[str, int]) -> tuple[int, float]:
    start = time.monotonic()
    answer = httpx.get(f"http://{where[0]}:{where[1]}/health", timeout=5)
    return answer.status_code, (time.monotonic() - start) * 1000


@pytest.mark.slow
def test_a_body_that_never_comes_holds_no_slot_and_is_timed(served: tuple[str, int]) -> None:
    """260 sign-ins with ``Expect: 100-continue`` and silence took all 256 slots: a 503 for all."""
    stalled = [socket.create_connection(served) for _ in range(10)]  # > 4 in flight
    try:
        for sock in stalled:
            sock.sendall(
                b"POST /ui/login HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\n"
                b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n"
            )
        time.sleep(0.2)
        status, ms = _health_ms(served)
        assert status == 200 and ms < 1000
        start = time.monotonic()
        answer = _answer(stalled[0], 10)
        assert b"HTTP/1.1 408 " in answer and b"body" in answer  # after a "100 Continue"
        assert b"content-security-policy" in answer.lower()
        assert time.monotonic() - start < 4
    finally:
        for sock in stalled:
            sock.close()


@pytest.mark.slow
def test_a_trickled_body_is_closed_whatever_it_sends(served: tuple[str, int]) -> None:
    """A byte every 0.3 s (every 3 s in the probe) restarted no clock: closed within the timeout."""
    with socket.create_connection(served) as sock:
        sock.sendall(
            b"POST /ui/login HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        start = time.monotonic()
        closed = False
        while time.monotonic() - start < 6 and not closed:
            try:
                sock.sendall(b"1\r\na\r\n")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            sock.settimeout(0.3)
            try:
                closed = b" 408 " in sock.recv(4096)
            except TimeoutError:
                pass
            except ConnectionResetError:
                closed = True
        assert closed and time.monotonic() - start < 4


@pytest.mark.slow
def test_a_stalled_body_is_evicted_like_a_stalled_head(served: tuple[str, int]) -> None:
    """4,200 GETs of /health with a 1 GB Content-Length, trickled, filled the connection cap."""
    stalled = [socket.create_connection(served) for _ in range(40)]  # > 16 connections
    try:
        for sock in stalled:
            sock.sendall(
                b"POST /models/x/jobs HTTP/1.1\r\nHost: localhost\r\n"
                + f"Authorization: Bearer {TOKEN}\r\n".encode()
                + b"Content-Type: application/json\r\nContent-Length: 60000\r\n\r\n{"
            )
        status, ms = _health_ms(served)
        assert status == 200 and ms < 1000
    finally:
        for sock in stalled:
            sock.close()


@pytest.mark.slow
def test_a_body_on_a_read_is_refused_at_once(served: tuple[str, int]) -> None:
    with socket.create_connection(served) as sock:
        sock.sendall(
            b"GET /health HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000000\r\n\r\nx"
        )
        head = _response(sock)
        assert head.startswith(b"HTTP/1.1 413 ") and b"connection: close" in head.lower()
        assert _answer(sock, 2) == b""  # closed: no trickle can keep it


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    settings = Settings(database_url=db_url, api_token=TOKEN, api_max_body_bytes=1000)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_the_token_is_checked_before_the_body(client: TestClient) -> None:
    """A 1.5 GB JSON body took the server to 3.5 GB before its 422: now a 401, nothing read."""
    declared = {"Content-Length": str(1_500_000_000), "Content-Type": "application/json"}
    answer = client.post("/models/x/jobs", content=b"{", headers=declared)
    assert answer.status_code == 413  # declared over the route's limit: refused unread
    read: list[int] = []

    def body() -> Iterator[bytes]:  # chunked, past the route's limit if it were read
        for _ in range(3):
            read.append(600)
            yield b"x" * 600

    answer = client.post("/models/x/jobs", content=body())
    assert answer.status_code == 401  # not 413: refused before the body was read
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert answer.headers["content-type"] == "application/problem+json"
    read_only = client.post(
        "/models/x/jobs", json={"device_kind": "cpu"}, headers={"Authorization": "Bearer nope"}
    )
    assert read_only.status_code == 401


def test_a_chunked_body_past_the_route_limit_is_a_413(client: TestClient) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    answer = client.post("/models/x/jobs", content=iter([b"x" * 600] * 3), headers=auth)
    assert answer.status_code == 413
    assert "at most 1000 bytes" in answer.json()["detail"]
    fits = client.post("/models/x/jobs", json={"device_kind": "cpu"}, headers=auth)
    assert fits.status_code == 404  # read whole, passed on: the route answers for the model


def test_each_route_has_its_body_limit() -> None:
    settings = Settings(max_spec_bytes=5000, api_max_body_bytes=100)
    assert body_limit("GET", "/health", settings) == 0
    assert body_limit("DELETE", "/models/x", settings) == 0
    assert body_limit("POST", "/specs", settings) == 5000
    assert body_limit("POST", "/ui/login", settings) == 100


def test_a_body_to_no_route_is_left_unread_and_its_connection_closed(client: TestClient) -> None:
    answer = client.request("TRACE", "/specs", content=b"x" * 100)
    assert answer.status_code == 405 and answer.headers["connection"] == "close"
    assert client.post("/nowhere", content=b"x" * 100).status_code == 404


def _right_of(route: APIRoute) -> str | None:
    """The token ``route``'s dependencies check for (write before read), if any."""
    found, stack = set(), [route.dependant]
    while stack:
        dependant = stack.pop()
        found |= {"write"} if dependant.call is require_write else set()
        stack.extend(dependant.dependencies)
    return "write" if found else None


def test_every_route_with_a_body_is_held_to_its_token_before_it() -> None:
    """api.bodies checks the write token of a body's route by rule: every route is held to it."""
    routes = [
        route
        for module in (*ROUTE_MODULES, pages_module)
        for router in vars(module).values()
        if isinstance(router, APIRouter)
        for route in router.routes
        if isinstance(route, APIRoute)
    ]
    assert len(routes) > 30
    for route in routes:
        for method in route.methods or ():
            if body_limit(method, route.path, Settings()) > 0:  # a route that takes a body
                assert token_needed(method, route.path) == _right_of(route), (method, route.path)
