"""Shared parts of ``bench/bench_gpu.py``: the clock, the sizes of a run, a check's result.

Durations are in seconds throughout; energies in mJ or J as their names say.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["pass", "fail", "info", "skipped", "error"]
"""What a check (or a section) came to: ``info`` reports a figure that has no target."""

NO_CUDA = "skipped: no CUDA"


class Budget:
    """The benchmark's wall-clock budget, in s, counted from its creation."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.start = time.perf_counter()

    def spent_s(self) -> float:
        """Seconds since the benchmark started."""
        return time.perf_counter() - self.start

    def left_s(self) -> float:
        """Seconds left of the budget (negative once it is overrun)."""
        return self.budget_s - self.spent_s()


@dataclass(frozen=True)
class Sizes:
    """How big and how long one run's work is: the GPU's sizes, or the dry run's tiny ones."""

    matmul_n: int
    """Side of the square matmul used as the large op."""
    matmul_dtype: str
    """Its dtype (a torch attribute name: ``float16``, ``float32``)."""
    idle_windows_s: tuple[float, ...]
    """Idle energy windows, s (counter vs integrated power)."""
    load_windows_s: tuple[float, float]
    """Matmul windows, s: N calls filling the first, 2N the second (also the linearity check)."""
    load_warmup_s: float
    """Matmul run before the load windows, s (the power's rise time stays out)."""
    window_check: dict[str, Any]
    """Measure-settings overrides for the eager vs in-window time check."""
    small_numel: int
    """Elements of the small op (graph vs eager)."""
    estimate: dict[str, Any]
    """Measure-settings overrides for the estimate section (shorter than the defaults)."""
    min_case_s: float
    """A case starts only with at least this much budget left (and 1.25× the longest so far)."""
    pytest_timeout_s: float
    """The longest the ``pytest -m gpu`` subprocess may run, s."""
    threads: int | None = None
    """torch's CPU threads for the whole run (None: torch's default)."""


GPU_SIZES = Sizes(
    matmul_n=8192,
    matmul_dtype="float16",
    idle_windows_s=(5.0, 10.0),
    load_windows_s=(5.0, 10.0),
    load_warmup_s=1.0,
    window_check={"energy_windows": "timed", "trials": 2, "energy_window_s": 5.0},
    small_numel=256,
    estimate={"energy": False, "cooldown_s": 0.0, "idle_window_s": 1.0},
    min_case_s=20.0,
    pytest_timeout_s=240.0,
)
"""One GPU, the whole run in under 9 minutes. The estimate section measures time only: with
energy, every operator of an interleaved job gets 4 windows of 5 s and is timed for 3 s
(``operator_min_time_s``), about 20 minutes for ResNet-50 alone. Energy is validated in
section 2 instead."""

DRY_SIZES = Sizes(
    matmul_n=256,
    matmul_dtype="float32",
    idle_windows_s=(0.3, 0.6),
    load_windows_s=(0.3, 0.6),
    load_warmup_s=0.05,
    window_check={
        "energy_windows": "timed",
        "trials": 2,
        "energy_window_s": 0.3,
        "energy_window_min_periods": 0,
        "energy_warmup_s": 0.05,
        "max_gap_s": 0.0,
        "model_min_time_s": 0.1,
        "blocks": 5,
    },
    small_numel=256,
    estimate={
        "energy": False,
        "cooldown_s": 0.0,
        "idle_window_s": 0.05,
        "warmup_s": 0.0,
        "warmup_min_calls": 1,
        "block_min_s": 0.001,
        "blocks": 5,
        "model_min_time_s": 0.05,
        "retries_when_unstable": 0,
        # not measured until tight (the default: for up to 60 s): the kit is checked, not the
        # fake device's accuracy (MobileNetV2's tiny cases took 24-27 s each, 94 s in all; with
        # 2 s at most the eight cases 28 s, 12 s without)
        "tight_ratio": 0.0,
        "threads": 1,
    },
    min_case_s=1.0,
    pytest_timeout_s=120.0,
    threads=1,
)
"""The same sections on the CPU or the fake device, in seconds, on one CPU thread: two threads
on a shared 2-vCPU VM wait on each other's barrier and the figures become noise."""


@dataclass
class Check:
    """One check of section 2: what it compares, its target, what came out."""

    name: str
    title: str
    target: str
    status: Status = "skipped"
    reason: str | None = None
    """Why it was skipped or failed to run, or a note on what its figures mean."""
    summary: str = ""
    """One line of its main figures."""
    figures: dict[str, Any] = field(default_factory=dict)
    """Every figure, s / mJ / J / W as the keys say."""
    wall_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """Return the check as JSON-ready data."""
        return asdict(self)


def first_line(exc: BaseException) -> str:
    """Return ``Type: first line of the message`` of an exception."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def ms(seconds: float | None, digits: int = 2) -> str:
    """Format seconds as milliseconds ('-' for None)."""
    return "-" if seconds is None else f"{seconds * 1e3:.{digits}f}"


def us(seconds: float | None) -> str:
    """Format seconds as microseconds ('-' for None)."""
    return "-" if seconds is None else f"{seconds * 1e6:.2f}"


def pct(value: float | None) -> str:
    """Format a ratio as a signed percentage ('-' for None)."""
    return "-" if value is None else f"{value:+.2%}"
