"""Real-GPU checks of the NVIDIA path (``pytest -m gpu``).

Skipped, with the reason, where NVML, a GPU or torch's CUDA is absent; ``OPDB_REQUIRE_GPU=1``
makes that a failure. These print what they measure (run with ``-s`` to see it): the counter's
and field 186's update periods and, for 5 s windows, counter energy against integrated field-186
power (METHODOLOGY §1).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import torch

from operator_db.devices import EnergyWindow, NvidiaDevice, open_device
from tests.helpers import require_gpu, skip_without_gpu

pytestmark = pytest.mark.gpu

WINDOW_S = 5.0
MAX_DISAGREEMENT = 0.05  # "agree within a few percent on windows of several seconds"


@pytest.fixture(scope="module")
def gpu() -> Iterator[NvidiaDevice]:
    require_gpu()
    device = NvidiaDevice(0)
    yield device
    device.close()


def _busy(device: NvidiaDevice, seconds: float) -> None:
    """Keep the GPU busy with matmuls for ``seconds``."""
    dev = device.torch_device()
    a = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
    b = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
    c = torch.empty_like(a)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            torch.matmul(a, b, out=c)
        device.synchronize()


def test_identity(gpu: NvidiaDevice) -> None:
    ident = gpu.identity()
    print(f"\n{ident}")
    assert ident.name
    assert ident.device_id.startswith("GPU-")
    assert ident.driver_version
    assert ident.nvml_version
    assert ident.memory_bytes and ident.memory_bytes > 0


def test_open_device_auto_picks_the_gpu(gpu: NvidiaDevice) -> None:
    with open_device("auto") as device:
        assert isinstance(device, NvidiaDevice)
        assert device.identity().device_id == gpu.identity().device_id  # both are cuda:0


def test_torch_index_matches_uuid(gpu: NvidiaDevice) -> None:
    dev = gpu.torch_device()
    assert torch.cuda.current_device() == dev.index  # torch_device() made it current
    props = torch.cuda.get_device_properties(dev)
    assert str(props.uuid).removeprefix("GPU-") == gpu.identity().device_id.removeprefix("GPU-")
    print(f"\n{dev} is NVML GPU {gpu.identity().extra['nvml_index']} ({props.name})")


def test_counter_update_period(gpu: NvidiaDevice) -> None:
    if gpu.energy_unavailable_reason() is not None:
        skip_without_gpu(gpu.energy_unavailable_reason() or "")
    period = gpu.counter_update_period_s()
    print(f"\ncounter update period: {period * 1000 if period else None} ms")
    assert period is not None
    assert 0.001 <= period <= 1.0  # seen 10-100 ms depending on GPU


def test_power_update_period(gpu: NvidiaDevice) -> None:
    if gpu.power_scope() is None:
        skip_without_gpu(gpu.power_unavailable_reason() or "no instant power")
    period = gpu.power_update_period_s()
    print(f"\nfield 186 update period: {period * 1000 if period else None} ms")
    assert period is not None
    assert 0.001 <= period <= 1.0


def test_energy_and_power_scopes_match(gpu: NvidiaDevice) -> None:
    """With C2C mode on (Grace Hopper) the counter covers the module, and so must the power."""
    print(f"\nC2C mode {gpu.c2c_mode()}, energy {gpu.energy_scope()}, power {gpu.power_scope()}")
    if gpu.energy_scope() is None:
        skip_without_gpu(gpu.energy_unavailable_reason() or "no energy counter")
    assert gpu.energy_scope() == ("MODULE" if gpu.c2c_mode() else "GPU")
    if gpu.c2c_mode():
        assert gpu.power_scope() in ("MODULE", None)


def test_violation_counters(gpu: NvidiaDevice) -> None:
    counters = gpu.violation_counters_us()
    print(f"\nviolation counters (µs): {counters}")
    assert all(isinstance(v, int) and v >= 0 for v in counters.values())
    assert all(k.endswith(("_violation_us", "_reference_us")) for k in counters)


def test_instant_power_is_field_186(gpu: NvidiaDevice) -> None:
    assert gpu.power_scope() in ("GPU", "MODULE"), gpu.power_unavailable_reason()
    sample = gpu.power_mw()
    assert sample is not None
    print(f"\npower {sample.power_mw / 1000:.1f} W, scope {gpu.power_scope()}")
    assert 1_000 < sample.power_mw < 2_000_000
    # NVML stamps field values with host time (µs since the epoch).
    assert abs(sample.timestamp_us - gpu.timestamp_us()) < 5_000_000


def test_telemetry(gpu: NvidiaDevice) -> None:
    t = gpu.telemetry()
    print(f"\n{t.as_dict()}")
    assert t.sm_clock_mhz is not None
    assert t.mem_clock_mhz is not None
    assert t.temperature_c is not None
    assert t.power_limit_w is not None


@pytest.mark.parametrize("load", ["idle", "matmul"])
def test_counter_agrees_with_integrated_power_on_5s_windows(gpu: NvidiaDevice, load: str) -> None:
    if gpu.energy_unavailable_reason() is not None or gpu.power_scope() is None:
        skip_without_gpu("needs both the energy counter and instant power")
    if load == "matmul":
        _busy(gpu, 1.0)  # warm up: skip the power rise time
    with EnergyWindow(gpu) as window:
        if load == "matmul":
            _busy(gpu, WINDOW_S)
        else:
            time.sleep(WINDOW_S)
    result = window.result
    assert result is not None
    print(
        f"\n{load}: counter {result.counter_mj} mJ, integrated {result.integrated_mj:.0f} mJ, "
        f"disagreement {result.disagreement:+.2%}, {len(result.samples)} samples, "
        f"mean {result.mean_power_w:.1f} W over {result.duration_s:.2f} s"
    )
    assert result.counter_mj is not None and result.counter_mj > 0
    assert result.disagreement is not None
    assert abs(result.disagreement) <= MAX_DISAGREEMENT
