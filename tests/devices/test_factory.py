"""open_device: specs, auto selection, clear refusals; the package stays off the database."""

from __future__ import annotations

import ast
import logging
import sys
from pathlib import Path
from typing import Any

import pynvml as real
import pytest
import torch

import operator_db
from operator_db.config import Settings
from operator_db.devices import CpuDevice, FakeDevice, NvidiaDevice, open_device, parse_device_spec
from operator_db.errors import ConfigurationError, DeviceUnsupportedError
from tests.devices.nvml_sim import SimCuda, SimGpu, SimHost
from tests.helpers import run_cli

CPU_ONLY_TORCH = (
    f"an NVIDIA device needs torch with CUDA: torch {torch.__version__} is a CPU-only build "
    "(no CUDA); install a CUDA build of torch to measure on an NVIDIA GPU"
)


@pytest.fixture
def cpu_only_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch as a CPU-only build has it: no CUDA at all."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("auto", ("auto", None)),
        ("cpu", ("cpu", None)),
        (" Fake ", ("fake", None)),
        ("nvidia", ("nvidia", None)),
        ("gpu", ("nvidia", None)),
        ("cuda:1", ("nvidia", 1)),
        ("nvidia:3", ("nvidia", 3)),
    ],
)
def test_parse_device_spec(spec: str, parsed: tuple[str, int | None]) -> None:
    assert parse_device_spec(spec) == parsed


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tpu", "unknown device 'tpu'; expected auto, cpu, nvidia[:N], cuda[:N] or fake"),
        ("cuda:x", "unknown device 'cuda:x'; expected auto, cpu, nvidia[:N], cuda[:N] or fake"),
        ("cpu:1", "device 'cpu:1': only nvidia/cuda devices take an index"),
    ],
)
def test_parse_device_spec_rejects(spec: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_device_spec(spec)
    assert str(info.value) == message


@pytest.mark.usefixtures("cuda")
def test_nvidia_without_nvidia_ml_py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(DeviceUnsupportedError) as info:
        open_device("nvidia")
    assert str(info.value) == (
        "NVML unavailable: nvidia-ml-py is not installed (pip install 'operator-db[gpu]')"
    )


@pytest.mark.usefixtures("cuda")
def test_nvidia_without_driver(monkeypatch: pytest.MonkeyPatch, host: SimHost, nvml: Any) -> None:
    host.fail["nvmlInit"] = real.NVML_ERROR_LIBRARY_NOT_FOUND
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with pytest.raises(DeviceUnsupportedError) as info:
        open_device("cuda:0")
    assert str(info.value).startswith("NVML unavailable: NVML could not initialise: ")


@pytest.mark.usefixtures("cpu_only_torch")
def test_nvidia_on_a_cpu_only_torch_fails_naming_the_cause(
    monkeypatch: pytest.MonkeyPatch, nvml: Any
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", nvml)  # NVML works and sees a GPU
    for spec in ("nvidia", "cuda:0", "gpu"):
        with pytest.raises(DeviceUnsupportedError) as info:
            open_device(spec)
        assert str(info.value) == CPU_ONLY_TORCH
    assert nvml.nvmlInit.call_count == 0  # refused before NVML is touched


def test_nvidia_with_a_cuda_torch_that_sees_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(DeviceUnsupportedError) as info:
        open_device("nvidia")
    assert str(info.value) == (
        f"an NVIDIA device needs torch with CUDA: torch {torch.__version__} (CUDA 12.4) sees no "
        "usable GPU (no or too old NVIDIA driver, or no GPU visible; CUDA_VISIBLE_DEVICES='')"
    )


@pytest.mark.usefixtures("cpu_only_torch")
def test_cli_with_nvidia_on_a_cpu_only_torch_is_one_line(
    monkeypatch: pytest.MonkeyPatch, nvml: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    result = run_cli(capsys, "worker", "--device", "nvidia", "--until-idle")
    assert result.code == 1
    assert result.err == f"error: {CPU_ONLY_TORCH}\n"


def test_auto_is_cpu_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with open_device("auto") as device:
        assert isinstance(device, CpuDevice)


def test_auto_is_nvidia_with_a_gpu(
    monkeypatch: pytest.MonkeyPatch, nvml: Any, cuda: SimCuda
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with open_device("auto") as device:
        assert isinstance(device, NvidiaDevice)
        assert device.kind_name() == "NVIDIA H100 80GB HBM3"
    assert nvml.nvmlInit.call_count == 2  # nvml_available(), then the device
    assert nvml.nvmlShutdown.call_count == 2


@pytest.mark.usefixtures("cpu_only_torch")
def test_auto_is_cpu_where_nvml_sees_a_gpu_but_torch_has_no_cuda(
    monkeypatch: pytest.MonkeyPatch, nvml: Any, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with (
        caplog.at_level(logging.WARNING, logger="operator_db.devices.factory"),
        open_device("auto") as device,
    ):
        assert isinstance(device, CpuDevice)
    assert nvml.nvmlDeviceGetHandleByUUID.call_count == 0
    assert nvml.nvmlDeviceGetHandleByIndex.call_count == 0
    assert caplog.messages == [
        "device auto: NVML sees 1 NVIDIA GPU(s), driver 550.54.15, but torch "
        f"{torch.__version__} is a CPU-only build (no CUDA); install a CUDA build of torch to "
        "measure on an NVIDIA GPU; using the CPU"
    ]


def test_index_argument_and_spec_index_are_torch_indices(
    monkeypatch: pytest.MonkeyPatch, host: SimHost, nvml: Any, cuda: SimCuda
) -> None:
    host.gpus.append(SimGpu(name="NVIDIA H100 PCIe", uuid="GPU-second"))
    cuda.visible = [1, 0]  # CUDA_VISIBLE_DEVICES=1,0: cuda:0 is NVML's GPU 1
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with open_device("nvidia", index=0) as device:
        assert device.identity().device_id == "GPU-second"
    with open_device("cuda:1", index=0) as device:  # the spec's index wins
        assert device.identity().device_id == "GPU-01234567-89ab-cdef-0123-456789abcdef"
        assert device.torch_device() == torch.device("cuda", 1)


def test_setting_selects_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    with open_device(settings=Settings(device="fake", fake_power_w=1.5)) as device:
        assert isinstance(device, FakeDevice)
        assert device.power_mw() is not None
    with open_device(settings=Settings(device="cpu")) as device:
        assert isinstance(device, CpuDevice)
    monkeypatch.setenv("OPDB_DEVICE", "bogus")
    with pytest.raises(ConfigurationError, match="unknown device 'bogus'"):
        open_device()


def _project_imports(module: str) -> set[str]:
    """Every module ``module`` imports, following imports inside operator_db (static: no import)."""
    root = Path(operator_db.__file__).parent.parent
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = root / Path(*name.split("."))
        source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        if not source.exists():
            continue
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                found = [node.module]
            else:
                continue
            for imported in found:
                if imported.startswith("operator_db"):
                    todo.append(imported)
                else:
                    seen.add(imported)
    return seen


def test_devices_package_does_not_import_the_database() -> None:
    imported = _project_imports("operator_db.devices")
    assert "operator_db.devices.nvidia" in imported  # the walk follows the package
    assert "pynvml" not in imported  # imported lazily, by importlib
    assert (
        sorted(
            m for m in imported if m.split(".")[0] == "sqlalchemy" or m.startswith("operator_db.db")
        )
        == []
    )
