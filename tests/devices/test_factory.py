"""open_device: specs, auto selection, clear refusals; the package stays off the database."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import pynvml as real
import pytest

import operator_db
from operator_db.config import Settings
from operator_db.devices import CpuDevice, FakeDevice, NvidiaDevice, open_device, parse_device_spec
from operator_db.errors import ConfigurationError, DeviceUnsupportedError
from tests.devices.nvml_sim import SimHost


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


def test_nvidia_without_nvidia_ml_py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(DeviceUnsupportedError) as info:
        open_device("nvidia")
    assert str(info.value) == (
        "NVML unavailable: nvidia-ml-py is not installed (pip install 'operator-db[gpu]')"
    )


def test_nvidia_without_driver(monkeypatch: pytest.MonkeyPatch, host: SimHost, nvml: Any) -> None:
    host.fail["nvmlInit"] = real.NVML_ERROR_LIBRARY_NOT_FOUND
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with pytest.raises(DeviceUnsupportedError) as info:
        open_device("cuda:0")
    assert str(info.value).startswith("NVML unavailable: NVML could not initialise: ")


def test_auto_is_cpu_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with open_device("auto") as device:
        assert isinstance(device, CpuDevice)


def test_auto_is_nvidia_with_a_gpu(monkeypatch: pytest.MonkeyPatch, nvml: Any) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with open_device("auto") as device:
        assert isinstance(device, NvidiaDevice)
        assert device.kind_name() == "NVIDIA H100 80GB HBM3"
    assert nvml.nvmlInit.call_count == 2  # nvml_available(), then the device
    assert nvml.nvmlShutdown.call_count == 2


def test_index_argument_and_spec_index(
    monkeypatch: pytest.MonkeyPatch, host: SimHost, nvml: Any
) -> None:
    from tests.devices.nvml_sim import SimGpu

    host.gpus.append(SimGpu(name="NVIDIA H100 PCIe", uuid="GPU-second"))
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with open_device("nvidia", index=1) as device:
        assert device.identity().device_id == "GPU-second"
    with open_device("cuda:1", index=0) as device:  # the spec's index wins
        assert device.identity().device_id == "GPU-second"


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
