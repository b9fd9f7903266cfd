"""The worker daemon: register, claim a job under a lease, measure, commit, repeat.

One job is one transaction of results: the rows are written and the job marked done together, and
only if this worker still owns the job's lease. A heartbeat thread renews the lease while the job is
measured; a worker that dies stops renewing, its lease expires, and another worker takes the job.

While it holds no job, a worker waits out a database that fails (a restart, a dropped connection,
a full disk), at its start (registering) as between jobs (claiming): each failure is followed by
a longer wait and one ``db_error`` event, for as long as the database takes, unless
``max_db_failures`` is set; a stop request ends the wait at once (``worker/backoff.py``).
Loading a claimed job and finishing it are not retried (see :meth:`Worker._work`).

A sticky CUDA error (a device-side assert, an illegal memory access, ...) leaves the process's CUDA
context unusable: the worker then makes no further CUDA call, gives the job back to the queue (the
attempt counts), and stops with :class:`DeviceContextLostError`, so that its process exits and a
supervisor starts a fresh one.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from operator_db.db import queries, queue
from operator_db.db.models import Host, Job, JobStatus, utcnow
from operator_db.db.store import Store
from operator_db.devices.base import Device
from operator_db.devices.noise import HostReader, NoiseMonitor
from operator_db.errors import DatabaseError, DeviceContextLostError, OperatorDBError
from operator_db.measure.allocator import retain_freed_memory
from operator_db.measure.backends import backends_state, pin_backends
from operator_db.measure.cuda_errors import is_sticky_cuda_error
from operator_db.measure.energy import energy_unavailable, idle_power_w
from operator_db.measure.flags import Flag
from operator_db.measure.settings import MeasureSettings
from operator_db.worker.backoff import DatabaseWait
from operator_db.worker.execute import Executor, JobInfo, execute_job
from operator_db.worker.lease import Heartbeat

EventKind = Literal[
    "registered",
    "idle_power",
    "claimed",
    "done",
    "failed",
    "retry",
    "lost",
    "released",
    "idle",
    "db_error",
    "context_lost",
    "noisy",
]

COOLDOWN_STEP_S = 0.25
"""How often an adaptive cooldown reads the device's temperature, s."""


@dataclass(frozen=True)
class WorkerEvent:
    """Something the worker did, for a progress display or a log line."""

    kind: EventKind
    message: str
    job_id: int | None = None


@dataclass
class WorkerStats:
    """What a worker run did."""

    done: int = 0
    failed: int = 0
    retried: int = 0
    lost: int = 0
    released: int = 0
    errors: list[str] = field(default_factory=list)

    def plus(self, other: WorkerStats) -> WorkerStats:
        """Return the counts of this run and ``other`` together."""
        return WorkerStats(
            self.done + other.done,
            self.failed + other.failed,
            self.retried + other.retried,
            self.lost + other.lost,
            self.released + other.released,
            self.errors + other.errors,
        )


@dataclass(frozen=True)
class WorkerOptions:
    """How the worker takes jobs (durations in seconds)."""

    lease_s: float = 300.0
    heartbeat_s: float | None = None
    """Lease renewal interval; default a third of the lease."""
    poll_s: float = 2.0
    max_jobs: int | None = None
    until_idle: bool = False
    name: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    check_schema: bool = False
    """Check the database's schema revision before registering (a store opened without the
    check): a database that does not answer is waited out there as when registering; one at
    another revision stops the worker (:class:`SchemaMismatchError`)."""
    db_retry_s: float = 1.0
    """The wait after a failed claim, s; it doubles with each failure in a row (with jitter)."""
    db_retry_cap_s: float = 30.0
    """The longest wait between two claims while the database fails, s."""
    max_db_failures: int | None = None
    """Failed claims in a row before the worker gives up (raises); None: it waits for the
    database as long as it takes (it holds no job meanwhile), until it is stopped."""
    model_ids: frozenset[int] | None = None
    """Take only these models' jobs (their runs and their configurations'); None: any job."""
    watch_noise: bool = True
    """Read the host (steal, other load, clocks; a GPU's clocks, heat, other processes) while
    each job runs, and flag its results ``host_noisy`` with the reasons (``devices/noise.py``)."""
    noise_reader: Callable[[Device], HostReader] = HostReader.for_device
    """What reads the host for ``watch_noise`` (tests give a fake)."""


