"""A manual clock for device tests."""

from __future__ import annotations


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
