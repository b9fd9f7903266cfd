"""What one client can cost the API: requests in flight, server time, expensive reads, sign-ins.

Reads are open by default, so anyone who reaches the port can ask for an estimate, a roofline or
a comparison: each composes a model from the database, and a figure is drawn with matplotlib.

- Every request counts against ``OPDB_API_MAX_REQUESTS`` in flight per process, beyond which it is
  a 503 at once, before it holds anything else.
- Every request is charged the server time it took (s, wall, from after its body was read) to its
  client's bucket (``TimeShare``): a client may use ``OPDB_API_CLIENT_SHARE`` server-seconds a
  second on average (1: what one client asking one request at a time can use at most), with
  ``OPDB_API_CLIENT_BURST_S`` kept; a client in debt gets a 429 with ``Retry-After``. So a costly
  route (a page, a list of 1,000) and a flood of cheap ones are bounded alike, by what they cost.
- ``EXPENSIVE`` routes also take a token from their client's bucket (``OPDB_API_RATE_PER_S``
  tokens a second, at most ``OPDB_API_RATE_BURST`` kept); an empty bucket is a 429 problem document
  with ``Retry-After``.
- A sign-in takes a token from a bucket of its own (``LOGIN_PER_S``, ``LOGIN_BURST``).

A request the server failed (5xx) costs its client nothing. A client is its bearer token where it
sends one the server knows (so clients behind one proxy or NAT are apart), else its address:
uvicorn's, which believes ``X-Forwarded-For`` only from ``OPDB_API_FORWARDED_ALLOW_IPS``.
docs/api.md, "Limits".
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import Depends, FastAPI, Request, Response
from starlette.exceptions import HTTPException

from api.deps import token_right
from api.problems import http_status, problem
from operator_db.config import Settings
from operator_db.errors import OperatorDBError

CLIENTS_KEPT = 10_000
"""Client buckets a process keeps, the least recently seen forgotten first (a forgotten client
starts again with a full bucket, as one idle that long would have)."""


class RateLimiter:
    """Token buckets per client: ``rate_per_s`` tokens a second, at most ``burst`` kept.

    Thread-safe; ``clock`` is injected (s, monotonic).
    """

    def __init__(
        self, rate_per_s: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Refill ``rate_per_s`` tokens a second (0: no limit), keep ``burst`` at most."""
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def _change(self, client: str, take: float, need: float) -> float:
        """Refill ``client``'s bucket; take ``take`` if it holds ``need``; return the s to wait."""
        if self.rate_per_s <= 0:
            return 0.0
        now = self.clock()
        with self._lock:
            tokens, then = self._buckets.pop(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.rate_per_s)
            wait = 0.0 if tokens >= need else (need - tokens) / self.rate_per_s
            if wait == 0:
                tokens = max(-float(self.burst), tokens - take)
            self._buckets[client] = (tokens, now)
            while len(self._buckets) > CLIENTS_KEPT:
                self._buckets.popitem(last=False)
        return wait

    def take(self, client: str) -> float:
        """Take a token of ``client``'s; return 0 if there was one, else the s until there is."""
        return self._change(client, 1.0, 1.0)

    def give_back(self, client: str, tokens: float = 1.0) -> None:
        """Return ``tokens`` to ``client``'s bucket (what a request the server failed took)."""
        self._change(client, -tokens, -float("inf"))


class TimeShare(RateLimiter):
    """Each client's share of the server's time: a bucket of server-seconds (s).

    Refilled by ``rate_per_s`` server-seconds a second, ``burst`` s kept; a request is admitted
    while its client's bucket is above 0 and charged what it took after, into debt (at most
    ``burst`` s of it).
    """

    def admit(self, client: str) -> float:
        """Return 0 where ``client`` may be served now, else the s until it may."""
        return self._change(client, 0.0, 1e-9)

    def charge(self, client: str, seconds: float) -> None:
        """Take the ``seconds`` of server time a request of ``client``'s took."""
        self._change(client, seconds, -float("inf"))


def client_of(request: Request) -> str:
    """Return the address a request comes from (uvicorn's, after trusted proxy headers)."""
    return request.client.host if request.client is not None else "unknown"