class Worker:
    """Measures the jobs of its device's kind until told to stop (or idle, or ``max_jobs``)."""

    def __init__(
        self,
        store: Store,
        device: Device,
        settings: MeasureSettings,
        options: WorkerOptions | None = None,
        *,
        executor: Executor = execute_job,
        on_event: Callable[[WorkerEvent], None] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.store = store
        self.device = device
        self.settings = settings
        self.options = options or WorkerOptions()
        self.executor = executor
        self.on_event = on_event or (lambda _e: None)
        self.stop_event = threading.Event()
        self._noise: NoiseMonitor | None = None
        self._sleep: Callable[[float], Any] = sleep or self.stop_event.wait
        self.kind_id: int | None = None
        self.host_id: int | None = None
        self._idle_power: float | None = None
        self._idle_temperature: float | None = None
        self.cooled_s = 0.0
        """Seconds spent cooling down between jobs so far."""
        self._idle_measured_at = -float("inf")
        self._measures_energy = False
        self.allocator = "unchanged"
        self.threads: int | None = None
        """CPU threads pinned before each job: the setting, else torch's count at start."""
        self.stats = WorkerStats()
        """What the current (or last) run did; also there when ``run`` raised."""
        self.context_lost: str | None = None
        """The sticky CUDA error that made this worker stop, if one did."""

    def stop(self) -> None:
        """Ask the worker to stop after the current job."""
        self.stop_event.set()

    def _emit(self, kind: EventKind, message: str, job_id: int | None = None) -> None:
        self.on_event(WorkerEvent(kind, message, job_id))

    def register(self) -> int:
        """Register (or refresh) this host and its device kind; return the kind's id.

        Raises:
            DatabaseError: the database is unavailable.
        """
        ident = self.device.identity()
        update_period = self.device.counter_update_period_s()
        with self.store.transaction() as session:
            kind = queries.get_or_create_device_kind(session, ident.name, ident.device_type)
            kind.vendor = ident.vendor
            kind.architecture = ident.architecture
            kind.memory_bytes = ident.memory_bytes
            hostname = socket.gethostname()
            host = queries.get_or_create_host(session, hostname, ident.device_id, kind.id)
            host.info = self.device.provenance()
            host.counter_update_period_s = update_period
            host.last_seen = utcnow()
            session.flush()
            self.kind_id, self.host_id = kind.id, host.id
        self._emit("registered", f"{ident.name} on {hostname} as {self.options.name}")
        return kind.id

    def _idle_power_due(self) -> bool:
        """Whether the idle power is older than ``idle_every_s`` (or was never measured)."""
        return time.monotonic() - self._idle_measured_at >= self.settings.idle_every_s

    def _job_waiting(self, kind_id: int) -> bool:
        """Whether a job of the kind could be claimed now (nothing is taken)."""
        with self.store.transaction(read_only=True) as session:
            return queue.has_claimable_job(session, kind_id, model_ids=self.options.model_ids)

    def _refresh_idle_power(self) -> None:
        self._idle_measured_at = time.monotonic()
        self._idle_power = idle_power_w(self.device, self.settings.idle_window_s)
        self._idle_temperature = self.device.telemetry().temperature_c
        if self._idle_power is not None:
            with self.store.transaction() as session:
                host = session.get(Host, self.host_id)
                if host is not None:
                    host.idle_power_w = self._idle_power
            self._emit("idle_power", f"idle power {self._idle_power:.1f} W")

    def run(self) -> WorkerStats:
        """Work until stopped, idle (``until_idle``) or ``max_jobs`` jobs were taken.

        Raises:
            DatabaseError: ``max_db_failures`` attempts in a row to register (at the start) or
                to claim failed, where that is set.
            DeviceContextLostError: a job hit a sticky CUDA error (now or in an earlier run): its
                job went back to the queue and this process cannot use the device again.
                ``self.stats`` holds what the run did.
        """
        if self.context_lost is not None:
            raise self._lost_error()
        # torch's backend flags are process-wide: pinned now and again before each job, so that
        # model code setting one (TF32, cudnn.benchmark, threads, ...) cannot change later jobs.
        self.threads = self.settings.threads or torch.get_num_threads()
        pin_backends(self.settings, self.threads)
        if self.settings.retain_freed_memory:
            self.allocator = retain_freed_memory()
        kind_id = self._register_waiting()
        if kind_id is None:  # stopped while the database was away
            return self.stats
        self._measures_energy = self.settings.energy and energy_unavailable(self.device) is None
        if self.options.watch_noise:
            self._noise = NoiseMonitor(self.options.noise_reader(self.device)).start()
        try:
            return self._loop(kind_id)
        finally:
            if self._noise is not None:
                self._noise.stop()
                self._noise = None

    def _database_wait(self) -> DatabaseWait:
        o, emit = self.options, lambda message: self._emit("db_error", message)
        return DatabaseWait(o.db_retry_s, o.db_retry_cap_s, o.max_db_failures, self._sleep, emit)

    def _register_waiting(self) -> int | None:
        """Register, waiting out a database that fails; None where stopped meanwhile."""
        wait = self._database_wait()
        while not self.stop_event.is_set():
            try:
                if self.options.check_schema:
                    self.store.ensure_current()
                return self.register()
            except DatabaseError as exc:
                if not exc.retryable:
                    raise
                wait.failed(exc, "registering")
        return None

    def _loop(self, kind_id: int) -> WorkerStats:
        """Claim and work jobs until stopped, idle or ``max_jobs`` (see :meth:`run`)."""
        stats = self.stats = WorkerStats()
        taken = 0
        database = self._database_wait()
        while not self.stop_event.is_set():
            if self.options.max_jobs is not None and taken >= self.options.max_jobs:
                break
            try:
                claimed = self._claim(kind_id)
                database.succeeded()
            except DatabaseError as exc:
                # No job is held: waiting costs nothing, and the claim is safe to repeat (a
                # claim that did commit unseen gives its job back when the lease expires).
                database.failed(exc, "claiming")
                continue
            except RuntimeError as exc:  # the idle-power window synchronizes the device
                if not is_sticky_cuda_error(exc):
                    raise
                self.context_lost = _one_line(exc)
                self._emit(
                    "context_lost", f"{self.context_lost}; stopping (the process must restart)"
                )
                break
            if claimed is None:
                if self.options.until_idle:
                    self._emit("idle", "queue empty")
                    break
                self._sleep(self.options.poll_s)
                continue
            taken += 1
            self._work(claimed[0], claimed[1], stats)
            # The cooldown lets a GPU shed the heat of the last job (METHODOLOGY §1); without an
            # energy reading there is no thermal drift of energy to guard against.
            if self.settings.cooldown_s and self._measures_energy and not self.stop_event.is_set():
                self._cool_down()
        if self.context_lost is not None:
            raise self._lost_error()
        return stats

    def _claim(self, kind_id: int) -> tuple[int, str] | None:
        """Claim the next job: its id and target, or None when there is none.

        Raises:
            DatabaseError: the database failed (the loop waits and tries again).
            RuntimeError: measuring the idle power hit a CUDA error.
        """
        with self.store.transaction() as session:
            queue.expire_exhausted(session)
        if self._idle_power_due() and self._job_waiting(kind_id):
            # Only with a job to do (a worker's start waited 5 s for it on an empty queue), and
            # before claiming: the lease must not tick meanwhile.
            self._refresh_idle_power()
        with self.store.transaction() as session:
            job = queue.claim_job(
                session,
                kind_id,
                self.options.name,
                self.options.lease_s,
                model_ids=self.options.model_ids,
            )
            return None if job is None else (job.id, queue.job_target_name(session, job))

    def _cool_down(self) -> None:
        """Pause after a job that measured energy, until the device is as cool as at idle.

        ``fixed``, or where the temperature cannot be read: ``cooldown_s``. ``adaptive``: while
        the device is warmer than its idle baseline by more than ``cooldown_margin_c`` or its
        clocks are held down (thermal or power brake), checking every quarter second, for at
        most ``cooldown_s``; not at all when it is cool already.
        """
        limit = self.settings.cooldown_s
        baseline = self._idle_temperature
        if self.settings.cooldown == "fixed" or baseline is None:
            self._sleep(limit)
            return
        waited = 0.0
        while waited < limit and not self.stop_event.is_set():
            now = self.device.telemetry()
            if now.temperature_c is None:
                self._sleep(limit - waited)
                waited = limit
                break
            if (
                now.temperature_c <= baseline + self.settings.cooldown_margin_c
                and not now.throttled
            ):
                break
            step = min(COOLDOWN_STEP_S, limit - waited)
            self._sleep(step)
            waited += step
        self.cooled_s += waited

    def _lost_error(self) -> DeviceContextLostError:
        return DeviceContextLostError(
            f"the CUDA context is lost ({self.context_lost}); this process cannot measure again: "
            "restart the worker"
        )

    def _work(self, job_id: int, target: str, stats: WorkerStats) -> None:
        """Load, measure and finish a claimed job; a failure fails the attempt.

        Neither loading nor finishing is retried when the database fails: the job's lease may
        have moved meanwhile, and a finish whose commit failed unseen may have stored its result
        already. The attempt is failed instead (``fail_job`` changes only a job still ours); where
        the database cannot even record that, the job stays with its lease, which expires, and
        the worker goes back to claiming (where it waits for the database).
        """
        owner = self.options.name
        self._emit("claimed", target, job_id)
        every = self.options.heartbeat_s or self.options.lease_s / 3
        try:
            with self.store.transaction(read_only=True) as session:
                row = session.get(Job, job_id)
                assert row is not None
                job = JobInfo.of(row)
            pin_backends(self.settings, self.threads)
            monitor = self._noise
            since = monitor.mark() if monitor is not None else None
            with Heartbeat(self.store, job_id, owner, self.options.lease_s, every) as beat:
                rows = self.executor(self.store, job, self.device, self.settings, self._idle_power)
                # An asynchronous CUDA error surfaces here, in the job that caused it, rather
                # than in the next job's first CUDA call.
                self.device.synchronize()
            noise: tuple[list[str], dict[str, Any]] = ([], {})
            if monitor is not None:
                monitor.mark()
                noise = monitor.reasons(since)
            if noise[0]:
                self._emit("noisy", f"{target}: {'; '.join(noise[0])}", job_id)
            # What the job ran under: the pinned flags, unless its model code changed them.
            backends = backends_state()
            with self.store.transaction() as session:
                if beat.lost.is_set() or not queue.finish_job(session, job_id, owner):
                    session.rollback()
                    stats.lost += 1
                    self._emit("lost", f"{target}: lease lost, result dropped", job_id)
                    return
                for result_row in rows:
                    result_row.host_id = self.host_id
                    result_row.provenance = {
                        **(result_row.provenance or {}),
                        "backends": backends,
                        **({"host_noise": {"reasons": noise[0], **noise[1]}} if monitor else {}),
                    }
                    if noise[0]:
                        result_row.flags = sorted({*(result_row.flags or []), Flag.HOST_NOISY})
                    session.add(result_row)
            stats.done += 1
            self._emit("done", target, job_id)
        except (KeyboardInterrupt, SystemExit):
            with self.store.transaction() as session:
                if queue.release_job(session, job_id, owner):
                    stats.released += 1
                    self._emit("released", f"{target}: handed back", job_id)
            raise
        except (OperatorDBError, RuntimeError, ValueError, TypeError) as exc:
            # RuntimeError covers torch errors, CUDA out-of-memory included: the worker goes on,
            # unless the error left the CUDA context unusable (then no CUDA call may follow).
            message = _one_line(exc)
            lost = is_sticky_cuda_error(exc)
            if not lost and (cleanup := _release_cuda_cache()) is not None:
                lost, message = True, f"{message} (then {cleanup})"
            if lost:
                self.context_lost = message
                self.stop()
                message = f"{message} [CUDA context lost: the worker stopped for a restart]"
            # Device, database and torch runtime errors (out-of-memory) may pass; bad input won't.
            retry = lost or (
                getattr(exc, "retryable", False)
                or (isinstance(exc, RuntimeError) and not isinstance(exc, OperatorDBError))
            )
            status, why = None, "lease lost while failing"
            try:
                with self.store.transaction() as session:
                    status = queue.fail_job(session, job_id, owner, message, retry=retry)
            except DatabaseError as db_exc:  # the job stays with its lease, which expires
                why = (
                    f"{message}; not recorded ({db_exc}): back to the queue when its lease expires"
                )
            if status == JobStatus.FAILED:
                stats.failed += 1
                stats.errors.append(f"job {job_id} ({target}): {message}")
                self._emit("failed", f"{target}: {message}", job_id)
            elif status == JobStatus.QUEUED:
                stats.retried += 1
                self._emit("retry", f"{target}: {message}", job_id)
            else:
                stats.lost += 1
                self._emit("lost", f"{target}: {why}", job_id)
            if lost:
                self._emit(
                    "context_lost",
                    f"{target}: {self.context_lost}; stopping (the process must restart)",
                    job_id,
                )


def _one_line(exc: BaseException) -> str:
    """Return ``Type: first line of the message`` (what a job's ``last_error`` holds)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else 'no message'}"


def _release_cuda_cache() -> str | None:
    """Free the failed job's cached CUDA memory (an out-of-memory retry needs it).

    Returns None, or the error CUDA raised meanwhile: then the context is unusable after all (a
    sticky error whose text was not recognised), and the caller treats it as lost.
    """
    try:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except RuntimeError as exc:
        return f"torch.cuda.empty_cache() failed: {_one_line(exc)}"
    return None
