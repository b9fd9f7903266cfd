"""A fake GPU with deterministic counters and settable failures, for tests and CI."""

from __future__ import annotations

import bisect
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

import torch

from operator_db.devices.base import (
    Clock,
    Device,
    DeviceIdentity,
    DeviceType,
    PowerSample,
    Sleep,
    Telemetry,
)
from operator_db.errors import DeviceError, OperatorDBError

FakeOperation = Literal["open", "energy", "power", "telemetry", "synchronize"]
FAKE_OPERATIONS: tuple[str, ...] = ("open", "energy", "power", "telemetry", "synchronize")


class FakeDevice(Device):
    """A device whose power is set, not measured; its torch device is the CPU.

    Power is piecewise constant (``power_mw`` at open, changed by ``set_power_mw``); the energy
    counter is its exact integral, in whole mJ, and like NVML's it only moves once per
    ``update_period_s``: a read at time t sees the value of the last update before t, and that
    value holds the energy up to ``counter_lag_s`` before the update (a counter that lags the
    power it integrates; 0 by default). ``update_jitter_s`` delays each update by a fixed
    pseudo-random part of it (0 by default: updates exactly one period apart). With
    ``counter_sample_s`` the counter samples rather than integrates, as Yang et al. (SC'24) saw on
    A100/H100: each update adds the mean power over the ``counter_sample_s`` before it (lagged
    alike) times the time since the update before. Power samples
    carry the timestamp of that update. Time comes from the injected ``clock`` (ns), so with a
    manual clock every reading is known in advance: energy = P × elapsed.

    Failures: ``fail_on[op] = error`` makes every call of ``op`` raise; ``fail_next(op, error, n)``
    makes the next n calls raise; ``refuse_open`` makes the constructor raise. ``calls`` counts the
    calls of each operation (failed ones included).
    """

    device_type: ClassVar[DeviceType] = "fake"

    def __init__(
        self,
        *,
        name: str = "FakeGPU",
        power_mw: float = 100_000.0,
        update_period_s: float = 0.02,
        has_energy_counter: bool = True,
        has_power: bool = True,
        clock_event_reasons: int = 0,
        temperature_c: float = 40.0,
        counter_lag_s: float = 0.0,
        update_jitter_s: float = 0.0,
        counter_sample_s: float = 0.0,
        violation_us: Mapping[str, int] | None = None,
        refuse_open: bool | OperatorDBError = False,
        fail_on: Mapping[str, OperatorDBError] | None = None,
        clock: Clock = time.perf_counter_ns,
        sleep: Sleep = time.sleep,
    ) -> None:
        """Open the fake device.

        Raises:
            DeviceError: ``refuse_open`` is True (or the given error when it is an error).
            ValueError: a non-positive ``update_period_s``, negative power, lag or jitter, a jitter
                of a period or more, or an unknown operation.
        """
        super().__init__(clock=clock, sleep=sleep)
        if update_period_s <= 0:
            raise ValueError("update_period_s must be > 0")
        if power_mw < 0:
            raise ValueError("power_mw must be >= 0")
        if counter_lag_s < 0:
            raise ValueError("counter_lag_s must be >= 0")
        if not 0 <= update_jitter_s < update_period_s:
            raise ValueError("update_jitter_s must be >= 0 and shorter than update_period_s")
        if counter_sample_s < 0:
            raise ValueError("counter_sample_s must be >= 0")
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.fail_on: dict[str, OperatorDBError] = {}
        self._fail_queue: defaultdict[str, list[OperatorDBError]] = defaultdict(list)
        for op, error in (fail_on or {}).items():
            self.fail_on[_check_op(op)] = error
        if refuse_open is not False:
            error = (
                refuse_open
                if isinstance(refuse_open, OperatorDBError)
                else DeviceError(f"fake device {name!r} refused to open (refuse_open)")
            )
            self.fail_on.setdefault("open", error)
        self._check("open")
        self.update_period_s = update_period_s
        self.has_energy_counter = has_energy_counter
        self.has_power = has_power
        self.clock_event_reasons = clock_event_reasons
        self.temperature_c = temperature_c
        self.sm_clock_mhz = 1980
        """The SM clock its telemetry says (MHz); lower it to simulate a clock drop."""
        self.other_pids: list[int] = []
        """Other processes on the device, as its context telemetry lists them."""
        self.violation_us: dict[str, int] = dict(violation_us or {})
        self._period_ns = round(update_period_s * 1e9)
        self._lag_ns = round(counter_lag_s * 1e9)
        self._jitter_ns = round(update_jitter_s * 1e9)
        self._sample_ns = round(counter_sample_s * 1e9)
        self._sampled: list[float] = [0.0]  # a sampling counter's value at update k, in mJ
        self._t0_ns = clock()
        # Piecewise-constant power: segment i starts at _starts[i] (ns), draws _powers[i] (mW),
        # and the energy drawn before it is _drawn[i] (mJ).
        self._starts: list[int] = [self._t0_ns]
        self._powers: list[float] = [float(power_mw)]
        self._drawn: list[float] = [0.0]
        self._identity = DeviceIdentity(
            device_type="fake",
            name=f"fake:{name}",
            vendor="operator-db",
            device_id="fake-0",
            architecture="fake",
            driver_version="fake",
            extra={"update_period_s": update_period_s},
        )

    # failures ---------------------------------------------------------------------------------

    def fail_next(self, op: str, error: OperatorDBError, times: int = 1) -> None:
        """Make the next ``times`` calls of ``op`` raise ``error``."""
        with self._lock:
            self._fail_queue[_check_op(op)].extend([error] * times)

    def _check(self, op: str) -> None:
        with self._lock:
            self.calls[op] += 1
            if self._closed:
                raise DeviceError(f"fake device is closed ({op})")
            queue = self._fail_queue.get(op)
            if queue:
                raise queue.pop(0)
            if op in self.fail_on:
                raise self.fail_on[op]

    # the simulated physics ------------------------------------------------------------------

    def set_power_mw(self, power_mw: float) -> None:
        """Draw ``power_mw`` from now on."""
        if power_mw < 0:
            raise ValueError("power_mw must be >= 0")
        now = self._clock()
        with self._lock:
            start = max(now, self._starts[-1])
            if start == self._starts[-1]:
                self._powers[-1] = float(power_mw)
                return
            step_s = (start - self._starts[-1]) / 1e9
            self._drawn.append(self._drawn[-1] + self._powers[-1] * step_s)
            self._starts.append(start)
            self._powers.append(float(power_mw))

    def _update_ns(self, k: int) -> int:
        """Return the time of the counter's k-th update: k periods, plus its fixed jitter."""
        jitter = 0 if k <= 0 else (k * 2654435761 % 4294967296) * self._jitter_ns // 4294967296
        return self._t0_ns + k * self._period_ns + jitter

    def _last_update(self, now_ns: int) -> int:
        """Return the index k of the last counter update at or before ``now_ns``."""
        k = max(0, (now_ns - self._t0_ns) // self._period_ns)
        return k if self._update_ns(k) <= now_ns else k - 1

    def _updated_at_ns(self, now_ns: int) -> int:
        """Return the time of the last counter update at or before ``now_ns``."""
        return self._update_ns(self._last_update(now_ns))

    def _segment(self, t_ns: int) -> int:
        return max(0, bisect.bisect_right(self._starts, t_ns) - 1)

    def _power_at(self, t_ns: int) -> float:
        return self._powers[self._segment(t_ns)]

    def _drawn_by(self, t_ns: int) -> float:
        """Return the energy drawn from open to ``t_ns``, in mJ."""
        if t_ns <= self._t0_ns:
            return 0.0
        i = self._segment(t_ns)
        return self._drawn[i] + self._powers[i] * (t_ns - self._starts[i]) / 1e9

    def energy_between_mj(self, start_ns: int, end_ns: int) -> float:
        """Return the exact energy drawn between two clock readings, in mJ (mW × s)."""
        with self._lock:
            return max(0.0, self._drawn_by(end_ns) - self._drawn_by(start_ns))

    # the Device interface ---------------------------------------------------------------------

    def identity(self) -> DeviceIdentity:
        """Return ``fake:<name>``, vendor ``operator-db``, device id ``fake-0``."""
        return self._identity

    def torch_device(self) -> torch.device:
        """Return ``cpu``: operators really run, on the CPU."""
        return torch.device("cpu")

    def synchronize(self) -> None:
        """Do nothing but count the call (and fail if told to)."""
        self._check("synchronize")

    def energy_mj(self) -> int | None:
        """Return whole mJ drawn since open, as of the last counter update; None without counter.

        Raises:
            OperatorDBError: a failure set with ``fail_on`` or ``fail_next``.
        """
        self._check("energy")
        if not self.has_energy_counter:
            return None
        if self._sample_ns:
            return int(self._sampled_at(self._last_update(self._clock())))
        updated = self._updated_at_ns(self._clock())
        return int(self.energy_between_mj(self._t0_ns, max(self._t0_ns, updated - self._lag_ns)))

    def _sampled_at(self, k: int) -> float:
        """Return a sampling counter's value at its k-th update, in mJ."""
        while len(self._sampled) <= k:
            i = len(self._sampled)
            at = self._update_ns(i) - self._lag_ns
            mean_mw = self.energy_between_mj(at - self._sample_ns, at) / self._sample_ns * 1e9
            step_s = (self._update_ns(i) - self._update_ns(i - 1)) / 1e9
            self._sampled.append(self._sampled[-1] + mean_mw * step_s)
        return self._sampled[k]

    def energy_unavailable_reason(self) -> str | None:
        """Say the counter is switched off (``has_energy_counter=False``), or None."""
        if self.has_energy_counter:
            return None
        return "energy unavailable: fake device configured without an energy counter"

    def power_mw(self) -> PowerSample | None:
        """Return the power as of the last update, stamped with that update's time (µs).

        Raises:
            OperatorDBError: a failure set with ``fail_on`` or ``fail_next``.
        """
        self._check("power")
        if not self.has_power:
            return None
        updated = self._updated_at_ns(self._clock())
        with self._lock:
            power = self._power_at(updated)
        return PowerSample(updated // 1000, power)

    def power_unavailable_reason(self) -> str | None:
        """Say power is switched off (``has_power=False``), or None."""
        if self.has_power:
            return None
        return "power unavailable: fake device configured without a power reading"

    def power_scope(self) -> str | None:
        """Return ``"fake"`` when the device has power readings."""
        return "fake" if self.has_power else None

    def energy_scope(self) -> str | None:
        """Return ``"fake"`` when the device has an energy counter."""
        return "fake" if self.has_energy_counter else None

    def _power_probe(self) -> Callable[[], object] | None:
        if self.has_power:
            return lambda: sample.timestamp_us if (sample := self.power_mw()) else None
        return None

    def _update_probe(self) -> Callable[[], object] | None:
        if self.has_energy_counter:
            return self.energy_mj
        return self._power_probe()

    def telemetry(self) -> Telemetry:
        """Return ``sm_clock_mhz`` (1980 MHz), 2619 MHz, ``temperature_c``, 700 W and the reasons.

        Raises:
            OperatorDBError: a failure set with ``fail_on`` or ``fail_next``.
        """
        self._check("telemetry")
        return Telemetry(
            timestamp_us=self.timestamp_us(),
            sm_clock_mhz=self.sm_clock_mhz,
            mem_clock_mhz=2619,
            temperature_c=self.temperature_c,
            power_limit_w=700.0,
            clock_event_reasons=self.clock_event_reasons,
        )

    def violation_counters_us(self) -> dict[str, int]:
        """Return a copy of ``violation_us`` (µs; set it to simulate throttled time).

        Keys as on NVIDIA GPUs, e.g. ``power_violation_us``, ``thermal_violation_us``,
        ``power_reference_us``; {} unless set. Counted and failed as the ``telemetry`` operation.

        Raises:
            OperatorDBError: a failure set with ``fail_on`` or ``fail_next`` for ``telemetry``.
        """
        self._check("telemetry")
        return dict(self.violation_us)

    def context_telemetry(self) -> dict[str, Any]:
        """Return a plausible snapshot: idle, with ``other_pids`` as the device's processes."""
        return {
            "gpu_utilization_pct": 0,
            "memory_used_bytes": 0,
            "processes": [{"pid": pid} for pid in self.other_pids],
        }


def _check_op(op: str) -> str:
    if op not in FAKE_OPERATIONS:
        raise ValueError(f"unknown fake-device operation {op!r}; expected one of {FAKE_OPERATIONS}")
    return op
