"""A real `opdb serve` on a free loopback port, talked to over HTTP with keep-alive."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers import EXAMPLE_SPECS

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_health(server: subprocess.Popen[bytes], base: str, within_s: float = 60) -> None:
    """Wait until the server at ``base`` answers /health with 200 (fail if it dies or is late)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert server.poll() is None, server.stdout.read().decode() if server.stdout else ""
        assert time.monotonic() < deadline, f"the server did not start within {within_s:g} s"
        time.sleep(0.3)


def test_a_served_api_answers_and_keeps_its_connections(tmp_path: Path) -> None:
    port = _free_port()
    env = {
        **os.environ,
        "OPDB_DATABASE_URL": f"sqlite:///{tmp_path}/served.sqlite",
        "OPDB_API_TOKEN": "tok",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "operator_db", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_health(server, base)
        with httpx.Client(base_url=base, timeout=10) as client:
            spec = (EXAMPLE_SPECS / "mlp-small-b8.yaml").read_bytes()
            auth = {"Authorization": "Bearer tok"}
            assert client.post("/specs", content=spec, headers=auth).status_code == 201
            odd = client.post(
                "/specs", content=spec, headers={"Authorization": "Bearer tök".encode()}
            )
            assert odd.status_code == 401
            assert odd.headers["content-type"] == "application/problem+json"
            assert client.get("/nope").status_code == 404
            models = client.get("/models")  # the same connection, after the errors
            assert models.status_code == 200 and models.json()["total"] == 1
    finally:
        server.terminate()
        server.wait(timeout=20)
