"""A noisy host is detected and flagged: steal, other processes' load, clock drops, GPU state."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from operator_db.db.models import FullModelRun, Measurement
from operator_db.db.store import Store
from operator_db.devices.base import Device
from operator_db.devices.fake import FakeDevice
from operator_db.devices.noise import HostReader, NoiseLimits, NoiseMonitor, reasons
from operator_db.doctor.host import quiet_check
from operator_db.measure.settings import MeasureSettings
from operator_db.worker.execute import JobInfo
from tests.worker.test_daemon import enqueue, fixed_result, make_worker

CLK_TCK = 100


class Proc:
    """A fake /proc/stat whose counters the test moves, and a fake clock and own CPU time."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "stat"
        self.sys = tmp_path / "sys"
        self.sys.mkdir()
        self.user = self.idle = self.steal = 0
        self.wall = 0.0
        self.own = 0.0
        self.write()

    def write(self) -> None:
        self.path.write_text(
            f"cpu  {self.user} 0 0 {self.idle} 0 0 0 {self.steal} 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n"
        )

    def advance(self, seconds: float, *, busy: float, steal: float = 0.0, own: float = 0.0) -> None:
        """``seconds`` of wall time on 2 CPUs: ``busy`` and ``steal`` CPU seconds of them."""
        self.wall += seconds
        self.user += round(busy * CLK_TCK)
        self.steal += round(steal * CLK_TCK)
        self.idle += round((2 * seconds - busy - steal) * CLK_TCK)
        self.own += own
        self.write()

    def reader(self, device: Device | None = None) -> HostReader:
        return HostReader(
            proc_stat=self.path,
            sys_cpu=self.sys,
            clock=lambda: self.wall,
            own_cpu=lambda: self.own,
            device=device,
        )


@pytest.fixture(autouse=True)
def _clk_tck(monkeypatch: pytest.MonkeyPatch) -> None:
    import operator_db.devices.noise as noise

    monkeypatch.setattr(noise.os, "sysconf", lambda name: CLK_TCK)


def test_a_quiet_host_says_nothing(tmp_path: Path) -> None:
    proc = Proc(tmp_path)
    reader = proc.reader()
    first = reader.read()
    proc.advance(2.0, busy=1.9, own=1.9)  # our own two threads, nothing else
    found, data = reasons([first, reader.read()])
    assert found == [] and data["steal"] == 0 and data["other_cpus"] == pytest.approx(0.0)


def test_a_steal_counter_is_detected(tmp_path: Path) -> None:
    proc = Proc(tmp_path)
    reader = proc.reader()
    first = reader.read()
    proc.advance(2.0, busy=1.6, steal=0.4, own=1.6)  # 10 % of the time stolen
    found, data = reasons([first, reader.read()])
    assert data["steal"] == pytest.approx(0.10)
    assert found == ["CPU steal 10.0% of the time (the VM's CPUs ran other guests)"]


def test_other_processes_load_is_detected(tmp_path: Path) -> None:
    proc = Proc(tmp_path)
    reader = proc.reader()
    first = reader.read()
    proc.advance(2.0, busy=3.0, own=1.0)  # others kept one CPU busy for 2 s
    found, data = reasons([first, reader.read()])
    assert data["other_cpus"] == pytest.approx(1.0)
    assert found == ["other processes kept 1.00 CPUs busy"]


def test_a_busy_process_on_this_host_is_detected() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # started
        with NoiseMonitor(period_s=0.2) as monitor:
            time.sleep(1.5)  # this process sleeps: the load is the other process's
        found, data = monitor.reasons()
    finally:
        busy.kill()
        busy.wait()
    assert data["other_cpus"] > 0.5
    assert any(r.startswith("other processes kept") for r in found)


