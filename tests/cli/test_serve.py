"""``opdb serve --workers N``: the socket its processes share gives connections TCP_NODELAY."""

from __future__ import annotations

import asyncio
import socket

import uvicorn

from api.server import APP
from operator_db.cli.serve import tcp_listener


def test_connections_to_the_shared_listener_get_nodelay() -> None:
    """Without it, every answer on a kept-alive connection waits for the delayed ACK (~40 ms)."""
    config = uvicorn.Config(APP, factory=True, host="127.0.0.1", port=0, workers=2)
    raw = config.bind_socket()
    fd = raw.fileno()
    listener = tcp_listener(raw)
    assert (listener.fileno(), listener.proto, listener.get_inheritable()) == (
        fd,
        socket.IPPROTO_TCP,
        True,
    )

    async def nodelay_of_a_connection() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
        _, writer = await asyncio.open_connection(*listener.getsockname()[:2])
        try:
            return await asyncio.wait_for(accepted, timeout=10)
        finally:
            writer.close()
            server.close()

    assert asyncio.run(nodelay_of_a_connection()) == 1


def test_a_unix_or_tcp_socket_is_kept_as_it_is() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP) as tcp:
        assert tcp_listener(tcp) is tcp
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix:
        assert tcp_listener(unix) is unix
