"""Fixtures for the doctor's tests: torch's flags restored, fast options, a simulated NVML host."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from operator_db.config import MeasureSettings
from operator_db.measure.backends import pin_backends
from tests.devices.fixtures import clock, host, nvml
from tests.devices.nvml_sim import SimCuda, SimHost


@pytest.fixture(autouse=True)
def _restore_torch() -> Iterator[None]:
    """The doctor pins torch's backend flags (and threads) in the process, as the worker does."""
    threads = torch.get_num_threads()
    yield
    pin_backends(MeasureSettings(), threads)


@pytest.fixture(autouse=True)
def _quiet_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host reads quiet at once: the doctor's checks here are not about this machine's load
    (``host_quiet`` itself is tested in tests/devices/test_noise.py)."""
    import operator_db.doctor.host as doctor_host

    monkeypatch.setattr(
        doctor_host, "quiet_window", lambda *a, **k: ([], {"steal": 0.0, "other_cpus": 0.0})
    )


@pytest.fixture
def cuda(host: SimHost, monkeypatch: pytest.MonkeyPatch) -> SimCuda:
    """torch.cuda on the simulated host, with a CUDA build's version string."""
    sim = SimCuda(host)
    sim.install(monkeypatch)
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    return sim


__all__ = ["clock", "cuda", "host", "nvml"]
