"""Attainable peaks of a device: a large matmul per dtype (FLOP/s) and a large copy (bytes/s).

The Empirical Roofline Toolkit's idea (METHODOLOGY §5): the most a kernel that does nothing but
compute (or move memory) reaches is the roof an operator can be compared with. Kernels are timed
with the engine's block timer and warm-up (:mod:`operator_db.measure.timing`); provenance comes
from the device. Storing the figures is :mod:`operator_db.roofline.peaks`' job.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from operator_db.devices.base import Clock, Device
from operator_db.errors import MeasurementError
from operator_db.measure.caches import cache_levels, last_level_cache_bytes
from operator_db.measure.timing import BlockTimer, Call, calls_for, warm_up
from operator_db.stats import summarize

MATMUL_DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "tf32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
"""Dtypes ``measure_peaks`` can measure (``tf32``: float32 with TF32 enabled, CUDA only)."""

GPU_MATMUL_N = 8192
CPU_MATMUL_N = 2048
GPU_COPY_BYTES = 1 << 30
CPU_COPY_BYTES = 256 << 20
"""The CPU copy's buffers at least; four times the last-level cache where that is larger."""
LLC_MULTIPLE = 4
"""A CPU copy buffer is at least this many last-level caches: a buffer the cache holds measures
the cache, not memory (a 2-vCPU EPYC VM has 32 MiB of L3; some server CPUs have over 1 GiB)."""


CPU_CONV_SHAPES = ((64, 56), (128, 28), (256, 14))
"""(channels, side) of the 3x3 convolutions (stride 1, padding 1, batch 1) a CPU's compute peak
also tries: ResNet's. oneDNN's direct convolution can beat the BLAS's square matmul (on this
project's VM two of ResNet-50's 3x3 convolutions ran 1.4-4.1 % faster than its best matmul)."""


def cpu_copy_bytes(llc_bytes: int | None) -> int:
    """Return the CPU bandwidth copy's buffer size, bytes: ``CPU_COPY_BYTES`` or 4 × the LLC."""
    return max(CPU_COPY_BYTES, LLC_MULTIPLE * (llc_bytes or 0))


_MAX_CALLS_PER_BLOCK = 1 << 16


@dataclass(frozen=True)
class KernelTiming:
    """Raw timing of one peak kernel: ``len(block_s)`` blocks of ``calls_per_block`` calls."""

    kernel: Literal["matmul", "conv3x3", "copy", "add_"]
    dtype: str | None
    """The compute kernel's dtype; None for the copy."""
    size: int
    """Matmul: n of the n x n x n product; conv3x3: its channels (in and out); copy, add_: bytes
    of each buffer."""
    work_per_call: int
    """Matmul: FLOPs per call, 2 n^3; conv3x3: 2 x 9 x channels^2 x side^2; copy: bytes moved
    per call, 2 x size (read + write); add_: 3 x size (two reads, one write in place)."""
    calls_per_block: int
    block_s: tuple[float, ...]
    """Raw block durations, s."""
    side: int | None = None
    """conv3x3: the height and width of its input and output, elements."""

    @property
    def rates_per_s(self) -> tuple[float, ...]:
        """Work per second of each block: FLOP/s (matmul) or bytes/s (copy)."""
        return tuple(self.work_per_call * self.calls_per_block / b for b in self.block_s)

    @property
    def best_per_s(self) -> float:
        """The best block's rate: the attainable peak."""
        return max(self.rates_per_s)

    @property
    def median_per_s(self) -> float:
        """The median block rate."""
        return summarize(self.rates_per_s).median

    def describe(self) -> str:
        """Return a one-line description (stored as the measured peak's ``reference``)."""
        unit = "FLOP/s" if self.kernel in ("matmul", "conv3x3") else "B/s"
        what = {
            "matmul": f"matmul {self.dtype} n={self.size}",
            "conv3x3": f"3x3 conv2d {self.dtype} {self.size} channels at {self.side}x{self.side}",
            "copy": f"copy_ of {self.size} B (2x counted)",
            "add_": f"in-place add_ of two {self.size} B buffers (3x counted)",
        }[self.kernel]
        return (
            f"{what}: best of {len(self.block_s)} blocks x {self.calls_per_block} calls; "
            f"median {self.median_per_s:.4g} {unit}"
        )

    def as_dict(self) -> dict[str, Any]:
        """Return the raw samples and derived rates, JSON-ready."""
        return {
            "kernel": self.kernel,
            "dtype": self.dtype,
            "size": self.size,
            **({"side": self.side} if self.side is not None else {}),
            "work_per_call": self.work_per_call,
            "calls_per_block": self.calls_per_block,
            "block_s": list(self.block_s),
            "best_per_s": self.best_per_s,
            "median_per_s": self.median_per_s,
        }


