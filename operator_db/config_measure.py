"""How one configuration (or a whole model) is timed and its energy read: ``OPDB_MEASURE__*``.

``operator_db.config.Settings.measure`` holds one :class:`MeasureSettings`; ``operator_db.config``
re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


@dataclass(frozen=True)
class EnergyPlan:
    """The energy windows of one configuration: method, least length (s), trials, warm-up (s)."""

    method: Literal["aligned", "timed"]
    window_s: float
    trials: int
    warmup_s: float


ENERGY_PLANS: dict[str, EnergyPlan] = {
    "aligned": EnergyPlan("aligned", window_s=0.25, trials=2, warmup_s=0.3),
    "timed": EnergyPlan("timed", window_s=5.0, trials=4, warmup_s=0.5),
}
"""Each method's defaults. Timed: METHODOLOGY §1's 5 s × 4. Aligned: the shortest windows and
fewest trials that agree with 5 s × 4 within 1 % (median) and 2 % (worst) on the fake device's
model of the counter (97 ms updates with jitter, whole mJ, lag up to 150 ms, integrating or
sampling 25 ms of each period; a steady power): 0.44 % median, 1.55 % worst
(bench/bench_energy_windows.py, docs/measurement.md); its warm-up outlasts a 150 ms lag and the
power's rise. Not yet checked on a GPU (bench/bench_energy.py)."""


