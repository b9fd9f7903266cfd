"""uvicorn for ``opdb serve``, bounded: a request head timeout, a cap on open connections.

uvicorn (0.54) times out an idle kept-alive connection but not one that never finishes its request
head: each byte a client sends cancels the keep-alive timer, and nothing is armed before the first
request, so a client sending its headers slowly (slowloris) held a connection, and a file
descriptor, for ever; about 20,000 of them exhausted the process's descriptors. Its
``limit_concurrency`` answers 503 once the *connections* reach it, slow ones included, so it would
turn the attack away from everyone. :class:`GuardedH11Protocol` (uvicorn's h11 protocol) instead

- closes a connection whose request head is not complete ``header_timeout_s`` after it opened,
  or after the first byte of a later request's head, with a ``408``;
- closes a connection whose request body is not complete ``body_timeout_s`` after its head (the
  app's ``api.bodies.BodyGuard`` answers 408 a second before; this is the backstop for a body
  the app left unread), so that a body trickled a byte at a time holds nothing for long;
- keeps at most ``max_connections`` open: beyond it, a new connection closes the one that has
  waited longest without a request in progress (an incomplete head, a body still coming, or idle
  between requests), the cheapest to lose; where every connection is serving a request, the new
  one gets a 503.

Its own answers (408, 503, and the 400 for a request that cannot be parsed) carry the security
headers every answer of the app carries.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import resource
import sys
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from api.security import HEADERS
from operator_db.config import Settings, get_settings
from operator_db.errors import OperatorDBError

APP = "api.app:create_app"
RESERVED_FILES = 256
"""Descriptors kept out of the connection cap: the database, logs, fonts, the listening socket."""
BACKLOG = 2048
"""Connections the kernel queues before they are accepted (uvicorn's default); asyncio accepts up
to this many at once before any is closed, so they count against the descriptors too."""


def _problem(status: int, phrase: str, detail: str, error: str) -> bytes:
    """Return a whole HTTP/1.1 response carrying a problem document, closing the connection."""
    body = json.dumps(
        {"title": phrase, "status": status, "detail": detail, "error": error},
        separators=(",", ":"),
    ).encode()
    security = "".join(f"{name}: {value}\r\n" for name, value in HEADERS.items())
    head = (
        f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/problem+json\r\n{security}"
        f"connection: close\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


TIMED_OUT = _problem(408, "Request Timeout", "the request head was not complete in time", "Timeout")
BODY_TIMED_OUT = _problem(
    408, "Request Timeout", "the request body was not complete in time", "Timeout"
)
BODY_GRACE_S = 1.0
"""The protocol's body clock runs this much longer than the app's (``api.bodies``), s."""
FULL = _problem(503, "Service Unavailable", "too many connections", "TooManyConnections")
log = logging.getLogger("operator_db.api")


class ServerConfig(uvicorn.Config):
    """uvicorn's configuration with the guarded protocol and its two limits."""

    def __init__(
        self,
        app: str,
        *,
        header_timeout_s: float,
        max_connections: int,
        body_timeout_s: float = 30.0,
        **kwargs: Any,
    ) -> None:
        """Configure ``app`` (an import string): head and body timeouts (s), a connection cap."""
        super().__init__(app, http="api.server:GuardedH11Protocol", backlog=BACKLOG, **kwargs)
        self.header_timeout_s = header_timeout_s
        self.body_timeout_s = body_timeout_s
        self.max_connections = max_connections


class _Shared:
    """What a server's guarded connections share: who waits, longest first; how many dropped."""

    def __init__(self) -> None:
        self.waiting: dict[GuardedH11Protocol, None] = {}
        self.dropped = 0
        """Connections closed for the cap whose ``connection_lost`` has not come yet."""

    @classmethod
    def of(cls, state: ServerState) -> _Shared:
        """Return the shared state of ``state``'s server (made on its first connection)."""
        found: _Shared | None = getattr(state, "opdb_guard", None)
        if found is None:
            found = cls()
            state.opdb_guard = found  # type: ignore[attr-defined]
        return found


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a request head timeout and a cap on open connections."""

    def __init__(self, config: uvicorn.Config, server_state: ServerState, **kwargs: Any) -> None:
        """Take the limits from a :class:`ServerConfig` (defaults for a plain uvicorn Config)."""
        super().__init__(config, server_state, **kwargs)
        self.header_timeout_s: float = getattr(config, "header_timeout_s", 10.0)
        self.body_timeout_s: float = getattr(config, "body_timeout_s", 30.0) + BODY_GRACE_S
        self.max_connections: int = getattr(config, "max_connections", 4096)
        self.shared = _Shared.of(server_state)
        self.waiting = self.shared.waiting
        self.head_timer: asyncio.TimerHandle | None = None
        self.body_timer: asyncio.TimerHandle | None = None
        self.dropped = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the head's clock; over the cap, close the longest waiting (or this) connection."""
        super().connection_made(transport)
        self._wait_for_head()
        if len(self.connections) - self.shared.dropped <= self.max_connections:
            return
        oldest = next(iter(self.waiting))
        if oldest is not self:
            oldest.drop(b"")
        else:
            self.drop(FULL)

    def drop(self, last: bytes) -> None:
        """Close this connection for the cap: send ``last`` (may be empty), then close."""
        self._stop_waiting()
        self.dropped = True
        self.shared.dropped += 1
        if last:
            self.transport.write(last)
            self.transport.close()
        else:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        """Feed h11; while the head, then the body, is incomplete its clock runs."""
        super().data_received(data)
        if self.transport.is_closing():
            self._stop_waiting()
        elif self.conn.their_state is h11.IDLE:
            self._wait_for_head()
        elif self.conn.their_state is h11.SEND_BODY:
            self._wait_for_body()
        else:
            self._stop_waiting()

    def send_400_response(self, msg: str) -> None:
        """Answer a request h11 cannot parse with a problem document, then close.

        It carries the security headers as every answer does (uvicorn's own was plain text
        without them).
        """
        self._stop_waiting()
        self.transport.write(_problem(400, "Bad Request", msg, "BadRequest"))
        self.transport.close()

    def on_response_complete(self) -> None:
        """Between requests the connection may be closed for a newer one (keep-alive timer runs).

        Where the next head's first bytes came while the response was still going out (h11
        holds them, unparsed), its clock starts now: ``data_received`` saw a request in
        progress then, and armed nothing.
        """
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            if self.conn.trailing_data[0]:
                self._wait_for_head()
            else:
                self.waiting[self] = None

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the connection's wait, then let uvicorn close it."""
        self._stop_waiting()
        if self.dropped:
            self.dropped = False
            self.shared.dropped -= 1
        super().connection_lost(exc)

    def _wait_for_head(self) -> None:
        self.waiting[self] = None
        if self.head_timer is None:
            self.head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _wait_for_body(self) -> None:
        """Put the connection on its body's clock (its head is complete), evictable meanwhile."""
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        self.waiting.setdefault(self, None)
        if self.body_timer is None:
            self.body_timer = self.loop.call_later(self.body_timeout_s, self._body_timed_out)

    def _stop_waiting(self) -> None:
        self.waiting.pop(self, None)
        for timer in (self.head_timer, self.body_timer):
            if timer is not None:
                timer.cancel()
        self.head_timer = self.body_timer = None

    def _body_timed_out(self) -> None:
        self.body_timer = None
        self.waiting.pop(self, None)
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
            return
        cycle = self.cycle
        if cycle is None or not cycle.response_started:
            self.transport.write(BODY_TIMED_OUT)
            self.transport.close()
        else:
            self.transport.abort()  # an answer is half out: nothing more can be said

    def _head_timed_out(self) -> None:
        self.head_timer = None
        self.waiting.pop(self, None)
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.transport.write(TIMED_OUT)
            self.transport.close()


def raise_open_files_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit where allowed; return the soft."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:  # e.g. macOS caps the soft limit lower
            log.warning("cannot raise the open files limit from %d: %s", soft, exc)
    return soft


def connection_cap(wanted: int, open_files: int) -> int:
    """Return the connections to keep: ``wanted``, fewer where ``open_files`` could not hold them.

    Each connection is a descriptor, and up to ``BACKLOG`` more are accepted before any is closed.
    """
    return max(16, min(wanted, open_files - BACKLOG - RESERVED_FILES))


def server_config(
    host: str, port: int, workers: int, *, settings: Settings | None = None, **kwargs: Any
) -> ServerConfig:
    """Return the server's configuration for ``opdb serve`` with the limits of ``settings``.

    Raises the open files limit first (each worker process inherits it).

    Raises:
        OperatorDBError: uvloop is asked for and not installed.
    """
    settings = settings or get_settings()
    if settings.api_event_loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        raise OperatorDBError(
            "OPDB_API_EVENT_LOOP=uvloop, but uvloop is not installed (pip install uvloop); "
            "auto takes it where it is, asyncio otherwise"
        )
    cap = connection_cap(settings.api_max_connections, raise_open_files_limit())
    return ServerConfig(
        APP,
        factory=True,
        host=host,
        port=port,
        workers=workers,
        header_timeout_s=settings.api_header_timeout_s,
        body_timeout_s=settings.api_body_timeout_s,
        max_connections=cap,
        timeout_keep_alive=settings.api_keep_alive_s,
        loop=settings.api_event_loop,
        # X-Forwarded-For and -Proto believed from the configured proxies only (uvicorn's own
        # default believes 127.0.0.1, so anyone on the host could pick their address)
        proxy_headers=bool(settings.api_forwarded_allow_ips),
        forwarded_allow_ips=settings.api_forwarded_allow_ips or "",
        **kwargs,
    )


def run(config: ServerConfig) -> None:
    """Serve with one process, as ``uvicorn.run`` does (exit status 3 where it did not start)."""
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        sys.exit(3)
