"""Power sampling in a background thread, trapezoid integration, and counter energy windows."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self

from operator_db.devices.base import Device, PowerSample

MIN_INTERVAL_S = 0.005
"""Never poll power faster than this (METHODOLOGY §1)."""
MAX_INTERVAL_S = 0.1
"""Never poll power slower than this (Zeus ``PowerMonitor`` caps the same way)."""
DEFAULT_INTERVAL_S = 0.01
"""Poll interval when the update period is unknown."""


def sampling_interval_s(update_period_s: float | None) -> float:
    """Return the poll interval for an update period: half of it, within [5 ms, 100 ms]."""
    if update_period_s is None:
        return DEFAULT_INTERVAL_S
    return min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, update_period_s / 2))


def _clean(samples: Sequence[PowerSample]) -> list[PowerSample]:
    """Sort by timestamp and keep the first sample of each timestamp."""
    out: list[PowerSample] = []
    for sample in sorted(samples, key=lambda s: s.timestamp_us):
        if not out or sample.timestamp_us != out[-1].timestamp_us:
            out.append(sample)
    return out


def integrate_power_mj(
    samples: Sequence[PowerSample], start_us: int | None = None, end_us: int | None = None
) -> float:
    """Integrate power samples (mW over µs timestamps) with the trapezoid rule; return mJ.

    Without bounds the integral runs from the first to the last sample. With ``start_us`` and
    ``end_us`` it covers exactly that window: inside the samples' span the power is interpolated
    linearly, outside it the nearest sample's power is held. Samples sharing a timestamp count once.

    Raises:
        ValueError: no samples, or ``end_us`` before ``start_us``.
    """
    points = _clean(samples)
    if not points:
        raise ValueError("no power samples to integrate")
    times = [p.timestamp_us for p in points]
    lo = times[0] if start_us is None else start_us
    hi = times[-1] if end_us is None else end_us
    if hi < lo:
        raise ValueError(f"window ends ({hi} µs) before it starts ({lo} µs)")

    def power_at(t: float) -> float:
        i = bisect.bisect_right(times, t)
        if i == 0:
            return points[0].power_mw
        if i == len(points):
            return points[-1].power_mw
        (t0, p0), (t1, p1) = points[i - 1], points[i]
        return p0 + (p1 - p0) * (t - t0) / (t1 - t0)

    knots = [lo, *(t for t in times if lo < t < hi), hi]
    total_mw_us = 0.0
    for a, b in zip(knots, knots[1:], strict=False):
        total_mw_us += (power_at(a) + power_at(b)) / 2 * (b - a)
    return total_mw_us / 1e6  # mW·µs = nJ; 1e6 nJ = 1 mJ


class PowerSampler:
    """Poll ``device.power_mw()`` from a daemon thread; keep each distinct-timestamp sample.

    The interval defaults to half the update period of the power reading itself
    (``device.power_update_period_s()``, measured on first use; not the energy counter's, which
    updates at its own rate), within [5 ms, 100 ms]. An error in the thread stops sampling and is
    raised by ``stop()``.
    """

    def __init__(self, device: Device, *, interval_s: float | None = None) -> None:
        """Prepare sampling ``device``; nothing runs until ``start()``.

        Raises:
            DeviceError: measuring the power reading's update period failed.
            ValueError: ``interval_s`` is below 5 ms.
        """
        if interval_s is None:
            period = device.known_power_update_period_s()
            if period is None and device.power_unavailable_reason() is None:
                period = device.power_update_period_s()
            interval_s = sampling_interval_s(period)
        if interval_s < MIN_INTERVAL_S:
            raise ValueError(f"interval_s must be >= {MIN_INTERVAL_S} s (METHODOLOGY §1)")
        self.device = device
        self.interval_s = interval_s
        self._samples: list[PowerSample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def samples(self) -> list[PowerSample]:
        """Return a copy of the samples so far, in arrival order."""
        with self._lock:
            return list(self._samples)

    @property
    def running(self) -> bool:
        """True while the thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def sample_once(self) -> PowerSample | None:
        """Take one sample now (in the calling thread) and keep it if its timestamp is new.

        Raises:
            DeviceError: the read failed.
        """
        sample = self.device.power_mw()
        if sample is None:
            return None
        with self._lock:
            if not self._samples or sample.timestamp_us != self._samples[-1].timestamp_us:
                self._samples.append(sample)
        return sample

    def _run(self) -> None:
        try:
            while True:
                self.sample_once()
                if self._stop.wait(self.interval_s):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by stop()
            self._error = exc

    def start(self) -> None:
        """Start the sampling thread (it takes a first sample at once).

        Raises:
            RuntimeError: already started.
        """
        if self._thread is not None:
            raise RuntimeError("PowerSampler already started")
        self._thread = threading.Thread(target=self._run, name="opdb-power-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> list[PowerSample]:
        """Stop the thread, take a last sample, and return all samples (µs, mW).

        Raises:
            DeviceError: a read failed while sampling.
        """
        thread = self._thread
        if thread is not None:
            self._stop.set()
            thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if thread is not None:
            self.sample_once()
        return self.samples

    def energy_mj(self, start_us: int | None = None, end_us: int | None = None) -> float | None:
        """Integrate the samples so far (see ``integrate_power_mj``); None without samples."""
        samples = self.samples
        return integrate_power_mj(samples, start_us, end_us) if samples else None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.stop()
        else:  # the block failed: its error matters more than the sampler's
            self.abort()

    def abort(self) -> None:
        """Stop the thread and drop any error it had; keep the samples."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._error = None


@dataclass(frozen=True)
class EnergyWindowResult:
    """The energy of one window, from the counter and from integrated power (mJ), with samples."""

    start_us: int
    end_us: int
    counter_mj: int | None
    integrated_mj: float | None
    samples: tuple[PowerSample, ...]
    energy_unavailable_reason: str | None
    power_unavailable_reason: str | None

    @property
    def duration_s(self) -> float:
        """Window length in seconds."""
        return (self.end_us - self.start_us) / 1e6

    @property
    def source(self) -> Literal["counter", "power_integration"] | None:
        """Where ``energy_mj`` comes from: the counter if read, else power integration."""
        if self.counter_mj is not None:
            return "counter"
        if self.integrated_mj is not None:
            return "power_integration"
        return None

    @property
    def energy_mj(self) -> float | None:
        """The window's energy in mJ, from ``source``; None when neither figure exists."""
        if self.counter_mj is not None:
            return float(self.counter_mj)
        return self.integrated_mj

    @property
    def disagreement(self) -> float | None:
        """(integrated − counter) / counter, when both exist and the counter moved."""
        if self.counter_mj is None or self.integrated_mj is None or self.counter_mj == 0:
            return None
        return (self.integrated_mj - self.counter_mj) / self.counter_mj

    @property
    def mean_power_w(self) -> float | None:
        """Energy / duration in W (mJ / ms)."""
        energy = self.energy_mj
        if energy is None or self.end_us <= self.start_us:
            return None
        return energy / ((self.end_us - self.start_us) / 1000)

    @property
    def unavailable_reason(self) -> str | None:
        """Why the window has no energy at all, or None."""
        if self.source is not None:
            return None
        reasons = [r for r in (self.energy_unavailable_reason, self.power_unavailable_reason) if r]
        return "; ".join(reasons) or "energy unavailable"

    def as_dict(self) -> dict[str, Any]:
        """Return a JSON-ready summary with raw samples as [[µs, mW], ...]."""
        return {
            "start_us": self.start_us,
            "end_us": self.end_us,
            "duration_s": self.duration_s,
            "counter_mj": self.counter_mj,
            "integrated_mj": self.integrated_mj,
            "disagreement": self.disagreement,
            "source": self.source,
            "energy_mj": self.energy_mj,
            "samples": [[s.timestamp_us, s.power_mw] for s in self.samples],
            "unavailable_reason": self.unavailable_reason,
        }


class EnergyWindow:
    """Measure the energy of a block: counter difference and integrated power samples.

    ``with EnergyWindow(device) as w: run()`` then ``w.result``. On entry: start the sampler,
    synchronize, read the time and the counter; on exit: synchronize, read the counter and the time,
    stop the sampler. Without a counter (pre-Volta, ``energy_mj()`` None) only integration is used.
    """

    def __init__(
        self, device: Device, *, sample_power: bool = True, interval_s: float | None = None
    ) -> None:
        """Prepare a window on ``device``; ``sample_power=False`` reads the counter only.

        Raises:
            DeviceError: measuring the power reading's update period (for the sampling
                interval) failed.
        """
        self.device = device
        use_power = sample_power and device.power_unavailable_reason() is None
        self._sampler = PowerSampler(device, interval_s=interval_s) if use_power else None
        self._start_us: int | None = None
        self._counter_start: int | None = None
        self.result: EnergyWindowResult | None = None

    def start(self) -> None:
        """Open the window.

        Raises:
            DeviceError: a read failed (the sampler is stopped again).
        """
        if self._start_us is not None:
            raise RuntimeError("EnergyWindow already started")
        if self._sampler is not None:
            self._sampler.start()
        try:
            self.device.synchronize()
            self._start_us = self.device.timestamp_us()
            self._counter_start = self.device.energy_mj()
        except BaseException:
            self._abort()
            raise

    def stop(self) -> EnergyWindowResult:
        """Close the window and return its result (also kept in ``result``).

        Raises:
            DeviceError: a read failed.
        """
        if self._start_us is None:
            raise RuntimeError("EnergyWindow not started")
        try:
            self.device.synchronize()
            counter_end = self.device.energy_mj() if self._counter_start is not None else None
            end_us = self.device.timestamp_us()
        except BaseException:
            self._abort()
            raise
        samples: list[PowerSample] = []
        if self._sampler is not None:
            samples = self._sampler.stop()
        counter = None
        if self._counter_start is not None and counter_end is not None:
            counter = counter_end - self._counter_start
        integrated = integrate_power_mj(samples, self._start_us, end_us) if samples else None
        self.result = EnergyWindowResult(
            start_us=self._start_us,
            end_us=end_us,
            counter_mj=counter,
            integrated_mj=integrated,
            samples=tuple(samples),
            energy_unavailable_reason=self.device.energy_unavailable_reason(),
            power_unavailable_reason=self.device.power_unavailable_reason(),
        )
        return self.result

    def _abort(self) -> None:
        if self._sampler is not None:
            self._sampler.abort()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.stop()
        else:
            self._abort()
