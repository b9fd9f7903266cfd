"""A job's lease, renewed from a thread while the job is measured (``worker/daemon.py``)."""

from __future__ import annotations

import threading

from operator_db.db import queue
from operator_db.db.store import Store
from operator_db.errors import DatabaseError


class Heartbeat:
    """Renews a job's lease from a thread (own connection) until stopped; notes a lost lease."""

    def __init__(self, store: Store, job_id: int, owner: str, lease_s: float, every_s: float):
        self.store, self.job_id, self.owner = store, job_id, owner
        self.lease_s, self.every_s = lease_s, every_s
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="opdb-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                with self.store.transaction() as session:
                    if not queue.renew_lease(session, self.job_id, self.owner, self.lease_s):
                        self.lost.set()
                        return
            except DatabaseError:
                continue  # transient: the next beat tries again; the lease is long enough
