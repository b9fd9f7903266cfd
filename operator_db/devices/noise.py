"""What makes figures move on a host, read before and during a measurement.

pyperf warns that "the benchmark seems unstable" and says how to tune the system; this module
reads the same causes on the host that measures:

- **CPU steal** (``/proc/stat``): time a VM's CPUs were given to other guests;
- **other processes' CPU load**: busy CPU time of the whole host (``/proc/stat``) minus this
  process's own (``os.times``), per second of wall time;
- **frequency changes** (``cpufreq/scaling_cur_freq``, where the kernel exposes it) and
  **thermal throttling** (``thermal_throttle/*_throttle_count``);
- **on a GPU**: its SM clock dropping, its clock-event reasons (thermal, power brake, HW
  slowdown), its temperature, and other processes on the device.

A :class:`NoiseMonitor` samples these every ``period_s`` on a thread while a job runs; its
:meth:`~NoiseMonitor.reasons` says, in words, what exceeded :class:`NoiseLimits`. The worker
flags every result of such a job ``host_noisy`` with the reasons in its provenance, and
``opdb doctor`` reads one window before any measurement.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from operator_db.devices.base import Device


MIN_COUNTER_S = 0.5
"""The shortest window the CPU time counters are read over, s (they count in 10 ms ticks)."""
LOOKBACK_S = 1.0
"""Readings this long before a job's start count for the job, s."""


@dataclass(frozen=True)
class NoiseLimits:
    """Where a reading becomes a reason to distrust a figure."""

    steal: float = 0.02
    """Share of the host's CPU time stolen by the hypervisor (2 %)."""
    other_cpus: float = 0.25
    """Other processes' busy CPUs on average (a quarter of one CPU)."""
    frequency_drop: float = 0.10
    """Relative drop of the slowest CPU's (or the GPU's SM) clock from the first reading."""
    gpu_temperature_c: float = 87.0
    """A GPU temperature at which its clocks come down."""


@dataclass(frozen=True)
class Snapshot:
    """One reading of the host (and device); None where not readable."""

    wall_s: float
    busy_s: float | None = None
    """Busy CPU time of the whole host since boot (user, system, irq …; steal and idle not)."""
    steal_s: float | None = None
    total_s: float | None = None
    """All CPU time since boot, steal and idle included."""
    own_cpu_s: float = 0.0
    """This process's CPU time (user + system, children included)."""
    freq_khz: tuple[int, ...] = ()
    throttle_events: int | None = None
    gpu_sm_clock_mhz: int | None = None
    gpu_temperature_c: float | None = None
    gpu_throttled: bool = False
    gpu_reasons: tuple[str, ...] = ()
    gpu_other_pids: tuple[int, ...] = ()


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class HostReader:
    """Reads a :class:`Snapshot`; the paths are parameters so that tests can fake them."""

    proc_stat: Path = Path("/proc/stat")
    sys_cpu: Path = Path("/sys/devices/system/cpu")
    clock: Callable[[], float] = time.monotonic
    own_cpu: Callable[[], float] = field(
        default=lambda: sum(os.times()[:4])  # user, system, children's user and system
    )
    device: Device | None = None

    @classmethod
    def for_device(cls, device: Device) -> HostReader:
        """Return a reader of this host and ``device``."""
        return cls(device=device)

    def read(self) -> Snapshot:
        """Return the host's (and the device's) state now."""
        busy = steal = total = None
        try:
            fields = self.proc_stat.read_text().splitlines()[0].split()
            if fields[0] == "cpu":
                ticks = [int(v) for v in fields[1:]]
                per_s = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
                # user nice system idle iowait irq softirq steal [guest guest_nice: in user]
                idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
                steal_ticks = ticks[7] if len(ticks) > 7 else 0
                all_ticks = sum(ticks[:8])
                busy = (all_ticks - idle - steal_ticks) / per_s
                steal = steal_ticks / per_s
                total = all_ticks / per_s
        except (OSError, ValueError, IndexError):
            pass
        freqs = tuple(
            f
            for p in sorted(self.sys_cpu.glob("cpu[0-9]*/cpufreq/scaling_cur_freq"))
            if (f := _read_int(p)) is not None
        )
        counts = [
            c
            for p in self.sys_cpu.glob("cpu[0-9]*/thermal_throttle/*_throttle_count")
            if (c := _read_int(p)) is not None
        ]
        snap = Snapshot(
            wall_s=self.clock(),
            busy_s=busy,
            steal_s=steal,
            total_s=total,
            own_cpu_s=self.own_cpu(),
            freq_khz=freqs,
            throttle_events=sum(counts) if counts else None,
        )
        return self._with_device(snap)

    def _with_device(self, snap: Snapshot) -> Snapshot:
        if self.device is None or self.device.identity().device_type == "cpu":
            return snap
        from dataclasses import replace

        from operator_db.errors import OperatorDBError

        try:
            t = self.device.telemetry()
            pids = tuple(
                int(p["pid"])
                for p in self.device.context_telemetry().get("processes", [])
                if p.get("pid") is not None and int(p["pid"]) != os.getpid()
            )
        except (OperatorDBError, ValueError, TypeError):
            return snap
        return replace(
            snap,
            gpu_sm_clock_mhz=t.sm_clock_mhz,
            gpu_temperature_c=t.temperature_c,
            gpu_throttled=t.throttled,
            gpu_reasons=t.clock_event_flags if t.throttled else (),
            gpu_other_pids=pids,
        )


