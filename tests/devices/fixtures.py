"""The simulated NVML host's fixtures, shared by the device and the doctor tests."""

from __future__ import annotations

from typing import Any

import pytest

from tests.devices.clock import ManualClock
from tests.devices.nvml_sim import SimCuda, SimHost, make_nvml


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def host() -> SimHost:
    return SimHost()


@pytest.fixture
def nvml(host: SimHost) -> Any:
    return make_nvml(host)


@pytest.fixture
def cuda(host: SimHost, monkeypatch: pytest.MonkeyPatch) -> SimCuda:
    """torch.cuda seeing every GPU of ``host`` in NVML order (set ``visible`` to hide some)."""
    sim = SimCuda(host)
    sim.install(monkeypatch)
    return sim