@dataclass(frozen=True)
class CacheCopy:
    """A copy whose two buffers fit in one cache level: that level's roof (CPUs)."""

    level: str
    """``L2``, ``L3``, ...."""
    capacity_bytes: int
    """What the level holds for the cores of this process (every instance they use), bytes."""
    timing: KernelTiming

    def as_dict(self) -> dict[str, Any]:
        """Return the level, its capacity and the copy's raw timing, JSON-ready."""
        return {"level": self.level, "capacity_bytes": self.capacity_bytes, **self.timing.as_dict()}


@dataclass(frozen=True)
class MeasuredPeaks:
    """Attainable peaks of one device: a matmul per dtype, a copy for bandwidth, with raw blocks."""

    kind_name: str
    device_type: str
    """``gpu``, ``cpu`` or ``fake``: the device kind's type."""
    matmul: Mapping[str, KernelTiming]
    copy: KernelTiming | None
    skipped: Mapping[str, str] = field(default_factory=dict)
    """Dtypes not measured, with the reason."""
    provenance: dict[str, Any] = field(default_factory=dict)
    caches: tuple[CacheCopy, ...] = ()
    """A CPU's cache levels from L2 down, each with a copy that fits in it."""

    @property
    def flops_per_s(self) -> dict[str, float]:
        """Best FLOP/s per measured dtype."""
        return {dtype: t.best_per_s for dtype, t in self.matmul.items()}

    @property
    def bytes_per_s(self) -> float | None:
        """Best copy bandwidth, bytes/s (bytes read + bytes written per second)."""
        return self.copy.best_per_s if self.copy is not None else None

    def as_dict(self) -> dict[str, Any]:
        """Return everything, JSON-ready."""
        return {
            "kind_name": self.kind_name,
            "device_type": self.device_type,
            "matmul": {dtype: t.as_dict() for dtype, t in self.matmul.items()},
            "copy": self.copy.as_dict() if self.copy is not None else None,
            "caches": [c.as_dict() for c in self.caches],
            "skipped": dict(self.skipped),
            "provenance": self.provenance,
        }


