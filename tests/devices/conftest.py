"""Fixtures for the device tests: a manual clock, a simulated NVML host and torch.cuda on it."""

from __future__ import annotations

from tests.devices.fixtures import clock, cuda, host, nvml

__all__ = ["clock", "cuda", "host", "nvml"]
