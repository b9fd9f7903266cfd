"""Drawn figures kept per process by what they are drawn from, and drawn one at a time.

A model's roofline took about 0.5 s of matplotlib (and an estimate) on every request: 40 clients
at once took the process from 0.39 to 2.17 GB and a model page from 56 ms to 6 s. A figure is now
kept under a key of everything it depends on (the database, the model and its spec, the kind,
the format, and ``queries.roofline_version``: new results, runs, peaks or counters make it
again), in an LRU bounded in entries and bytes; a missing one is drawn under one lock per process,
so that many requests for it at once draw it once (the others find it kept) and at most one
figure is ever being drawn.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

FIGURES_KEPT = 256
"""Figures a process keeps at most."""
FIGURE_BYTES = 64 * 1024 * 1024
"""Bytes of figures a process keeps at most (a roofline is ~50 KB as SVG, ~100 KB as PNG)."""


class FigureCache:
    """An LRU of drawn figures (bytes) bounded in entries and bytes, drawing one at a time."""

    def __init__(self, entries: int = FIGURES_KEPT, max_bytes: int = FIGURE_BYTES) -> None:
        """Keep at most ``entries`` figures of ``max_bytes`` bytes together."""
        self.entries = entries
        self.max_bytes = max_bytes
        self.drawn = 0
        """Figures drawn so far (a miss each)."""
        self._kept: OrderedDict[Hashable, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._drawing = threading.Lock()

    def _get(self, key: Hashable) -> bytes | None:
        with self._lock:
            found = self._kept.get(key)
            if found is not None:
                self._kept.move_to_end(key)
            return found

    def get(self, key: Hashable, draw: Callable[[], bytes]) -> bytes:
        """Return the figure kept under ``key``, or ``draw()`` it (one at a time) and keep it.

        What ``draw`` raises passes through and nothing is kept.
        """
        found = self._get(key)
        if found is not None:
            return found
        with self._drawing:
            found = self._get(key)  # drawn while this request waited
            if found is not None:
                return found
            body = draw()
            with self._lock:  # kept before the next waiter looks
                self.drawn += 1
                if len(body) <= self.max_bytes:
                    self._kept[key] = body
                    self._bytes += len(body)
                while len(self._kept) > self.entries or self._bytes > self.max_bytes:
                    self._bytes -= len(self._kept.popitem(last=False)[1])
        return body

    def clear(self) -> None:
        """Forget every figure (and the count drawn)."""
        with self._lock:
            self._kept.clear()
            self._bytes = 0
            self.drawn = 0


FIGURES = FigureCache()
"""The process's figures (one per process, as its comparisons are: the key names the database)."""
