"""Prometheus metrics of the API: requests, their latency, and the job queue's depth.

Each app has its own registry (no module-level state): requests are counted by method (a standard
one, ``api.problems.METHODS``, or ``other``), route template (never the raw path; ``(unmatched)``
where no route matched) and status, so that no client can grow the label set; the queue's
jobs per device kind and status are read from the database at each scrape. With several uvicorn
workers each process reports its own request figures; the queue figures are the database's.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from fastapi import FastAPI, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from api.problems import METHODS
from operator_db.db import queue
from operator_db.db.store import Store


def method_label(method: str) -> str:
    """Return the metrics label of a request method: a standard one itself, any other ``other``.

    h11 accepts any token as a method; counted raw, each invented one was a new series.
    """
    return method if method in METHODS else "other"


class _QueueCollector(Collector):
    """Jobs per device kind and status, read at scrape time."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Any]:
        family = GaugeMetricFamily(
            "opdb_jobs", "Jobs in the queue, per device kind and status.", labels=["kind", "status"]
        )
        try:
            with self.store.transaction(read_only=True) as session:
                rows = queue.queue_counts_by_kind(session)
        except Exception:  # noqa: BLE001 - a dead database must not break the scrape
            rows = []
        for kind, status, count in rows:
            family.add_metric([kind, status], count)
        yield family


class ApiMetrics:
    """The registry and the request metrics of one app."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "opdb_http_requests",
            "HTTP requests, by method, route and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "opdb_http_request_duration_seconds",
            "HTTP request latency in seconds, by method and route.",
            ["method", "route"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self._queue: _QueueCollector | None = None

    def watch_queue(self, store: Store) -> None:
        """Report the queue of ``store`` (once, when the app starts)."""
        if self._queue is None:
            self._queue = _QueueCollector(store)
            self.registry.register(self._queue)

    async def middleware(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        """Count and time every request under its route template."""
        start = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        template = getattr(route, "path", "(unmatched)")
        method = method_label(request.method)
        self.requests.labels(method, template, str(response.status_code)).inc()
        self.latency.labels(method, template).observe(time.perf_counter() - start)
        return response


def install(app: FastAPI) -> ApiMetrics:
    """Attach metrics to ``app`` (its state holds them) and count its requests."""
    metrics = ApiMetrics()
    app.state.metrics = metrics
    app.middleware("http")(metrics.middleware)
    return metrics


def render_metrics(store: Store, metrics: ApiMetrics) -> tuple[bytes, str]:
    """Return the metrics in Prometheus's text format and its content type."""
    metrics.watch_queue(store)
    return generate_latest(metrics.registry), CONTENT_TYPE_LATEST
