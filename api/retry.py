"""A read whose database connection was ended under it is run once more (issue 46's chaos run).

PostgreSQL ends connections in use when it restarts, fails over, or is told to
(``pg_terminate_backend``): the request that held one fails (:class:`ConnectionLostError`), while
the pool checks the next connection before use (``pool_pre_ping``) and hands out a fresh one. A
GET or HEAD changes nothing, so it is run again at once, once: without this, every read in flight
at each such moment was a 503 with the database up (4 of ~7,000 in ``bench/bench_chaos.py``, each
at a round of ``pg_terminate_backend``, 10 s after an outage had ended). A write is not repeated:
its commit may have landed.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOST = "opdb_connection_lost"
"""The request state's key that says its database connection was lost (set by api.problems)."""
READS = frozenset({"GET", "HEAD"})


class RetryRead:
    """Pure ASGI middleware: a read answered 503 for a lost connection is answered again."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer the request; a read's 503 for a lost connection is replaced by a second run."""
        if scope["type"] != "http" or scope["method"] not in READS:
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})  # one dict, seen by the handlers' Request.state
        swallowed = False

        async def first(message: Message) -> None:
            nonlocal swallowed
            if message["type"] == "http.response.start" and message["status"] == 503:
                swallowed = bool(state.pop(LOST, False))
            if not swallowed:
                await send(message)

        await self.app(scope, receive, first)
        if not swallowed:
            return
        given = False

        async def again() -> Message:  # a read's (empty) body, once more; then the client's own
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return await receive()

        await self.app(scope, again, send)