@contextmanager
def _float32_matmul_precision(precision: str) -> Iterator[None]:
    """Set ``torch.set_float32_matmul_precision`` for the block, then restore it."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def _time_kernel(
    run: Call, timer: BlockTimer, *, min_time_s: float, repeats: int
) -> tuple[int, tuple[float, ...]]:
    """Warm up for a quarter of ``min_time_s``, then time ``repeats`` blocks filling it.

    Returns (calls per block, block durations in s).

    Raises:
        MeasurementError: the clock did not advance over a block.
    """
    per_call = warm_up(
        run, timer, min_s=min_time_s / 4, min_calls=2, max_calls_per_block=_MAX_CALLS_PER_BLOCK
    )
    per_block = calls_for(min_time_s / repeats, per_call, 1, _MAX_CALLS_PER_BLOCK)
    blocks = tuple(timer.block_s(run, per_block) for _ in range(repeats))
    if min(blocks) <= 0:
        raise MeasurementError(f"{per_block} calls took no measurable time; is the clock moving?")
    return per_block, blocks


def _probe_matmul(
    dtype: str, n: int, dev: torch.device, timer: BlockTimer, max_call_s: float
) -> str | None:
    """Return why a dtype's n x n matmul should be skipped (too slow, unsupported), or None.

    Times growing square matmuls from n=128 and extrapolates by n^3 (small sizes run less
    efficiently, so the estimate errs towards slow); stops when the estimate fits ``max_call_s``.
    """
    size = min(n, 128)
    while True:
        try:
            a, b, c = _matmul_operands(size, MATMUL_DTYPES[dtype], dev)
            run = _matmul_run(a, b, c)
            timer.block_s(run, 1)
            t = min(timer.block_s(run, 1), timer.block_s(run, 1))
        except (RuntimeError, NotImplementedError) as exc:
            return f"{dtype} matmul failed on {dev.type}: {' '.join(str(exc).split())[:200]}"
        estimate_s = t * (n / size) ** 3
        if estimate_s <= max_call_s:
            return None
        if size >= n or t * 8 > max_call_s:
            rate = 2 * size**3 / t if t > 0 else math.inf
            return (
                f"{dtype} matmul too slow on {dev.type}: ~{estimate_s:.3g} s per call at n={n} "
                f"({rate:.3g} FLOP/s at n={size}); pass a smaller matmul_n to measure it"
            )
        size = min(n, size * 2)


def _matmul_operands(
    n: int, dtype: torch.dtype, dev: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    a = torch.randn(n, n, dtype=dtype, device=dev)
    b = torch.randn(n, n, dtype=dtype, device=dev)
    return a, b, torch.empty(n, n, dtype=dtype, device=dev)


def _matmul_run(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> Call:
    def run() -> object:
        return torch.matmul(a, b, out=c)

    return run


def measure_peaks(
    device: Device,
    *,
    dtypes: Sequence[str] = ("float32", "float16", "bfloat16"),
    matmul_n: int | None = None,
    copy_bytes: int | None = None,
    min_time_s: float = 0.5,
    repeats: int = 5,
    max_call_s: float = 1.0,
    clock: Clock = time.perf_counter_ns,
) -> MeasuredPeaks:
    """Measure the attainable compute and bandwidth peaks of ``device``.

    Compute: an n x n by n x n ``torch.matmul`` into a preallocated output per dtype, counted as
    2 n^3 FLOPs per call (n: ``matmul_n``, default 8192 on a GPU; elsewhere the best of 512,
    1024 and 2048, since a CPU's BLAS can be fastest on matrices its caches hold, and of the 3x3
    convolutions of ``CPU_CONV_SHAPES``, counted as 2 x 9 x channels^2 x side^2 FLOPs). ``float32``
    runs in IEEE FP32 (``float32_matmul_precision("highest")``); ``tf32`` with TF32 enabled (CUDA
    only). A dtype whose call would take longer than ``max_call_s`` s (float16 on most CPUs), or
    that fails, is skipped with the reason in ``skipped``. Bandwidth: the faster of
    ``dst.copy_(src)`` and an in-place ``a.add_(b)`` (3 x the buffer per call) of two
    ``copy_bytes`` buffers (default 1 GiB on a GPU; on a CPU 256 MiB, or four times the
    last-level cache where that is larger, so that memory is measured and not the cache), counted
    as 2 x ``copy_bytes`` per call (read + write). On a CPU, each cache level from L2 down gets a
    copy of its own, whose buffers fill half of what the level holds for this process's cores
    (:func:`~operator_db.measure.caches.cache_levels`): that level's roof.

    Each kernel is warmed up for ``min_time_s / 4``, then timed as ``repeats`` blocks filling
    ``min_time_s`` together (CUDA events on a GPU; ``clock``, in ns, around ``synchronize()``
    elsewhere). The best block is the attainable peak; the raw blocks and the median are kept.

    Raises:
        ValueError: an unknown dtype or a non-positive size, time or count.
        MeasurementError: the device ran out of memory for the buffers.
    """
    unknown = [d for d in dtypes if d not in MATMUL_DTYPES]
    if unknown:
        raise ValueError(f"cannot measure {unknown}; measurable: {sorted(MATMUL_DTYPES)}")
    if min_time_s <= 0 or max_call_s <= 0 or repeats < 1:
        raise ValueError("min_time_s and max_call_s must be > 0 and repeats >= 1")
    dev = device.torch_device()
    cuda = dev.type == "cuda"
    n = matmul_n if matmul_n is not None else (GPU_MATMUL_N if cuda else CPU_MATMUL_N)
    llc = None if cuda else last_level_cache_bytes()
    if copy_bytes is not None:
        nbytes = copy_bytes
    else:
        nbytes = GPU_COPY_BYTES if cuda else cpu_copy_bytes(llc)
    if n < 1 or nbytes < 1:
        raise ValueError(f"matmul_n and copy_bytes must be >= 1, got {n} and {nbytes}")
    timer = BlockTimer(device, clock)
    identity = device.identity()
    matmul: dict[str, KernelTiming] = {}
    skipped: dict[str, str] = {}
    with torch.cuda.device(dev) if cuda else nullcontext():
        for dtype in dict.fromkeys(dtypes):
            if dtype == "tf32" and not cuda:
                skipped[dtype] = f"tf32 is a CUDA Tensor Core mode; not measured on {dev.type}"
                continue
            with _float32_matmul_precision("high" if dtype == "tf32" else "highest"):
                reason = _probe_matmul(dtype, n, dev, timer, max_call_s)
                if reason is not None:
                    skipped[dtype] = reason
                    continue
                # A CPU's BLAS can be faster on smaller matrices that stay in its caches (this
                # VM: 198 GFLOP/s at n=512, 169 at 2048): the attainable peak is the best size.
                sizes = (n,) if cuda or matmul_n is not None else (n // 4, n // 2, n)
                timings = [
                    _measure_matmul(dtype, size, dev, timer, min_time_s, repeats) for size in sizes
                ]
                if not cuda and matmul_n is None:  # oneDNN's convolutions are kernels too
                    timings += [
                        _measure_conv(dtype, shape, dev, timer, min_time_s, repeats)
                        for shape in CPU_CONV_SHAPES
                    ]
                matmul[dtype] = max(timings, key=lambda t: t.best_per_s)
        copy = _measure_copy(nbytes, dev, timer, min_time_s, repeats)
        cpu = identity.device_type == "cpu"
        caches = _measure_caches(dev, timer, min_time_s, repeats) if cpu else ()
    return MeasuredPeaks(
        kind_name=identity.name,
        device_type=identity.device_type,
        matmul=matmul,
        copy=copy,
        skipped=skipped,
        caches=caches,
        provenance={
            **device.provenance(),
            "torch_device": str(dev),
            "timer": "cuda_events" if cuda else "host_clock",
            "min_time_s": min_time_s,
            "repeats": repeats,
            **({} if cuda else {"last_level_cache_bytes": llc}),
        },
    )


def _measure_matmul(
    dtype: str, n: int, dev: torch.device, timer: BlockTimer, min_time_s: float, repeats: int
) -> KernelTiming:
    try:
        a, b, c = _matmul_operands(n, MATMUL_DTYPES[dtype], dev)
    except torch.OutOfMemoryError as exc:
        raise MeasurementError(f"out of memory for three {n}x{n} {dtype} matrices") from exc
    calls, blocks = _time_kernel(
        _matmul_run(a, b, c), timer, min_time_s=min_time_s, repeats=repeats
    )
    return KernelTiming("matmul", dtype, n, 2 * n**3, calls, blocks)


def _measure_conv(
    dtype: str,
    shape: tuple[int, int],
    dev: torch.device,
    timer: BlockTimer,
    min_time_s: float,
    repeats: int,
) -> KernelTiming:
    channels, side = shape
    kind = MATMUL_DTYPES[dtype]
    x = torch.randn(1, channels, side, side, dtype=kind, device=dev)
    w = torch.randn(channels, channels, 3, 3, dtype=kind, device=dev)

    def run() -> object:
        return torch.nn.functional.conv2d(x, w, padding=1)

    with torch.no_grad():
        calls, blocks = _time_kernel(run, timer, min_time_s=min_time_s, repeats=repeats)
    flops = 2 * 9 * channels**2 * side**2
    return KernelTiming("conv3x3", dtype, channels, flops, calls, blocks, side)


CACHE_FILL = 4
"""A cache level's copy uses buffers of 1/4 of the level each at most: half of it in all, so that
the copy stays in the level with room for the rest of the process."""
CACHE_SIZES = 4
"""Buffer sizes tried per cache level: 1/4, 1/8, 1/16, 1/32 of it (those that overflow the level
above); the fastest is the level's roof."""


