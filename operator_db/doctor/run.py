"""Run every check that fits the host, in table order, and return the report.

Which device: the one ``opdb worker`` would open for the same setting (``auto``: NVIDIA where NVML
sees a GPU and torch has CUDA, else the CPU). Where NVML sees a GPU that torch cannot use, the
doctor fails and goes on with the CPU, which is what the worker would measure.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from operator_db.config import Settings
from operator_db.devices.base import Clock, Device, Sleep
from operator_db.devices.cpu import POWERCAP_ROOT, CpuDevice
from operator_db.devices.cuda import cuda_unavailable_reason
from operator_db.devices.factory import fake_from_settings, parse_device_spec
from operator_db.devices.noise import HostReader
from operator_db.devices.nvidia import NvidiaDevice
from operator_db.doctor import cpu, energy, host, nvidia
from operator_db.doctor.energy import Workload
from operator_db.doctor.report import Check, DoctorReport, fail, guarded, one_line, warn
from operator_db.errors import OperatorDBError
from operator_db.measure.energy import energy_unavailable


@dataclass(frozen=True)
class DoctorOptions:
    """How long the doctor looks, and (for tests) what it runs and reads.

    ``window_s``: the idle window and the busy window, each (s). ``load``: run the busy window.
    ``database``: check the database. ``period_timeout_s``: the longest wait for a counter or a
    power reading to change (s). ``overhead_block_s`` × 2 × ``overhead_pairs``: the time spent on
    the sampler's overhead (s). The rest are injected: clocks (ns), sleep (s), the wall clock of
    NVML's timestamps (µs), the RAPL root, the process's effective uid, the ``pynvml`` module, the
    work run on the device.
    """

    window_s: float = 2.0
    load: bool = True
    database: bool = True
    period_timeout_s: float = 3.0
    overhead_block_s: float = 0.05
    overhead_pairs: int = 5
    workload: Workload = field(default_factory=Workload)
    clock: Clock = time.perf_counter_ns
    sleep: Sleep = time.sleep
    wall_clock_us: Callable[[], int] | None = None
    powercap_root: Path = POWERCAP_ROOT
    euid: Callable[[], int] = os.geteuid
    nvml: Any = None
    noise_window_s: float = 1.0
    """How long the host is read, idle, for what would move a measurement's figures (s)."""
    noise_reader: Callable[[Device], HostReader] = HostReader.for_device


def _open_nvidia(index: int, options: DoctorOptions) -> NvidiaDevice:
    kwargs: dict[str, Any] = {"nvml": options.nvml, "clock": options.clock, "sleep": options.sleep}
    if options.wall_clock_us is not None:
        kwargs["wall_clock_us"] = options.wall_clock_us
    return NvidiaDevice(index, **kwargs)


def _open(
    spec: str, settings: Settings, options: DoctorOptions, checks: list[Check]
) -> Device | None:
    """Open the device ``spec`` names, appending the NVML and torch checks on the way.

    Returns None where it cannot be opened (a ``fail`` row says why).
    """
    backend, index = parse_device_spec(spec)
    gpu_index = index or 0
    if backend in ("auto", "nvidia"):
        nvml_row, nvml_works = nvidia.nvml_check(options.nvml, required=backend == "nvidia")
        checks.append(nvml_row)
        nvidia_host = nvml_works or backend == "nvidia"
        checks.append(nvidia.torch_check(nvidia_host=nvidia_host))
        if backend == "nvidia" and not nvml_works:
            return None
        if nvidia_host and cuda_unavailable_reason() is not None:
            if backend == "nvidia":
                return None
            checks[-1] = fail(
                checks[-1].name,
                checks[-1].title,
                f"{checks[-1].value}: `auto` would measure the CPU",
                checks[-1].action,
                **checks[-1].data,
            )
            backend = "cpu"
        elif nvidia_host:
            checks.extend(
                guarded("gpu_map", "torch ↔ NVML", lambda: [nvidia.gpu_map_check(options.nvml)], "")
            )
            backend = "nvidia"
        else:
            backend = "cpu"
    else:
        checks.append(nvidia.torch_check(nvidia_host=False))
    try:
        if backend == "nvidia":
            return _open_nvidia(gpu_index, options)
        if backend == "cpu":
            return CpuDevice(
                powercap_root=options.powercap_root, clock=options.clock, sleep=options.sleep
            )
        return fake_from_settings(settings, clock=options.clock, sleep=options.sleep)
    except OperatorDBError as exc:
        checks.append(fail("device", "device", f"cannot open {spec}: {one_line(exc)}", ""))
        return None


