"""Waiting out a database that fails while the worker holds no job: at start and between jobs.

Each failure in a row is followed by a longer wait (:func:`claim_backoff_s`) and one ``db_error``
event, for as long as the database takes, unless ``max_db_failures`` is set (then the worker
raises after that many); a stop request ends the wait at once (the worker's ``sleep`` waits on its
stop event).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from operator_db.errors import DatabaseError


def claim_backoff_s(failures: int, first_s: float, cap_s: float, jitter: float) -> float:
    """Return the wait after ``failures`` failed claims in a row, s.

    ``first_s`` doubled with each failure, at most ``cap_s``, times ``0.5 + jitter / 2``
    (``jitter`` in [0, 1)): workers that lost the database together come back spread out.
    """
    return min(cap_s, first_s * 2.0 ** (failures - 1)) * (0.5 + jitter / 2)


class DatabaseWait:
    """Counts a worker's failures against the database in a row and waits out each one."""

    def __init__(
        self,
        first_s: float,
        cap_s: float,
        most: int | None,
        sleep: Callable[[float], Any],
        emit: Callable[[str], None],
    ) -> None:
        """Wait ``first_s`` doubled up to ``cap_s`` (s); give up after ``most`` (None: never)."""
        self.first_s, self.cap_s, self.most = first_s, cap_s, most
        self.sleep, self.emit = sleep, emit
        self.failures = 0

    def succeeded(self) -> None:
        """Note that the database answered: the next failure is the first of a new run."""
        self.failures = 0

    def failed(self, exc: DatabaseError, doing: str) -> None:
        """Wait out one more failure of ``doing`` (e.g. "claiming").

        Raises:
            DatabaseError: ``exc`` itself, once ``most`` failures came in a row.
        """
        self.failures += 1
        if self.most is not None and self.failures >= self.most:
            self.emit(f"{doing} failed {self.failures} times: {exc}; giving up")
            raise exc
        wait = claim_backoff_s(self.failures, self.first_s, self.cap_s, random.random())
        self.emit(f"{doing} failed ({self.failures} in a row): {exc}; again in {wait:.1f} s")
        self.sleep(wait)