def test_clock_drop_and_thermal_throttling(tmp_path: Path) -> None:
    proc = Proc(tmp_path)
    freq = proc.sys / "cpu0" / "cpufreq"
    freq.mkdir(parents=True)
    throttle = proc.sys / "cpu0" / "thermal_throttle"
    throttle.mkdir(parents=True)
    (freq / "scaling_cur_freq").write_text("3000000\n")
    (throttle / "core_throttle_count").write_text("4\n")
    reader = proc.reader()
    first = reader.read()
    (freq / "scaling_cur_freq").write_text("2400000\n")
    (throttle / "core_throttle_count").write_text("7\n")
    proc.advance(1.0, busy=1.0, own=1.0)
    found, _ = reasons([first, reader.read()])
    assert "CPU clock fell from 3.00 to 2.40 GHz" in found
    assert "CPU thermal throttling: 3 events" in found


def test_a_gpu_clock_drop_heat_and_other_processes(tmp_path: Path) -> None:
    proc = Proc(tmp_path)
    gpu = FakeDevice()
    reader = proc.reader(gpu)
    first = reader.read()
    gpu.sm_clock_mhz = 1500
    gpu.temperature_c = 90.0
    gpu.clock_event_reasons = 0x40  # HW thermal slowdown
    gpu.other_pids = [4242]
    proc.advance(1.0, busy=1.0, own=1.0)
    found, data = reasons([first, reader.read()])
    assert "GPU SM clock fell from 1980 to 1500 MHz" in found
    assert "GPU throttled (hw_thermal_slowdown)" in found
    assert "GPU at 90 °C" in found
    assert "1 other process(es) on the GPU (pids [4242])" in found
    assert data["gpu_sm_mhz"] == [1980, 1500]
    gpu.close()


def test_limits_are_settings(tmp_path: Path) -> None:
    proc = Proc(tmp_path)
    reader = proc.reader()
    first = reader.read()
    proc.advance(2.0, busy=1.9, steal=0.1, own=1.9)  # 2.5 % stolen
    assert reasons([first, reader.read()])[0]
    assert not reasons([first, reader.read()], NoiseLimits(steal=0.05))[0]


def test_the_worker_flags_a_job_measured_on_a_noisy_host(store: Store, tmp_path: Path) -> None:
    proc = Proc(tmp_path)
    enqueue(store)

    def executor(
        session: Any, job: JobInfo, device: Device, settings: MeasureSettings, idle: float | None
    ) -> list[Any]:
        proc.advance(1.0, busy=1.5, steal=0.3, own=0.5)  # while the job runs
        return fixed_result(job)

    stats = make_worker(store, executor, noise_reader=proc.reader).run()
    assert stats.done == 3
    with store.transaction() as session:
        rows = [*session.scalars(select(Measurement)), *session.scalars(select(FullModelRun))]
        assert rows and all("host_noisy" in r.flags for r in rows)
        noise = rows[0].provenance["host_noise"]
        assert noise["steal"] == pytest.approx(0.15)
        assert any("steal" in r for r in noise["reasons"])


def test_a_quiet_job_is_not_flagged_and_keeps_its_readings(store: Store, tmp_path: Path) -> None:
    proc = Proc(tmp_path)
    enqueue(store)

    def executor(
        session: Any, job: JobInfo, device: Device, settings: MeasureSettings, idle: float | None
    ) -> list[Any]:
        proc.advance(1.0, busy=1.0, own=1.0)
        return fixed_result(job)

    make_worker(store, executor, noise_reader=proc.reader).run()
    with store.transaction() as session:
        rows = list(session.scalars(select(Measurement)))
        assert rows and not any("host_noisy" in r.flags for r in rows)
        assert rows[0].provenance["host_noise"]["reasons"] == []


def test_the_doctor_warns_of_a_noisy_host(tmp_path: Path) -> None:
    proc = Proc(tmp_path)

    class Stealing(HostReader):
        def read(self) -> Any:
            proc.advance(0.5, busy=0.5, steal=0.5, own=0.5)
            return super().read()

    row = quiet_check(
        Stealing(proc.path, proc.sys, lambda: proc.wall, lambda: proc.own), 0.1, "cpu"
    )
    assert row.status == "warn" and "steal" in row.value
    quiet = quiet_check(proc.reader(), 0.1, "cpu")
    assert quiet.status == "ok" and "nothing moved the host" in quiet.value
