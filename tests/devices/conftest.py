"""Fixtures for the device tests: a manual clock, a simulated NVML host and torch.cuda on it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.devices.nvml_sim import SimCuda, SimHost, make_nvml


class ManualClock:
    """A clock in ns that moves only when told; its ``sleep`` advances it instead of waiting."""

    def __init__(self, start_ns: int = 0) -> None:
        self.now_ns = start_ns
        self.sleeps = 0

    def __call__(self) -> int:
        return self.now_ns

    def advance_s(self, seconds: float) -> None:
        self.now_ns += round(seconds * 1e9)

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.advance_s(seconds)


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