def _measure_caches(
    dev: torch.device, timer: BlockTimer, min_time_s: float, repeats: int
) -> tuple[CacheCopy, ...]:
    """Return a copy per cache level from L2 down that fits in it (none where sysfs is silent).

    Each level tries buffers of 1/4, 1/8, 1/16 and 1/32 of what it holds, as long as the two
    buffers overflow the level above, and keeps the fastest: on a VM, sysfs tells the whole
    socket's last-level cache (480 MiB on this project's Xeon VM), of which the process's share
    is far smaller, and a quarter of it measures memory (55 GB/s there), not the cache — a
    residual ``add_`` of ResNet-50 looped alone then ran 1.35x faster than its bound.
    """
    found = []
    above = 0
    for cache in cache_levels():
        if cache.level < 2:  # an L1 copy times the call's overhead, not the cache
            above = cache.capacity_bytes
            continue
        sizes = [
            cache.capacity_bytes // (CACHE_FILL << k)
            for k in range(CACHE_SIZES)
            if k == 0 or 2 * (cache.capacity_bytes // (CACHE_FILL << k)) > above
        ]
        timings = [_measure_copy(n, dev, timer, min_time_s, repeats) for n in sizes]
        best = max(timings, key=lambda t: t.best_per_s)
        found.append(CacheCopy(f"L{cache.level}", cache.capacity_bytes, best))
        above = cache.capacity_bytes
    return tuple(found)


def _buffers(
    numel: int, dtype: torch.dtype, dev: torch.device, what: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return two filled buffers of ``numel`` elements (``what`` names them in the error).

    Filled with ones, not left empty: untouched pages would be read as the shared zero page on
    a CPU.

    Raises:
        MeasurementError: the device ran out of memory for them.
    """
    try:
        a = torch.ones(numel, dtype=dtype, device=dev)
        return a, torch.ones_like(a)
    except torch.OutOfMemoryError as exc:
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        raise MeasurementError(f"out of memory for two {nbytes}-byte {what} buffers") from exc


def _measure_copy(
    nbytes: int, dev: torch.device, timer: BlockTimer, min_time_s: float, repeats: int
) -> KernelTiming:
    copy = _time_copy(nbytes, dev, timer, min_time_s, repeats)
    # An in-place add reads two buffers and writes one it has just read: no write-allocate,
    # so it moves bytes faster than a copy (this VM, 2 threads: 234 against 167 GB/s in the L3,
    # 50 against 26 GB/s from memory). The bandwidth roof is the faster of the two.
    inplace = _time_add(nbytes, dev, timer, min_time_s, repeats)
    return max(copy, inplace, key=lambda t: t.best_per_s)


def _time_copy(
    nbytes: int, dev: torch.device, timer: BlockTimer, min_time_s: float, repeats: int
) -> KernelTiming:
    """Time ``dst.copy_(src)`` of two ``nbytes`` buffers, freed on return, before the add's.

    Two pairs alive at once held 4 x 1.9 GB on a VM whose sysfs L3 is the socket's 480 MiB.
    """
    src, dst = _buffers(nbytes, torch.uint8, dev, "copy")

    def run() -> object:
        return dst.copy_(src)

    calls, blocks = _time_kernel(run, timer, min_time_s=min_time_s, repeats=repeats)
    return KernelTiming("copy", None, nbytes, 2 * nbytes, calls, blocks)


def _time_add(
    nbytes: int, dev: torch.device, timer: BlockTimer, min_time_s: float, repeats: int
) -> KernelTiming:
    """Time an in-place ``a.add_(b)`` of two float32 buffers of ``nbytes`` each."""
    a, b = _buffers(nbytes // 4, torch.float32, dev, "add")

    def add() -> object:
        return a.add_(b)

    calls, blocks = _time_kernel(add, timer, min_time_s=min_time_s, repeats=repeats)
    return KernelTiming("add_", None, a.numel() * 4, 3 * a.numel() * 4, calls, blocks)