def reasons(
    snapshots: list[Snapshot], limits: NoiseLimits | None = None
) -> tuple[list[str], dict[str, Any]]:
    """Return what in ``snapshots`` (in time order) makes figures move, and the readings.

    Counters (steal, busy time) are taken between the first and the last snapshot; instant
    readings (clocks, temperature, processes) over all of them.
    """
    limits = limits or NoiseLimits()
    out: list[str] = []
    data: dict[str, Any] = {}
    if len(snapshots) < 2:
        return out, data
    first, last = snapshots[0], snapshots[-1]
    wall = last.wall_s - first.wall_s
    if wall < MIN_COUNTER_S:
        data["counters"] = f"window of {wall:.2f} s: too short for the CPU time counters"
    elif (
        wall > 0
        and None not in (first.total_s, last.total_s, first.steal_s, last.steal_s)
        and first.busy_s is not None
        and last.busy_s is not None
    ):
        total = (last.total_s or 0.0) - (first.total_s or 0.0)
        steal = (last.steal_s or 0.0) - (first.steal_s or 0.0)
        if total > 0:
            share = steal / total
            data["steal"] = round(share, 4)
            if share > limits.steal:
                out.append(f"CPU steal {share:.1%} of the time (the VM's CPUs ran other guests)")
        other = ((last.busy_s - first.busy_s) - (last.own_cpu_s - first.own_cpu_s)) / wall
        data["other_cpus"] = round(max(other, 0.0), 3)
        if other > limits.other_cpus:
            out.append(f"other processes kept {other:.2f} CPUs busy")
    freqs = [min(s.freq_khz) for s in snapshots if s.freq_khz]
    if freqs and freqs[0] > 0:
        low = min(freqs)
        data["cpu_khz"] = [freqs[0], low]
        if (freqs[0] - low) / freqs[0] > limits.frequency_drop:
            out.append(f"CPU clock fell from {freqs[0] / 1e6:.2f} to {low / 1e6:.2f} GHz")
    if first.throttle_events is not None and last.throttle_events is not None:
        events = last.throttle_events - first.throttle_events
        data["throttle_events"] = events
        if events > 0:
            out.append(f"CPU thermal throttling: {events} events")
    clocks = [s.gpu_sm_clock_mhz for s in snapshots if s.gpu_sm_clock_mhz]
    if clocks:
        data["gpu_sm_mhz"] = [clocks[0], min(clocks)]
        if (clocks[0] - min(clocks)) / clocks[0] > limits.frequency_drop:
            out.append(f"GPU SM clock fell from {clocks[0]} to {min(clocks)} MHz")
    throttled = sorted({r for s in snapshots for r in s.gpu_reasons})
    if throttled:
        out.append(f"GPU throttled ({', '.join(throttled)})")
    temps = [s.gpu_temperature_c for s in snapshots if s.gpu_temperature_c is not None]
    if temps:
        data["gpu_max_c"] = max(temps)
        if max(temps) >= limits.gpu_temperature_c:
            out.append(f"GPU at {max(temps):.0f} °C")
    pids = sorted({p for s in snapshots for p in s.gpu_other_pids})
    if pids:
        data["gpu_other_pids"] = pids
        out.append(f"{len(pids)} other process(es) on the GPU (pids {pids})")
    return out, data


class NoiseMonitor:
    """Samples the host every ``period_s`` on a thread between ``start`` and ``stop``.

    A worker keeps one running for its life and reads each job's window with
    :meth:`reasons` (``since`` the job's :meth:`mark`, and ``lookback_s`` before it, so that a
    job shorter than the counters' resolution is judged by the second before it too); a
    one-off window is a context manager.
    """

    def __init__(
        self,
        reader: HostReader | None = None,
        *,
        period_s: float = 1.0,
        limits: NoiseLimits | None = None,
        keep: int = 3600,
    ) -> None:
        self.reader = reader or HostReader()
        self.period_s = period_s
        self.limits = limits or NoiseLimits()
        self.snapshots: deque[Snapshot] = deque(maxlen=keep)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.snapshots.append(self.reader.read())

    def mark(self) -> float:
        """Take a reading now; return its time (s, the reader's clock)."""
        snap = self.reader.read()
        self.snapshots.append(snap)
        return snap.wall_s

    def start(self) -> NoiseMonitor:
        """Take the first reading and start sampling."""
        self.snapshots.clear()
        self.mark()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="opdb-noise", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling and take the last reading."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.mark()

    def __enter__(self) -> NoiseMonitor:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def reasons(
        self, since: float | None = None, lookback_s: float = LOOKBACK_S
    ) -> tuple[list[str], dict[str, Any]]:
        """Return what moved the figures (:func:`reasons`) over the readings since ``since``.

        ``since``: a :meth:`mark`'s time; readings from ``lookback_s`` before it count too.
        None: every reading kept.
        """
        snaps = sorted(list(self.snapshots), key=lambda s: s.wall_s)
        if since is not None:
            snaps = [s for s in snaps if s.wall_s >= since - lookback_s]
        return reasons(snaps, self.limits)


def quiet_window(
    seconds: float = 1.0, reader: HostReader | None = None, limits: NoiseLimits | None = None
) -> tuple[list[str], dict[str, Any]]:
    """Read the host over ``seconds`` doing nothing: what a measurement would be up against."""
    with NoiseMonitor(reader, period_s=max(seconds / 4, 0.05), limits=limits) as monitor:
        time.sleep(seconds)
    return monitor.reasons()
