"""Request bodies bounded per route, timed, and read only after the route's token is checked.

uvicorn hands a request to the app once its head is complete; Starlette and FastAPI then read the
body as the route asks for it, with no clock and no size bound, after the in-flight slot is taken
and before any dependency (the token check included) runs. A client could so hold the slots with
bodies that never came (``Expect: 100-continue`` and silence, 1 byte every 3 s, a chunked body
that never ends) and make the server parse 1.5 GB of JSON before saying 401.

:class:`BodyGuard` (ASGI middleware, outside the in-flight count) instead, for each request:

1. finds the route and refuses a body it does not take: ``body_limit`` gives each route's bytes
   (0 for reads, ``OPDB_MAX_SPEC_BYTES`` for ``POST /specs``, ``OPDB_API_MAX_BODY_BYTES`` for
   the other writes and the sign-in forms); a declared ``Content-Length`` over it is a 413 at once;
2. checks the route's write token before reading a byte (401/403, as the route itself would;
   ``token_needed``: every route with a body outside the pages is a write);
3. reads the body whole within ``OPDB_API_BODY_TIMEOUT_S`` of the head (408 past it; 413 as soon
   as a chunked body passes the limit), then passes it on to the app in one message.

Refusals close the connection (the body left unread cannot be skipped). The server's protocol
(``api.server``) times the same body at the connection too, and lets a connection whose body is
still coming be closed for a newer one, as one whose head is not complete.
"""

from __future__ import annotations

import math
import time
from typing import Any

import anyio
from fastapi.security import HTTPAuthorizationCredentials
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.deps import Right, check_token
from api.problems import domain_problem, problem
from operator_db.config import Settings
from operator_db.errors import OperatorDBError

NO_BODY = frozenset({"GET", "HEAD", "OPTIONS", "DELETE", "TRACE", "CONNECT"})
"""Methods whose routes here take no body."""
CLOSE = {"Connection": "close"}


def body_limit(method: str, path: str, settings: Settings) -> int:
    """Return the most bytes a request's body may have on its route (0: no body at all)."""
    if method.upper() in NO_BODY:
        return 0
    if path == "/specs":
        return settings.max_spec_bytes
    return settings.api_max_body_bytes


def token_needed(method: str, path: str) -> Right | None:
    """Return the token a request with a body needs on its route: write, outside the pages.

    Every route that takes a body outside ``/ui/`` is a write (``require_write``); the pages'
    forms (sign-in, sign-out) take none. ``tests/api/test_bodies.py`` holds the routes to it.
    """
    if method.upper() in NO_BODY or path.startswith("/ui/"):
        return None
    return "write"


class BodyGuard:
    """ASGI middleware: each request's body bounded, timed and read after its token check."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        """Guard ``app`` with the limits of ``settings``."""
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse or read the request's body, then serve it with the body already read."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        declared = headers.get(b"content-length", b"").strip()
        chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        if not chunked and (not declared or declared == b"0"):
            await self.app(scope, receive, send)  # nothing to read
            return
        request = Request(scope)
        if not self._routed(scope):  # a 404 or 405 reads no body: answered as it is, then closed
            await self.app(scope, _replay(b"", receive), _closing(send))
            return
        limit = body_limit(scope["method"], scope["path"], self.settings)
        if declared.isdigit() and int(declared) > limit:
            await _too_large(request, limit, f"; this body has {int(declared)}")(
                scope, receive, send
            )
            return
        denied = self._token_refusal(request)
        if denied is not None:
            await denied(scope, receive, send)
            return
        body = await self._read(scope, receive, send, request, limit)
        if body is None:
            return
        await self.app(scope, _replay(body, receive), send)

    def _token_refusal(self, request: Request) -> Any:
        """Return the route's 401/403 where the request's token may not use it, else None."""
        if token_needed(request.method, request.url.path) is None:
            return None
        credentials = None
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token:
            credentials = HTTPAuthorizationCredentials(scheme=scheme, credentials=token.strip())
        try:
            check_token(self.settings, credentials, "write")
        except OperatorDBError as exc:
            response = domain_problem(request, exc)
            response.headers.update(CLOSE)
            return response
        return None

    @staticmethod
    def _routed(scope: Scope) -> bool:
        """Return whether a route serves the request's method and path (else a 404 or 405)."""
        app = scope.get("app")
        return any(route.matches(scope)[0] == Match.FULL for route in getattr(app, "routes", ()))

    async def _read(
        self, scope: Scope, receive: Receive, send: Send, request: Request, limit: int
    ) -> bytes | None:
        """Return the whole body, or None once a refusal was sent (or the client left)."""
        timeout = self.settings.api_body_timeout_s
        deadline = time.monotonic() + timeout
        body = bytearray()
        refusal = None
        with anyio.move_on_after(timeout):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                body += message.get("body", b"")
                if len(body) > limit:
                    refusal = _too_large(request, limit)
                    break
                if not message.get("more_body", False):
                    return bytes(body)
        if refusal is None:
            waited = math.ceil(timeout - max(0.0, deadline - time.monotonic()))
            refusal = problem(
                408,
                f"the request body was not complete {waited} s after its head "
                "(OPDB_API_BODY_TIMEOUT_S)",
                "Timeout",
                request,
                CLOSE,
            )
        await refusal(scope, receive, send)
        return None


def _too_large(request: Request, limit: int, more: str = "") -> Response:
    """Return the 413 for a body over its route's ``limit`` (bytes), closing the connection."""
    what = "takes no body" if limit == 0 else f"takes at most {limit} bytes"
    detail = f"{request.method} {request.url.path} {what}{more}"
    return problem(413, detail, "TooLargeError", request, CLOSE)


def _replay(body: bytes, receive: Receive) -> Receive:
    """Return a ``receive`` that gives ``body`` in one message, then the client's own messages."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _closing(send: Send) -> Send:
    """Return a ``send`` whose answer closes the connection (a body was left unread)."""

    async def closing(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {
                **message,
                "headers": [*message.get("headers", []), (b"connection", b"close")],
            }
        await send(message)

    return closing