def client_key(request: Request) -> str:
    """Return whom a request counts against: its known bearer token, else its address.

    A token is named by 12 hex digits of its SHA-256, never kept itself.
    """
    cached: str | None = request.scope.get("opdb_client")
    if cached is not None:
        return cached
    key = client_of(request)
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    settings: Settings | None = getattr(request.app.state, "settings", None)
    bearer = scheme.lower() == "bearer" and bool(token)
    if bearer and settings is not None and token_right(settings, token.strip()) is not None:
        key = "token:" + hashlib.sha256(token.strip().encode()).hexdigest()[:12]
    request.scope["opdb_client"] = key
    return key


def _too_many(what: str, request: Request, limiter: RateLimiter, wait: float) -> HTTPException:
    return HTTPException(
        429,
        f"too many {what} from {client_of(request)}: at most {limiter.rate_per_s:g} per s "
        f"(bursts of {limiter.burst:g}); retry in {math.ceil(wait)} s",
        headers={"Retry-After": str(math.ceil(wait))},
    )


async def rate_limited(request: Request) -> AsyncIterator[None]:
    """Take a token for an expensive read of the request's client (429 if none).

    A request the server then fails (5xx) gives it back.
    """
    limiter: RateLimiter = request.app.state.rate_limiter
    client = client_key(request)
    wait = limiter.take(client)
    if wait > 0:
        raise _too_many("expensive reads", request, limiter, wait)
    try:
        yield
    except Exception as exc:
        if _status_of(exc) >= 500:
            limiter.give_back(client)
        raise


def _status_of(exc: Exception) -> int:
    """Return the status a route's exception is answered with (500: anything unexpected)."""
    if isinstance(exc, HTTPException):
        return exc.status_code
    return http_status(exc) if isinstance(exc, OperatorDBError) else 500


EXPENSIVE = [Depends(rate_limited)]
"""The dependencies of a route that composes an estimate or draws a figure."""

LOGIN_PER_S = 0.2
"""Sign-ins a client may try per s on average (one every 5 s)."""
LOGIN_BURST = 10
"""Sign-ins a client may try at once."""


async def login_limited(request: Request) -> None:
    """Take a sign-in token of the request's client, or refuse it with a 429."""
    limiter: RateLimiter = request.app.state.login_limiter
    wait = limiter.take(client_key(request))
    if wait > 0:
        raise _too_many("sign-ins", request, limiter, wait)


class InFlight:
    """Counts requests in flight in one process and turns away those beyond ``most``.

    Each request's server time is charged to its client (``share``, where given).
    """

    def __init__(self, most: int, share: TimeShare | None = None) -> None:
        """Serve at most ``most`` requests at once."""
        self.most = most
        self.now = 0
        self.share = share

    async def middleware(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        """Answer a 429 to a client over its share, a 503 where ``most`` are in flight already."""
        client = client_key(request) if self.share is not None else ""
        if self.share is not None and (wait := self.share.admit(client)) > 0:
            retry = str(math.ceil(wait))
            return problem(
                429,
                f"{client_of(request)} has used its share of the server's time "
                f"({self.share.rate_per_s:g} s a second, bursts of {self.share.burst:g} s); "
                f"retry in {retry} s",
                "HTTPError",
                request,
                {"Retry-After": retry},
            )
        if self.now >= self.most:
            return problem(
                503,
                f"the server is serving {self.most} requests already; retry shortly",
                "Overloaded",
                request,
                {"Retry-After": "1"},
            )
        self.now += 1  # the event loop's thread only: no lock
        start = time.monotonic()
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            self.now -= 1
            if self.share is not None and status < 500 and status != 429:
                self.share.charge(client, time.monotonic() - start)


def install(app: FastAPI, settings: Settings) -> None:
    """Bound the requests ``app`` serves at once and what each client costs (its state)."""
    app.state.rate_limiter = RateLimiter(settings.api_rate_per_s, settings.api_rate_burst)
    app.state.login_limiter = RateLimiter(LOGIN_PER_S, LOGIN_BURST)
    share = TimeShare(settings.api_client_share, settings.api_client_burst_s)
    app.middleware("http")(InFlight(settings.api_max_requests, share).middleware)