class MeasureSettings(BaseModel):
    """How one configuration (or a whole model) is timed and its energy read.

    Set from the environment as ``OPDB_MEASURE__<FIELD>`` (e.g. ``OPDB_MEASURE__TRIALS=2``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    warmup_s: float = Field(
        default=0.025, ge=0, description="Warm-up before timing, in s (METHODOLOGY §3: >= 25 ms)."
    )
    warmup_min_calls: int = Field(default=3, ge=1, description="At least this many warm-up calls.")
    block_min_s: float = Field(
        default=0.01, gt=0, description="Each timed block lasts at least this long, in s."
    )
    max_calls_per_block: int = Field(default=100_000, ge=1)
    blocks: int = Field(default=20, ge=3, description="Timed blocks (raw samples kept).")
    model_min_time_s: float = Field(
        default=3.0,
        ge=0,
        description="A whole model is timed over at least this long (more blocks), in s, so a "
        "burst of machine noise cannot decide its median.",
    )
    max_blocks: int = Field(default=1000, ge=3, description="Upper bound on timed blocks.")
    tight_ratio: float = Field(
        default=0.01,
        ge=0,
        description="Measure until tight: keep timing blocks (interleaved: rounds of the targets "
        "not yet tight) until the 95 % interval of the median is within this share of it "
        "(half-width / median), or tight_budget_s runs out (then flagged 'loose'). 0: off.",
    )
    peak_min_time_s: float = Field(
        default=0.5,
        gt=0,
        description="Each kernel of `opdb peaks` (a matmul size, a convolution, a copy per "
        "memory level) is timed over this long, in s, after a quarter of it warming up.",
    )
    tight_budget_s: float = Field(
        default=60.0,
        ge=0,
        description="The most seconds a job spends measuring until tight, past its blocks.",
    )
    hollow_run: bool = Field(
        default=True,
        description="Time a full-model job's hollow run too (the time between operators an "
        "estimate adds); `opdb study` without --operators turns it off: no estimate uses it.",
    )
    replay: bool = Field(
        default=True,
        description="In an interleaved model job on a CPU (inference, a spec with its call "
        "order), time the operators in a replay of the model's calls too: the figures a CPU "
        "estimate composes (docs/measurement.md, 'Replay in the model's order').",
    )
    operator_min_time_s: float | None = Field(
        default=None,
        ge=0,
        description="An operator is timed over at least this long, in s. None: where energy is "
        "measured, as long as its energy windows together (trials × window, at most "
        "model_min_time_s), so that its time and its energy are read in one regime (clocks, "
        "heat); elsewhere only `blocks` blocks.",
    )
    noisy_iqr_ratio: float = Field(
        default=0.10,
        description="Flag 'noisy' when IQR/median exceeds this (torch.utils.benchmark).",
    )
    unstable_iqr_ratio: float = Field(
        default=0.25, description="Re-time, then flag 'unstable', when IQR/median exceeds this."
    )
    retries_when_unstable: int = Field(default=2, ge=0)
    cuda_graph_below_s: float = Field(
        default=50e-6, ge=0, description="Also time as a CUDA graph when a call is faster, in s."
    )
    graph_unroll: int = Field(default=20, ge=1, description="Calls captured per CUDA graph.")
    model_graph: bool = Field(
        default=True,
        description="On a GPU, also time a whole model's forward (inference) captured as one "
        "CUDA graph, whatever its time: the graph-mode run that `--timing graph` estimates are "
        "compared with, as serving stacks run batch 1.",
    )
    energy: bool = Field(default=True, description="Measure energy where the device can.")
    energy_windows: Literal["aligned", "timed"] = Field(
        default="aligned",
        description="aligned: each energy window opens and closes on an update of the energy "
        "counter (polled between short chunks of calls), so that its edges err by a chunk, not an "
        "update period, and short windows are exact (docs/measurement.md); timed: windows opened "
        "and closed on the clock, which must then be long (5 s, 50 counter periods) — the "
        "method before, kept as a check and for counters whose updates cannot be seen.",
    )
    energy_window_s: float | None = Field(
        default=None,
        ge=0,
        description="Each energy window lasts at least this long, in s (§1). None: the method's "
        "own (aligned 0.25 s, timed 5 s; see EnergyPlan).",
    )
    energy_window_min_calls: int = Field(
        default=32, ge=1, description="And holds >= this many calls."
    )
    energy_window_min_periods: int = Field(
        default=50,
        ge=0,
        description="A timed window also lasts >= this many energy-counter update periods, so "
        "that the counter's lag of up to one period at its end is at most 2 % of it (§1).",
    )
    energy_align_poll_s: float = Field(
        default=0.001,
        gt=0,
        description="Aligned windows: the calls run between two reads of the counter, in s.",
    )
    energy_warmup_s: float | None = Field(
        default=None,
        ge=0,
        description="Run the call this long before each energy window opens, in s, so that the "
        "window holds neither the power's rise time nor, through the counter's lag, the idle "
        "gap before it (§1). None: the method's own (aligned 0.3 s, timed 0.5 s).",
    )
    window_time_tolerance: float = Field(
        default=0.03,
        ge=0,
        description="Flag 'window_time_differs' when the per-call time inside the energy windows "
        "differs from the eager median by more (relative).",
    )
    trials: int | None = Field(
        default=None,
        ge=1,
        description="Energy windows per configuration. None: the method's own (aligned 2, "
        "timed 4).",
    )
    max_gap_s: float = Field(
        default=0.1, ge=0, description="Random idle gap before each trial, uniform in [0, this] s."
    )
    idle_window_s: float = Field(
        default=5.0, ge=0, description="Idle-power baseline window at worker start, in s."
    )
    idle_every_s: float = Field(
        default=600.0, gt=0, description="Re-measure the idle baseline this often, in s."
    )
    cooldown_s: float = Field(
        default=5.0,
        ge=0,
        description="Longest pause between jobs that measure energy, in s (`fixed`: always it).",
    )
    cooldown: Literal["adaptive", "fixed"] = Field(
        default="adaptive",
        description="adaptive: pause only while the device is warmer than at its idle baseline "
        "(by more than cooldown_margin_c) or its clocks are held down, up to cooldown_s; fixed: "
        "always cooldown_s (where the temperature cannot be read, adaptive does that too).",
    )
    cooldown_margin_c: float = Field(
        default=2.0, ge=0, description="Degrees above the idle baseline that need a cooldown."
    )
    disagreement_limit: float = Field(
        default=0.05,
        description="Flag when counter and integrated energy differ by more (relative).",
    )
    threads: int | None = Field(
        default=None,
        ge=1,
        description="CPU threads (torch.set_num_threads); None keeps the count torch had when the "
        "worker started. Restored before each job.",
    )
    # torch's backend flags, pinned at worker start and before each job and recorded in every
    # result's provenance (measure/backends.py); the defaults are torch's own (2.13).
    matmul_allow_tf32: bool = Field(
        default=False,
        description="torch.backends.cuda.matmul.allow_tf32: TF32 in float32 matmuls (Ampere and "
        "newer). One torch state with float32_matmul_precision: True exactly when that is "
        "'high' or 'medium'.",
    )
    float32_matmul_precision: Literal["highest", "high", "medium"] = Field(
        default="highest",
        description="torch.set_float32_matmul_precision: 'highest' keeps float32 matmuls in "
        "float32; 'high' allows TF32; 'medium' also bfloat16 (oneDNN).",
    )
    cudnn_allow_tf32: bool = Field(
        default=True, description="torch.backends.cudnn.allow_tf32: TF32 in cuDNN convolutions."
    )
    cudnn_enabled: bool = Field(default=True, description="torch.backends.cudnn.enabled.")
    cudnn_benchmark: bool = Field(
        default=False,
        description="torch.backends.cudnn.benchmark: time cuDNN's algorithms per shape and keep "
        "the fastest.",
    )
    cudnn_deterministic: bool = Field(
        default=False, description="torch.backends.cudnn.deterministic: deterministic algorithms."
    )
    sdp_flash: bool = Field(
        default=True, description="Scaled dot-product attention may use FlashAttention."
    )
    sdp_mem_efficient: bool = Field(
        default=True,
        description="Scaled dot-product attention may use the memory-efficient kernel.",
    )
    sdp_math: bool = Field(
        default=True, description="Scaled dot-product attention may use the math (reference) path."
    )
    sdp_cudnn: bool = Field(
        default=True, description="Scaled dot-product attention may use cuDNN's kernel."
    )
    deterministic_algorithms: bool = Field(
        default=False,
        description="torch.use_deterministic_algorithms: deterministic kernels only (errors for "
        "ops that have none).",
    )
    cache_mode: Literal["warm", "cold"] = Field(
        default="warm",
        description="warm: inputs allocated once and reused, caches as the last call left them "
        "(METHODOLOGY §3). cold: the device's caches are flushed before every timed call (a "
        "buffer larger than the last-level cache is written, outside the timed span), as "
        "Triton's do_bench does; no energy is measured then (the flushes would be counted).",
    )
    cold_flush_bytes: int | None = Field(
        default=None,
        gt=0,
        description="Cold mode: bytes written to flush the caches. None: 256 MiB on a GPU "
        "(Triton's choice; an H100 has 50 MB of L2), twice the last-level cache on a CPU.",
    )
    seed: int = Field(default=0, description="Seed of inputs and of the random trial gaps.")
    nvtx: bool = Field(
        default=False,
        description="CUDA: push an NVTX range named after each configuration's key around one "
        "extra call of it after its warm-up, outside the timed blocks, so that Nsight Compute "
        "(`ncu --nvtx --nvtx-include`) profiles that one call (docs/ncu.md). Does nothing on a "
        "CPU or where torch has no NVTX.",
    )
    retain_freed_memory: bool = Field(
        default=True,
        description="CPU: keep freed heap memory in the process (glibc mallopt) so that operators "
        "and whole models alike reuse it, as the CUDA caching allocator does, instead of paying "
        "page faults for fresh output buffers (docs/measurement.md).",
    )
    huge_pages: bool = Field(
        default=True,
        description="CPU: measuring commands start with glibc's heap on transparent huge pages "
        "(GLIBC_TUNABLES=glibc.malloc.hugetlb=1), so that a model and its operators' replay "
        "pay alike for their pages (docs/measurement.md); read at the process's start, from "
        "OPDB_MEASURE__HUGE_PAGES.",
    )

    def energy_plan(self) -> EnergyPlan:
        """Return the energy windows these settings ask for: the method's defaults where unset."""
        base = ENERGY_PLANS[self.energy_windows]
        return EnergyPlan(
            method=self.energy_windows,
            window_s=base.window_s if self.energy_window_s is None else self.energy_window_s,
            trials=base.trials if self.trials is None else self.trials,
            warmup_s=base.warmup_s if self.energy_warmup_s is None else self.energy_warmup_s,
        )

    @model_validator(mode="after")
    def _one_tf32_state(self) -> MeasureSettings:
        """matmul_allow_tf32 and float32_matmul_precision are one torch state: they must agree."""
        if self.matmul_allow_tf32 != (self.float32_matmul_precision != "highest"):
            raise ValueError(
                f"matmul_allow_tf32={self.matmul_allow_tf32} contradicts float32_matmul_precision="
                f"{self.float32_matmul_precision!r}: torch allows TF32 in float32 matmuls exactly "
                "when the precision is 'high' or 'medium'"
            )
        return self
