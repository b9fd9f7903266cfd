"""Which GPU an NvidiaDevice reads: torch's cuda:N, found in NVML by UUID, never by NVML index."""

from __future__ import annotations

from typing import Any

import pynvml as real
import pytest
import torch

from operator_db.devices import EnergyWindow, NvidiaDevice
from operator_db.errors import DeviceError, DeviceUnsupportedError
from tests.devices.clock import ManualClock
from tests.devices.nvml_sim import SimCuda, SimGpu, SimHost

UUIDS = [f"GPU-{i}{i}{i}{i}{i}{i}{i}{i}-0000-0000-0000-00000000000{i}" for i in range(4)]


@pytest.fixture
def four_gpus(host: SimHost) -> SimHost:
    """Four H100s; GPU i's counter starts at i GJ, so a read says which GPU it came from."""
    host.gpus = [
        SimGpu(uuid=uuid, energy_mj=i * 1_000_000_000, power_mw=100_000 + i)
        for i, uuid in enumerate(UUIDS)
    ]
    return host


def handles_used(mock_function: Any) -> set[str]:
    return {call.args[0].uuid for call in mock_function.call_args_list}


def test_cuda_visible_devices_3_reads_energy_from_gpu_3(
    four_gpus: SimHost, nvml: Any, cuda: SimCuda
) -> None:
    cuda.visible = [3]  # CUDA_VISIBLE_DEVICES=3: torch's cuda:0 is the host's (NVML's) GPU 3
    gpu3, gpu0 = four_gpus.gpus[3], four_gpus.gpus[0]
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.identity().device_id == UUIDS[3]
        assert gpu.identity().extra["cuda_index"] == 0
        assert gpu.identity().extra["nvml_index"] == 3
        assert gpu.energy_mj() == 3_000_000_000
        with EnergyWindow(gpu, interval_s=0.005) as window:
            gpu3.energy_mj += 4_000
            gpu0.energy_mj += 999_000  # another job on GPU 0: must not be seen
        assert gpu.torch_device() == torch.device("cuda", 0)
        assert gpu.provenance()["nvml_index"] == 3
    assert window.result is not None
    assert window.result.counter_mj == 4_000
    assert {s.power_mw for s in window.result.samples} == {100_003.0}
    nvml.nvmlDeviceGetHandleByUUID.assert_called_once_with(UUIDS[3])
    assert nvml.nvmlDeviceGetHandleByIndex.call_count == 0
    assert handles_used(nvml.nvmlDeviceGetTotalEnergyConsumption) == {UUIDS[3]}
    assert handles_used(nvml.nvmlDeviceGetFieldValues) == {UUIDS[3]}
    assert cuda.set_device_calls[-1] == 0
    assert cuda.synchronized == [torch.device("cuda", 0)] * 2  # window start and end


def test_cuda_order_differs_from_nvml_order(four_gpus: SimHost, nvml: Any, cuda: SimCuda) -> None:
    cuda.visible = [2, 0]  # CUDA_VISIBLE_DEVICES=2,0 (or CUDA's fastest-first order)
    with NvidiaDevice(1, nvml=nvml) as gpu:
        assert gpu.identity().device_id == UUIDS[0]
        assert gpu.energy_mj() == 0
        assert gpu.torch_device() == torch.device("cuda", 1)
    assert cuda.set_device_calls == [1]
    with NvidiaDevice(0, nvml=nvml) as gpu:
        assert gpu.energy_mj() == 2_000_000_000


def test_no_nvml_gpu_with_the_cuda_uuid_is_an_error_not_a_fallback(
    four_gpus: SimHost, nvml: Any, cuda: SimCuda
) -> None:
    four_gpus.fail["nvmlDeviceGetHandleByUUID"] = real.NVML_ERROR_NOT_FOUND
    with pytest.raises(DeviceError) as info:
        NvidiaDevice(0, nvml=nvml)
    assert str(info.value) == (
        f"no NVML GPU matches torch's cuda:0 (UUID {UUIDS[0]}); "
        "energy is never read from another GPU"
    )
    assert nvml.nvmlDeviceGetHandleByIndex.call_count == 0
    assert nvml.nvmlShutdown.call_count == 1


def test_nvml_answering_with_another_gpu_is_refused(
    four_gpus: SimHost, nvml: Any, cuda: SimCuda
) -> None:
    nvml.nvmlDeviceGetHandleByUUID.side_effect = lambda uuid: four_gpus.gpus[1]
    with pytest.raises(DeviceError, match=r"refusing to read another GPU$"):
        NvidiaDevice(0, nvml=nvml)
    assert nvml.nvmlShutdown.call_count == 1


def test_other_errors_finding_the_gpu_propagate(host: SimHost, nvml: Any, cuda: SimCuda) -> None:
    host.fail["nvmlDeviceGetHandleByUUID"] = real.NVML_ERROR_GPU_IS_LOST
    with pytest.raises(DeviceError, match=r"the GPU is lost .*\(NVML_ERROR_GPU_IS_LOST\)$"):
        NvidiaDevice(0, nvml=nvml)


def test_without_cuda_the_device_is_refused(
    monkeypatch: pytest.MonkeyPatch, nvml: Any, cuda: SimCuda
) -> None:
    cuda.available = False
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(DeviceUnsupportedError) as info:
        NvidiaDevice(0, nvml=nvml)
    assert str(info.value).startswith("an NVIDIA device needs torch with CUDA: torch ")
    assert "is a CPU-only build (no CUDA)" in str(info.value)
    assert nvml.nvmlInit.call_count == 0


def test_nvml_only_reads_nvml_index_and_cannot_be_measured_on(
    four_gpus: SimHost, nvml: Any, cuda: SimCuda, clock: ManualClock
) -> None:
    cuda.available = False  # no torch is asked
    wall = ManualClock(1_000_000_000)
    with NvidiaDevice(2, nvml=nvml, nvml_only=True, wall_clock_us=lambda: wall() // 1000) as gpu:
        assert gpu.identity().device_id == UUIDS[2]
        assert gpu.identity().extra["cuda_index"] is None
        assert gpu.identity().extra["nvml_index"] == 2
        assert gpu.energy_mj() == 2_000_000_000
        with EnergyWindow(gpu, interval_s=0.005) as window:  # synchronize: nothing to wait for
            four_gpus.gpus[2].energy_mj += 10
        for call in (gpu.torch_device, gpu.activate):
            with pytest.raises(DeviceUnsupportedError) as info:
                call()
            assert str(info.value) == (
                "NVIDIA GPU 2 was opened by NVML index only (nvml_only): it has no torch "
                "device, so nothing can be measured on it"
            )
    assert window.result is not None and window.result.counter_mj == 10
    assert nvml.nvmlDeviceGetHandleByUUID.call_count == 0
    assert cuda.set_device_calls == [] and cuda.synchronized == []
