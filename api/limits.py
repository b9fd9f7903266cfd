"""What one client can cost the API: requests in flight per process, expensive reads per client.

Reads are open by default, so anyone who reaches the port can ask for an estimate, a roofline or
a comparison: each composes a model from the database, and a figure is drawn with matplotlib.
``EXPENSIVE`` routes take a token from their client's bucket (``OPDB_API_RATE_PER_S`` tokens a
second, at most ``OPDB_API_RATE_BURST`` kept); an empty bucket is a 429 problem document with
``Retry-After``. Every request counts against ``OPDB_API_MAX_REQUESTS`` in flight per process,
beyond which it is a 503 at once, before it holds anything else. docs/api.md, "Limits".
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from fastapi import Depends, FastAPI, Request, Response
from starlette.exceptions import HTTPException

from api.problems import problem
from operator_db.config import Settings

CLIENTS_KEPT = 10_000
"""Client buckets a process keeps, the least recently seen forgotten first (a forgotten client
starts again with a full bucket, as one idle that long would have)."""


class RateLimiter:
    """Token buckets per client: ``rate_per_s`` tokens a second, at most ``burst`` kept.

    Thread-safe; ``clock`` is injected (s, monotonic).
    """

    def __init__(
        self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Refill ``rate_per_s`` tokens a second (0: no limit), keep ``burst`` at most."""
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, client: str) -> float:
        """Take a token of ``client``'s; return 0 if there was one, else the s until there is."""
        if self.rate_per_s <= 0:
            return 0.0
        now = self.clock()
        with self._lock:
            tokens, then = self._buckets.pop(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.rate_per_s)
            wait = 0.0 if tokens >= 1 else (1 - tokens) / self.rate_per_s
            self._buckets[client] = (tokens - 1 if wait == 0 else tokens, now)
            while len(self._buckets) > CLIENTS_KEPT:
                self._buckets.popitem(last=False)
        return wait


def client_of(request: Request) -> str:
    """Return the address a request counts against (uvicorn's, after trusted proxy headers)."""
    return request.client.host if request.client is not None else "unknown"


async def rate_limited(request: Request) -> None:
    """Take a token for an expensive read of the request's client, or refuse it with a 429."""
    limiter: RateLimiter = request.app.state.rate_limiter
    wait = limiter.take(client_of(request))
    if wait > 0:
        raise HTTPException(
            429,
            f"too many expensive reads from {client_of(request)}: at most "
            f"{limiter.rate_per_s:g} per s (bursts of {limiter.burst}); retry in "
            f"{math.ceil(wait)} s",
            headers={"Retry-After": str(math.ceil(wait))},
        )


EXPENSIVE = [Depends(rate_limited)]
"""The dependencies of a route that composes an estimate or draws a figure."""


class InFlight:
    """Counts requests in flight in one process and turns away those beyond ``most``."""

    def __init__(self, most: int) -> None:
        """Serve at most ``most`` requests at once."""
        self.most = most
        self.now = 0

    async def middleware(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        """Answer a 503 problem document where ``most`` requests are in flight already."""
        if self.now >= self.most:
            return problem(
                503,
                f"the server is serving {self.most} requests already; retry shortly",
                "Overloaded",
                request,
                {"Retry-After": "1"},
            )
        self.now += 1  # the event loop's thread only: no lock
        try:
            return await call_next(request)
        finally:
            self.now -= 1


def install(app: FastAPI, settings: Settings) -> None:
    """Bound the requests ``app`` serves at once and its clients' expensive reads (its state)."""
    app.state.rate_limiter = RateLimiter(settings.api_rate_per_s, settings.api_rate_burst)
    app.middleware("http")(InFlight(settings.api_max_requests).middleware)
