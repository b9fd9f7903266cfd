"""Real-GPU checks of the NVIDIA path (``pytest -m gpu``); skipped where NVML or a GPU is absent.

These print what they measure (run with ``-s`` to see it): the counter's update period and, for
5 s windows, counter energy against integrated field-186 power (METHODOLOGY §1).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import torch

from operator_db.devices import EnergyWindow, NvidiaDevice, nvml_available, open_device
from operator_db.devices.cuda import cuda_unavailable_reason

pytestmark = pytest.mark.gpu

WINDOW_S = 5.0
MAX_DISAGREEMENT = 0.05  # "agree within a few percent on windows of several seconds"


@pytest.fixture(scope="module")
def gpu() -> Iterator[NvidiaDevice]:
    ok, reason = nvml_available()
    if not ok:
        pytest.skip(reason)
    cuda_reason = cuda_unavailable_reason()
    if cuda_reason is not None:  # an NvidiaDevice is torch's cuda:N: it needs CUDA
        pytest.skip(cuda_reason)
    device = NvidiaDevice(0)
    yield device
    device.close()


def _busy(device: NvidiaDevice, seconds: float) -> None:
    """Keep the GPU busy with matmuls for ``seconds`` (idle wait where torch has no CUDA)."""
    if not torch.cuda.is_available():
        time.sleep(seconds)
        return
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
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    props = torch.cuda.get_device_properties(gpu.torch_device())
    assert str(props.uuid).removeprefix("GPU-") == gpu.identity().device_id.removeprefix("GPU-")


def test_counter_update_period(gpu: NvidiaDevice) -> None:
    if gpu.energy_unavailable_reason() is not None:
        pytest.skip(gpu.energy_unavailable_reason() or "")
    period = gpu.counter_update_period_s()
    print(f"\ncounter update period: {period * 1000 if period else None} ms")
    assert period is not None
    assert 0.001 <= period <= 1.0  # seen 10-100 ms depending on GPU


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
        pytest.skip("needs both the energy counter and instant power")
    if load == "matmul" and not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
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
