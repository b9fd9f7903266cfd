"""``opdb serve``: the REST API under uvicorn."""

from __future__ import annotations

import inspect
import socket
from typing import Annotated, Any

import typer


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="Processes (stateless; share the DB).")] = 1,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            help="Proxies whose X-Forwarded-For/-Proto are believed, comma-separated addresses or "
            "networks (OPDB_API_FORWARDED_ALLOW_IPS); none by default.",
        ),
    ] = None,
) -> None:
    """Serve the REST API (OpenAPI at /docs); the database is OPDB_DATABASE_URL.

    The server's limits (OPDB_API_HEADER_TIMEOUT_S, OPDB_API_MAX_CONNECTIONS, ...) are
    docs/api.md's "Limits".
    """
    import uvicorn

    from api.server import run, server_config
    from operator_db.config import get_settings

    loopback_only(host)
    settings = get_settings()
    if forwarded_allow_ips is not None:
        proxies = [p.strip() for p in forwarded_allow_ips.split(",") if p.strip()]
        settings = settings.model_copy(update={"api_forwarded_allow_ips": proxies})
    config = server_config(host, port, workers, settings=settings)
    if workers == 1:
        run(config)
        return
    from uvicorn.supervisors import Multiprocess

    sockets = [tcp_listener(config.bind_socket())]
    supervisor: Any = Multiprocess
    if "target" in inspect.signature(Multiprocess.__init__).parameters:  # uvicorn before 0.36
        supervisor(config, target=uvicorn.Server(config).run, sockets=sockets).run()
    else:
        supervisor(config, sockets=sockets).run()


LOOPBACK_NAMES = ["localhost", "127.0.0.1", "::1"]
"""What a browser on the same host calls a server bound to a loopback address."""


def loopback_only(host: str) -> None:
    """On a loopback address, answer to the loopback names only, unless hosts are configured.

    A page on another site can make a browser send requests to 127.0.0.1 under its own name (DNS
    rebinding): its ``Host`` names that site, and is refused. The setting reaches the app's
    process through ``OPDB_API_ALLOWED_HOSTS`` (uvicorn builds the app there).
    """
    import ipaddress
    import json
    import os

    from operator_db.config import get_settings

    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback and "api_allowed_hosts" not in get_settings().model_fields_set:
        os.environ["OPDB_API_ALLOWED_HOSTS"] = json.dumps(LOOPBACK_NAMES)
        get_settings.cache_clear()


def tcp_listener(sock: socket.socket) -> socket.socket:
    """Return a listening TCP socket that says it is TCP, so its connections get TCP_NODELAY.

    uvicorn binds the socket it shares between worker processes with protocol 0, which accepted
    connections inherit, and asyncio turns Nagle's algorithm off only on sockets whose protocol
    is ``IPPROTO_TCP``: with ``--workers`` above 1, each answer on a kept-alive connection then
    waited for the client's delayed ACK, about 40 ms on Linux (uvicorn issue 3149). The same file
    descriptor is kept, marked as TCP.
    """
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.proto != 0:
        return sock
    tcp = socket.socket(sock.family, sock.type, socket.IPPROTO_TCP, fileno=sock.detach())
    tcp.set_inheritable(True)
    return tcp