def _device_rows(device: Device, settings: Settings, options: DoctorOptions) -> list[Check]:
    """Return the device's identity and what it reads (before the windows)."""
    timeout = options.period_timeout_s
    if isinstance(device, CpuDevice):
        return [cpu.cpu_check(device), cpu.rapl_check(device, timeout)]
    rows: list[Check] = []
    if isinstance(device, NvidiaDevice):
        c2c = {True: "on", False: "off", None: "unknown"}[device.c2c_mode()]
        rows.append(nvidia.gpu_check(device))
        rows.append(energy.counter_check(device, timeout))
        rows.append(
            energy.power_check(device, timeout, title="field 186 power", note=f", C2C {c2c}")
        )
        rows.append(nvidia.power_limit_check(device))
        rows.append(nvidia.clock_lock_check(device, options.euid()))
    else:
        rows.append(
            warn(
                "device",
                "device",
                f"{device.kind_name()}: a stand-in (times are real CPU times, energy is simulated)",
                "use --device auto, cpu or nvidia on a measuring host",
            )
        )
        rows.append(energy.counter_check(device, timeout))
        rows.append(energy.power_check(device, timeout))
    rows.append(nvidia.clock_events_check(device))
    return rows


def _window_rows(device: Device, settings: Settings, options: DoctorOptions) -> list[Check]:
    """Idle power, the counter against integrated power idle and busy, the sampler's cost."""
    rows: list[Check] = []
    limit = settings.measure.disagreement_limit
    idle, _ = energy.measure_window(
        device,
        options.window_s,
        None,
        clock=options.clock,
        sleep=options.sleep,
        timeout_s=options.period_timeout_s,
    )
    rows.append(energy.idle_check(device, idle))
    if (row := energy.agreement_check("agreement_idle", "idle", idle, limit)) is not None:
        rows.append(row)
    both = device.energy_unavailable_reason() is None and device.power_unavailable_reason() is None
    if options.load and both:
        work = options.workload.load(device.torch_device())
        work()  # warm-up: kernels loaded, libraries initialised, before the window opens
        device.synchronize()
        busy, calls = energy.measure_window(
            device,
            options.window_s,
            work,
            clock=options.clock,
            sleep=options.sleep,
            timeout_s=options.period_timeout_s,
        )
        row = energy.agreement_check("agreement_load", "load", busy, limit)
        if row is not None:
            power = busy.mean_power_w
            under = f"; {power:.1f} W under load" if power is not None else ""
            rows.append(
                replace(row, value=row.value + under, data={**row.data, "load_calls": calls})
            )
    if device.power_unavailable_reason() is None:
        op = options.workload.small_op(device.torch_device())
        rows.append(
            energy.overhead_check(
                device,
                op,
                settings,
                block_s=options.overhead_block_s,
                pairs=options.overhead_pairs,
            )
        )
    return rows


def device_checks(device: Device, settings: Settings, options: DoctorOptions) -> list[Check]:
    """Every check of an open device, in table order; an error ends that part in a fail row."""
    rows = guarded("device", "device", lambda: _device_rows(device, settings, options), "")
    rows.append(
        host.quiet_check(options.noise_reader(device), options.noise_window_s, device.device_type)
    )
    readings_ok = all(r.status != "fail" for r in rows)
    if readings_ok and energy_unavailable(device) is None:
        rows += guarded(
            "energy_window",
            "energy windows",
            lambda: _window_rows(device, settings, options),
            "check the device (nvidia-smi on a GPU) and run the doctor again",
        )
    if device.device_type != "gpu":
        rows.append(cpu.allocator_check(settings))
    rows.append(cpu.measurable_check(device, settings))
    return rows


def run_doctor(
    settings: Settings,
    *,
    device: str | None = None,
    db_url: str | None = None,
    options: DoctorOptions | None = None,
) -> DoctorReport:
    """Check this host for measuring on ``device`` (default: the ``device`` setting).

    ``db_url`` defaults to the ``database_url`` setting. Nothing is written to the database and
    nothing of the device is changed; torch's backend flags are pinned in this process, as the
    worker pins them.

    Raises:
        ConfigurationError: ``device`` is not a device spec.
    """
    options = options or DoctorOptions()
    spec = device or settings.device
    started = time.perf_counter()
    start_threads = torch.get_num_threads()
    checks: list[Check] = []
    opened = _open(spec, settings, options, checks)
    threads = settings.measure.threads or start_threads
    checks.append(host.backends_check(settings, threads))
    if opened is not None:
        try:
            rows = device_checks(opened, settings, options)
        finally:
            opened.close()
        if isinstance(opened, CpuDevice):
            rows.insert(1, cpu.threads_check(settings, start_threads))
        checks.extend(rows)
    checks.append(host.settings_check(settings, spec))
    if options.database:
        checks.append(
            host.database_check(
                db_url or settings.database_url, auto_upgrade_sqlite=settings.auto_upgrade_sqlite
            )
        )
    return DoctorReport(spec, tuple(checks), time.perf_counter() - started)
