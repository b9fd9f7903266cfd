"""The doctor on a simulated NVIDIA host (tests/devices/nvml_sim.py): NVML, torch's CUDA, the GPU
map, counter and field 186 with their periods, power limit, clock locking, windows, failures.

The GPU's counter and field 186 follow a manual clock, so windows of 2 s take no time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pynvml as real
import pytest
import torch

from operator_db.config import Settings
from operator_db.doctor import DoctorOptions, DoctorReport, Workload, run_doctor
from tests.devices.clock import ManualClock
from tests.devices.nvml_sim import SimCuda, SimGpu, SimHost

UUIDS = ["GPU-00000000-0000-0000-0000-000000000000", "GPU-11111111-1111-1111-1111-111111111111"]


def drive(
    gpu: SimGpu,
    clock: ManualClock,
    *,
    counter_w: float = 60.0,
    power_w: float = 60.0,
    counter_period_ns: int = 100_000_000,
    power_period_ns: int = 20_000_000,
) -> None:
    """Make ``gpu`` draw power on ``clock``: a counter moving every 100 ms, field 186 every 20 ms.

    Field 186 wobbles by 10 mW between updates (a reading that never changes has no period).
    """
    gpu.energy_fn = lambda: (
        5_000_000 + int(counter_w * (clock() // counter_period_ns) * counter_period_ns / 1e6)
    )
    gpu.power_fn = lambda: int(power_w * 1000) + 10 * (clock() // power_period_ns % 2)
    gpu.power_timestamp_fn = lambda: clock() // power_period_ns * power_period_ns // 1000


def options(clock: ManualClock, nvml: Any, tmp_path: Path, *, euid: int = 1000) -> DoctorOptions:
    """Windows of 2 s on the manual clock; the load advances it; the small op is a CPU add."""
    a = torch.ones(256)

    def load(_device: torch.device) -> Any:
        return lambda: clock.advance_s(0.01)

    return DoctorOptions(
        window_s=2.0,
        period_timeout_s=3.0,
        overhead_block_s=0.002,
        overhead_pairs=3,
        workload=Workload(load=load, small_op=lambda _device: lambda: a.add(a)),
        clock=clock,
        sleep=clock.sleep,
        wall_clock_us=lambda: clock() // 1000,
        powercap_root=tmp_path / "no-powercap",
        euid=lambda: euid,
        nvml=nvml,
    )


def doctor(
    clock: ManualClock, nvml: Any, tmp_path: Path, device: str = "auto", **kwargs: Any
) -> DoctorReport:
    url = f"sqlite:///{tmp_path / 'none.sqlite'}"
    return run_doctor(
        Settings(), device=device, db_url=url, options=options(clock, nvml, tmp_path, **kwargs)
    )


def row(report: DoctorReport, name: str) -> Any:
    check = report.get(name)
    assert check is not None, f"no {name} row in {[c.name for c in report.checks]}"
    return check


def test_nvidia_host_every_check(
    host: SimHost, nvml: Any, cuda: SimCuda, clock: ManualClock, tmp_path: Path
) -> None:
    drive(host.gpus[0], clock)
    report = doctor(clock, nvml, tmp_path)
    assert [c.name for c in report.checks] == [
        "nvml",
        "torch",
        "gpu_map",
        "backends",
        "device",
        "energy_counter",
        "power",
        "power_limit",
        "clock_lock",
        "clock_events",
        "host_quiet",
        "idle_power",
        "agreement_idle",
        "agreement_load",
        "sampler_overhead",
        "measurable",
        "settings",
        "database",
    ]
    uuid = host.gpus[0].uuid
    assert row(report, "nvml").value == "1 NVIDIA GPU(s), driver 550.54.15"
    assert row(report, "torch").value == (
        f"torch {torch.__version__}, CUDA 12.4, cuDNN none; sees 1 GPU(s)"
    )
    assert row(report, "gpu_map").value == f"cuda:0 = NVML 0 ({uuid})"
    assert row(report, "device").value == (
        f"NVIDIA H100 80GB HBM3 (Hopper, 80 GiB), {uuid}, cuda:0 = NVML 0, "
        "driver 550.54.15 (CUDA 12.4), NVML 12.550.54.15"
    )
    assert row(report, "energy_counter").value == "present (scope GPU), updates every 100 ms"
    assert row(report, "power").value == (
        "scope GPU, C2C unknown, updates every 20 ms; the sampler polls every 10 ms"
    )
    assert row(report, "power").title == "field 186 power"
    assert row(report, "power_limit").value == "700 W (the default)"
    assert row(report, "clock_events").value == (
        "SM 1980 MHz, memory 2619 MHz, 41 °C; reasons 0x0: none"
    )
    idle = row(report, "idle_power")
    # The window opens on a counter update and closes on the first one after 2 s (100 ms later).
    assert idle.value == "60.0 W over 2.10 s (counter)"
    for name in ("agreement_idle", "agreement_load"):
        check = row(report, name)
        assert check.status == "ok"
        assert abs(check.data["disagreement"]) < 0.001
    assert row(report, "agreement_load").data["load_calls"] == 200
    assert row(report, "measurable").value == (
        "time: yes; energy: yes (counter, cross-checked with integrated power)"
    )
    statuses = {c.name: c.status for c in report.checks}
    assert statuses.pop("database") == "warn"  # no file yet
    assert statuses.pop("sampler_overhead") in ("ok", "warn")  # real timings
    assert set(statuses.values()) == {"ok"}
    assert report.exit_code == 0
    # Nothing was set: the stand-in has no setter at all, so none can have been called.
    assert not [name for name in dir(nvml) if name.startswith("nvmlDeviceSet")]


def test_counter_and_field_186_disagreeing_fail(
    host: SimHost, nvml: Any, cuda: SimCuda, clock: ManualClock, tmp_path: Path
) -> None:
    drive(host.gpus[0], clock, power_w=72.0)  # the power field reads 20 % above the counter
    report = doctor(clock, nvml, tmp_path)
    for name in ("agreement_idle", "agreement_load"):
        check = row(report, name)
        assert check.status == "fail"
        assert check.data["disagreement"] == pytest.approx(0.2, abs=0.001)
        assert "over 2.10 s: +20.0 % (limit ±5 %)" in check.value
        assert "C2C mode" in check.action
    assert report.exit_code == 1


def test_grace_hopper_c2c_module_scope(
    host: SimHost, nvml: Any, cuda: SimCuda, clock: ManualClock, tmp_path: Path
) -> None:
    host.gpus[0] = SimGpu(
        name="NVIDIA GH200 480GB",
        c2c_enabled=True,
        field_scopes={real.NVML_POWER_SCOPE_GPU, real.NVML_POWER_SCOPE_MODULE},
    )
    drive(host.gpus[0], clock)
    report = doctor(clock, nvml, tmp_path)
    assert row(report, "energy_counter").value.startswith("present (scope MODULE), ")
    assert row(report, "power").value.startswith("scope MODULE, C2C on, ")
    assert row(report, "agreement_idle").status == "ok"


def test_torch_without_cuda_on_an_nvidia_host_fails_and_checks_the_cpu(
    host: SimHost, nvml: Any, cuda: SimCuda, clock: ManualClock, tmp_path: Path
) -> None:
    cuda.available = False
    torch.version.cuda = None  # type: ignore[misc]  # a CPU-only build (restored by monkeypatch)
    report = doctor(clock, nvml, tmp_path)
    torch_row = row(report, "torch")
    assert torch_row.status == "fail"
    assert "is a CPU-only build (no CUDA)" in torch_row.value
    assert torch_row.value.endswith(": `auto` would measure the CPU")
    assert "CUDA build of torch" in torch_row.action
    assert row(report, "device").title == "CPU"  # what the worker would measure
    assert report.get("gpu_map") is None
    assert report.exit_code == 1


def test_nvidia_asked_but_nvml_missing_fails(
    host: SimHost, nvml: Any, cuda: SimCuda, clock: ManualClock, tmp_path: Path
) -> None:
    host.fail["nvmlInit"] = real.NVML_ERROR_LIBRARY_NOT_FOUND
    report = doctor(clock, nvml, tmp_path, device="nvidia")
    nvml_row = row(report, "nvml")
    assert nvml_row.status == "fail"
    assert nvml_row.value.startswith(
        "NVML unavailable: NVML could not initialise: the NVML library"
    )
    assert [c.name for c in report.checks] == ["nvml", "torch", "backends", "settings", "database"]
    assert report.exit_code == 1


def test_a_gpu_torch_and_nvml_map_differently_fails(
    host: SimHost, nvml: Any, cuda: SimCuda, clock: ManualClock, tmp_path: Path
) -> None:
    host.fail["nvmlDeviceGetHandleByUUID"] = real.NVML_ERROR_NOT_FOUND
    report = doctor(clock, nvml, tmp_path, device="nvidia:0")
    gpu_map = row(report, "gpu_map")
    assert gpu_map.status == "fail"
    assert gpu_map.value.startswith(f"cuda:0 ({host.gpus[0].uuid}): no NVML GPU has it: ")
    device = row(report, "device")
    assert device.status == "fail"
    assert "no NVML GPU matches torch's cuda:0" in device.value
    assert report.exit_code == 1


def test_cuda_order_differing_from_nvml_order_is_reported(
    host: SimHost, nvml: Any, cuda: SimCuda, clock: ManualClock, tmp_path: Path
) -> None:
    host.gpus = [SimGpu(uuid=UUIDS[0]), SimGpu(uuid=UUIDS[1])]
    cuda.visible = [1, 0]  # CUDA_VISIBLE_DEVICES=1,0
    for gpu in host.gpus:
        drive(gpu, clock)
    report = doctor(clock, nvml, tmp_path)
    gpu_map = row(report, "gpu_map")
    assert gpu_map.status == "ok"
    assert gpu_map.value == f"cuda:0 = NVML 1 ({UUIDS[1]}), cuda:1 = NVML 0 ({UUIDS[0]})"
    assert f"{UUIDS[1]}, cuda:0 = NVML 1," in row(report, "device").value


def test_a_capped_power_limit_warns(
    host: SimHost, nvml: Any, cuda: SimCuda, clock: ManualClock, tmp_path: Path
) -> None:
    drive(host.gpus[0], clock)
    host.gpus[0].power_limit_mw = 450_000
    report = doctor(clock, nvml, tmp_path)
    limit = row(report, "power_limit")
    assert (limit.status, limit.value) == ("warn", "450 W, below the board's default 700 W")
    assert limit.action.startswith(
        "results hold for this cap only: restore it (sudo nvidia-smi -pl 700)"
    )
    assert report.exit_code == 0


@pytest.mark.parametrize(
    ("euid", "allowed", "start"),
    [
        (1000, False, "not allowed: locking clocks needs root; this process runs as uid 1000"),
        (0, None, "unknown (needs root): this process is root, but NVML has no read-only probe"),
    ],
)
def test_clock_locking_is_read_not_tried(
    host: SimHost,
    nvml: Any,
    cuda: SimCuda,
    clock: ManualClock,
    tmp_path: Path,
    euid: int,
    allowed: bool | None,
    start: str,
) -> None:
    drive(host.gpus[0], clock)
    report = doctor(clock, nvml, tmp_path, euid=euid)
    lock = row(report, "clock_lock")
    assert lock.status == "ok"
    assert lock.value.startswith(start)
    assert lock.value.endswith("; setting application clocks: root only")
    assert (lock.data["allowed"], lock.data["euid"]) == (allowed, euid)
    nvml.nvmlDeviceGetAPIRestriction.assert_called_with(
        host.gpus[0], real.NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS
    )


def test_thermal_slowdown_warns(
    host: SimHost, nvml: Any, cuda: SimCuda, clock: ManualClock, tmp_path: Path
) -> None:
    drive(host.gpus[0], clock)
    host.gpus[0].clock_event_reasons = 0x1 | 0x20
    report = doctor(clock, nvml, tmp_path)
    events = row(report, "clock_events")
    assert events.status == "warn"
    assert events.value.endswith("reasons 0x21: gpu_idle, sw_thermal_slowdown")


def test_counter_not_permitted_falls_back_to_power(
    host: SimHost, nvml: Any, cuda: SimCuda, clock: ManualClock, tmp_path: Path
) -> None:
    drive(host.gpus[0], clock)
    host.fail["nvmlDeviceGetTotalEnergyConsumption"] = real.NVML_ERROR_NO_PERMISSION
    report = doctor(clock, nvml, tmp_path)
    counter = row(report, "energy_counter")
    assert counter.status == "warn"
    assert counter.value == (
        "energy unavailable: NVML could not read the energy counter: insufficient permissions "
        "(NVML_ERROR_NO_PERMISSION); integrated power is used instead"
    )
    assert row(report, "idle_power").value.endswith("(integrated power)")
    assert report.get("agreement_idle") is None and report.get("agreement_load") is None
    assert report.exit_code == 0


def test_a_counter_that_never_moves_fails(
    host: SimHost, nvml: Any, cuda: SimCuda, clock: ManualClock, tmp_path: Path
) -> None:
    drive(host.gpus[0], clock)
    host.gpus[0].energy_fn = None  # stuck at its initial value
    report = doctor(clock, nvml, tmp_path)
    counter = row(report, "energy_counter")
    assert counter.status == "fail"
    assert counter.value == (
        "present, but its update period cannot be measured: the energy/power reading did not "
        "change twice within 3 s; cannot measure its update period"
    )
    assert report.get("idle_power") is None
    assert report.exit_code == 1
