"""A GPU as the cross-device predictor sees it: its spec sheet, and the training GPU nearest it.

Every fact comes from the chips table (``roofline/peaks.yaml``), never from a measurement, so that
a GPU nobody has measured has them all. Two tables of the CUDA programming guide that the spec
sheet leaves out are kept here, by compute capability: resident threads per SM and shared memory
per SM.

"Nearest" is the distance in standardized (compute capability, HBM or not, board power per FP32
TFLOP/s) between two GPUs: the leave-one-GPU-out study (``research/cross-device``) found that
which GPU's efficiency carries over follows the generation, the memory technology and the power
budget, not the size (an L4 is nearest a T4, an A100 80 GB nearest an A100 40 GB).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from operator_db.roofline.chips import chip_spec

MAX_THREADS_PER_SM: Mapping[str, int] = {
    "6.0": 2048,
    "6.1": 2048,
    "7.0": 2048,
    "7.5": 1024,
    "8.0": 2048,
    "8.6": 1536,
    "8.7": 2048,
    "8.9": 1536,
    "9.0": 2048,
}
"""Maximum resident threads per SM by compute capability (CUDA C++ Programming Guide, Table 21)."""

NEAREST_BY = ("compute_capability", "hbm", "watts_per_tflops")
"""The facts the nearest training GPU is found by (standardized, Euclidean)."""


@dataclass(frozen=True)
class GpuFacts:
    """One GPU's spec sheet, as the predictor reads it (units in each name)."""

    name: str
    """The device kind's name."""
    sms: int
    cores_per_sm: int
    clock_mhz: float
    flops_per_s: float
    """FP32 peak, FLOP/s."""
    bytes_per_s: float
    """DRAM bandwidth, bytes/s."""
    l2_bytes: float
    compute_capability: float
    hbm: bool
    board_power_w: float
    max_threads_per_sm: int

    @property
    def watts_per_tflops(self) -> float:
        """Board power per FP32 TFLOP/s, W: how much of its peak a power budget lets it hold."""
        return self.board_power_w / (self.flops_per_s / 1e12)

    def fact(self, name: str) -> float:
        """Return one of ``NEAREST_BY`` as a number."""
        if name == "hbm":
            return float(self.hbm)
        return float(getattr(self, name))


def gpu_facts(kind_name: str, dtype: str = "float32") -> GpuFacts | None:
    """Return the spec sheet of the GPU ``kind_name`` names, or None.

    None where the chips table has no such chip (an exact or containing match), the chip is not
    an NVIDIA GPU, or a fact the predictor needs is missing (SMs, cores, clock, L2, compute
    capability, power, memory type, the ``dtype`` peak).
    """
    chip = chip_spec(kind_name)
    if chip is None or chip.vendor != "NVIDIA" or "gpu" not in chip.category:
        return None
    cc = getattr(chip, "compute_capability", None)
    power = getattr(chip, "board_power_w", None)
    memory = getattr(chip, "memory_type", None)
    peak = chip.peak_flops_per_s.get(dtype)  # type: ignore[call-overload]
    needed = (chip.sms, chip.cores_per_sm, chip.boost_clock_mhz, chip.l2_cache_bytes, cc, power)
    if peak is None or memory is None or any(v is None for v in needed):
        return None
    return GpuFacts(
        name=kind_name,
        sms=int(chip.sms or 0),
        cores_per_sm=int(chip.cores_per_sm or 0),
        clock_mhz=float(chip.boost_clock_mhz or 0),
        flops_per_s=float(peak),
        bytes_per_s=float(chip.memory_bandwidth_bytes_per_s),
        l2_bytes=float(chip.l2_cache_bytes or 0),
        compute_capability=float(str(cc)),
        hbm=memory == "HBM",
        board_power_w=float(power or 0),
        max_threads_per_sm=MAX_THREADS_PER_SM.get(str(cc), 2048),
    )


def distances(target: GpuFacts, others: Sequence[GpuFacts]) -> dict[str, float]:
    """Return each of ``others``' distance to ``target`` in standardized ``NEAREST_BY`` facts.

    Each fact is standardized over ``others`` and ``target`` together (a fact equal on all of
    them counts for nothing).
    """
    everyone = [*others, target]
    scale: dict[str, tuple[float, float]] = {}
    for name in NEAREST_BY:
        values = [g.fact(name) for g in everyone]
        mean = sum(values) / len(values)
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / max(len(values) - 1, 1))
        scale[name] = (mean, sd if sd > 0 else 1.0)

    def z(g: GpuFacts, name: str) -> float:
        mean, sd = scale[name]
        return (g.fact(name) - mean) / sd

    return {
        g.name: math.sqrt(sum((z(g, n) - z(target, n)) ** 2 for n in NEAREST_BY)) for g in others
    }


def nearest(target: GpuFacts, others: Sequence[GpuFacts]) -> str:
    """Return the name of the GPU of ``others`` nearest ``target`` (itself where it is one)."""
    if any(g.name == target.name for g in others):
        return target.name
    found = distances(target, others)
    return min(found, key=lambda name: (found[name], name))
