"""Section 2 of ``bench/bench_gpu.py``: the review's checks, each a small function over the library.

Every check fills a :class:`Check` with real figures of what ran on the device it was given, or
says why it was skipped (``skipped: no CUDA`` for the GPU-only ones on the CPU or the fake device);
it never invents a number. Times in s, energies in mJ (windows) and J (per call), power in W.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from gpu_common import NO_CUDA, Budget, Check, Sizes, first_line, pct, us

from operator_db.config import MeasureSettings
from operator_db.devices.base import Device
from operator_db.devices.power import EnergyWindow, EnergyWindowResult
from operator_db.errors import DeviceError
from operator_db.measure import timing
from operator_db.measure.cuda_errors import is_sticky_cuda_error
from operator_db.measure.energy import energy_unavailable
from operator_db.measure.engine import MeasureResult, measure, operator_min_time_s
from operator_db.measure.flags import Flag
from operator_db.measure.timing import BlockTimer, Call, graph_timing_unavailable, warm_up

ENERGY_TOLERANCE = 0.03
"""The review's target for counter vs integrated power and for energy linearity (3 %)."""


def with_overrides(settings: MeasureSettings, overrides: dict[str, Any]) -> MeasureSettings:
    """Return ``settings`` with ``overrides`` applied, validated."""
    return MeasureSettings.model_validate({**settings.model_dump(), **overrides})


@dataclass
class Context:
    """What every check needs: the open device, the run's sizes and settings, the clock."""

    device: Device
    sizes: Sizes
    settings: MeasureSettings
    """The base measure settings (the environment's), which each check narrows."""
    budget: Budget
    log: Callable[[str], None]
    dry_run: bool = False
    """Figures of the CPU or the fake device: the GPU targets are not applied to them."""
    context_lost: str | None = None
    """The sticky CUDA error that ended GPU work in this process, if one did."""
    load: list[dict[str, Any]] | None = None
    """The matmul energy windows (N and 2N calls), run once for two checks."""
    notes: list[str] = field(default_factory=list)

    @property
    def cuda(self) -> bool:
        """Whether the device is a CUDA GPU."""
        return self.device.torch_device().type == "cuda"


def _matmul(ctx: Context) -> Call:
    """Return one call of the large matmul (inputs allocated once, output reused)."""
    dev = ctx.device.torch_device()
    dtype = getattr(torch, ctx.sizes.matmul_dtype)
    n = ctx.sizes.matmul_n
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    out = torch.empty_like(a)

    def run() -> None:
        torch.matmul(a, b, out=out)

    return run


def _temperature(device: Device) -> float | None:
    try:
        return device.telemetry().temperature_c
    except DeviceError:
        return None


def _window(result: EnergyWindowResult | None, nominal_s: float, calls: int) -> dict[str, Any]:
    """Return one energy window's figures (calls = 0 for an idle window)."""
    assert result is not None
    energy = result.energy_mj
    return {
        "nominal_s": nominal_s,
        "duration_s": result.duration_s,
        "calls": calls,
        "counter_mj": result.counter_mj,
        "integrated_mj": result.integrated_mj,
        "disagreement": result.disagreement,
        "source": result.source,
        "mean_power_w": result.mean_power_w,
        "power_samples": len(result.samples),
        "time_per_call_s": result.duration_s / calls if calls else None,
        "energy_per_call_j": energy / 1000 / calls if calls and energy is not None else None,
    }


def _load_windows(ctx: Context) -> list[dict[str, Any]]:
    """Run the matmul windows once: N calls filling the first window length, then 2N."""
    if ctx.load is not None:
        return ctx.load
    run = _matmul(ctx)
    timer = BlockTimer(ctx.device, time.perf_counter_ns)
    per_call = warm_up(
        run,
        timer,
        min_s=ctx.sizes.load_warmup_s,
        min_calls=3,
        max_calls_per_block=ctx.settings.max_calls_per_block,
    )
    first, second = ctx.sizes.load_windows_s
    n = max(1, math.ceil(first / per_call))
    windows = []
    for nominal, calls in ((first, n), (second, round(n * second / first))):
        before = _temperature(ctx.device)
        with EnergyWindow(ctx.device) as window:
            for _ in range(calls):
                run()
        figures = _window(window.result, nominal, calls)
        figures["temperature_c"] = [before, _temperature(ctx.device)]
        windows.append(figures)
    ctx.load = windows
    return windows


def counter_vs_power(ctx: Context, check: Check) -> None:
    """Compare counter energy with integrated field-186 power: idle, then the large matmul."""
    device = ctx.device
    missing = device.energy_unavailable_reason() or device.power_unavailable_reason()
    if missing is not None:
        check.reason = f"skipped: {missing} (needs the counter and power samples)"
        return
    check.figures["counter_update_period_s"] = device.counter_update_period_s()
    check.figures["power_update_period_s"] = device.power_update_period_s()
    idle = []
    for nominal in ctx.sizes.idle_windows_s:
        device.synchronize()
        with EnergyWindow(device) as window:
            time.sleep(nominal)
        idle.append(_window(window.result, nominal, 0))
    load = _load_windows(ctx)
    check.figures["idle"] = idle
    check.figures["matmul"] = load
    worst = [w["disagreement"] for w in (*idle, *load) if w["disagreement"] is not None]
    if not worst:
        check.status, check.reason = "fail", "no window had both figures"
        return
    check.status = "pass" if all(abs(d) <= ENERGY_TOLERANCE for d in worst) else "fail"
    check.summary = "; ".join(
        f"{label} {w['nominal_s']:g} s: {pct(w['disagreement'])} at {w['mean_power_w']:.0f} W"
        for label, ws in (("idle", idle), ("matmul", load))
        for w in ws
        if w["disagreement"] is not None and w["mean_power_w"] is not None
    )


def energy_linearity(ctx: Context, check: Check) -> None:
    """Compare energy per call of N and of 2N back-to-back matmuls (the matmul windows)."""
    reason = energy_unavailable(ctx.device)
    if reason is not None:
        check.reason = f"skipped: {reason}"
        return
    first, second = _load_windows(ctx)
    e1, e2 = first["energy_per_call_j"], second["energy_per_call_j"]
    check.figures = {"n": first, "2n": second}
    if e1 is None or e2 is None or e1 <= 0:
        check.status, check.reason = "fail", "a window had no energy"
        return
    ratio = e2 / e1 - 1
    check.figures["difference"] = ratio
    check.status = "pass" if abs(ratio) <= ENERGY_TOLERANCE else "fail"
    check.summary = (
        f"{first['calls']} calls: {e1 * 1e3:.3f} mJ/call; {second['calls']} calls: "
        f"{e2 * 1e3:.3f} mJ/call ({pct(ratio)}, source {first['source']})"
    )


def eager_vs_window(ctx: Context, check: Check) -> None:
    """Compare the eager median with the per-call time inside the energy windows (a large op)."""
    reason = energy_unavailable(ctx.device)
    if reason is not None:
        check.reason = f"skipped: {reason} (no energy windows)"
        return
    settings = with_overrides(ctx.settings, ctx.sizes.window_check)
    # Timed as the worker times an operator: as long as a model where energy is measured.
    min_time_s = operator_min_time_s(ctx.device, settings)
    result = measure(_matmul(ctx), ctx.device, settings, min_time_s=min_time_s)
    eager = result.eager.summary.median
    window = result.window_time_per_call_s
    assert window is not None
    diff = window / eager - 1
    energy = result.energy_per_call
    check.figures = {
        "eager_median_s": eager,
        "eager_iqr_ratio": result.eager.summary.iqr_ratio,
        "window_time_per_call_s": window,
        "trial_time_per_call_s": [t.time_per_call_s for t in result.trials],
        "difference": diff,
        "tolerance": settings.window_time_tolerance,
        "energy_per_call_j": energy.median if energy else None,
        "power_mean_w": result.power_mean_w,
        "disagreement": result.disagreement,
        "flags": [str(f) for f in result.flags],
        "settings": ctx.sizes.window_check,
        "min_time_s": min_time_s,
    }
    check.status = "pass" if abs(diff) <= settings.window_time_tolerance else "fail"
    check.summary = (
        f"eager {us(eager)} µs, in windows {us(window)} µs ({pct(diff)}); "
        f"flags: {', '.join(check.figures['flags']) or 'none'}"
    )


def _no_graph_reason(ctx: Context) -> str | None:
    if not ctx.cuda:
        return NO_CUDA
    unavailable = graph_timing_unavailable()
    return f"skipped: {unavailable}" if unavailable else None


def _timings(result: MeasureResult) -> dict[str, float]:
    return {t.method: t.summary.median for t in result.timings}


def graph_vs_eager(ctx: Context, check: Check) -> None:
    """Time a small op (``relu`` of a few hundred elements) eager and as a CUDA graph."""
    check.reason = _no_graph_reason(ctx)
    if check.reason is not None:
        return
    x = torch.randn(ctx.sizes.small_numel, device=ctx.device.torch_device())
    result = measure(
        lambda: torch.relu(x), ctx.device, ctx.settings.model_copy(update={"energy": False})
    )
    times = _timings(result)
    eager, graph = times["eager"], times.get("graph")
    check.figures = {
        "eager_median_s": eager,
        "graph_median_s": graph,
        "graph_over_eager": graph / eager if graph else None,
        "graph_unavailable": result.provenance.get(Flag.GRAPH_UNAVAILABLE.value),
        "flags": [str(f) for f in result.flags],
    }
    if graph is None:
        check.status = "fail"
        check.reason = f"no graph timing: {check.figures['graph_unavailable']}"
        return
    check.status = "pass" if graph < eager else "fail"
    check.summary = f"eager {us(eager)} µs, graph {us(graph)} µs (graph/eager {graph / eager:.2f})"


def graph_failure_recovery(ctx: Context, check: Check) -> None:
    """Fail a capture (``.item()`` syncs the host): flagged, and then the next op.

    On torch >= 2.13 the next op still gets its graph timing. Before it, a failed capture may
    leave the allocator's state behind (``measure/timing.py``): graph timing is then off for
    the rest of the process, and the next op says why. The check restores the process's graph
    timing afterwards (the probe after the failure found the device usable), so that the
    estimate section still times graphs.
    """
    check.reason = _no_graph_reason(ctx)
    if check.reason is not None:
        return
    settings = ctx.settings.model_copy(update={"energy": False, "cuda_graph_below_s": 1.0})
    x = torch.randn(ctx.sizes.small_numel, device=ctx.device.torch_device())
    before = timing._graphs_off
    try:
        bad = measure(lambda: x.sum().item(), ctx.device, settings)
        good = measure(lambda: torch.relu(x), ctx.device, settings)
    finally:
        timing._graphs_off = before
    version = timing._torch_version(torch.__version__)
    clean = version is not None and version >= timing.CLEAN_FAILURE_TORCH
    flagged = Flag.GRAPH_UNAVAILABLE in bad.flags
    graph = _timings(good).get("graph")
    next_reason = good.provenance.get(Flag.GRAPH_UNAVAILABLE.value)
    check.figures = {
        "failed_capture_flags": [str(f) for f in bad.flags],
        "failed_capture_reason": bad.provenance.get(Flag.GRAPH_UNAVAILABLE.value),
        "next_eager_median_s": good.eager.summary.median,
        "next_graph_median_s": graph,
        "next_graph_unavailable": next_reason,
        "torch_clean_after_failure": clean,
    }
    expected = graph is not None if clean else "off for this process" in str(next_reason)
    check.status = "pass" if flagged and expected else "fail"
    check.summary = (
        f"failed capture flagged {Flag.GRAPH_UNAVAILABLE.value}: {flagged}; next op's graph "
        f"timing: {f'{us(graph)} µs' if graph is not None else f'none ({next_reason})'}"
        + ("" if clean else " (torch < 2.13: off for the process after a failure, by design)")
    )


def oom_recovery(ctx: Context, check: Check) -> None:
    """Allocate far over memory (OutOfMemoryError), empty the cache, measure again."""
    if not ctx.cuda:
        check.reason = NO_CUDA
        return
    dev = ctx.device.torch_device()
    too_much = 4 * torch.cuda.get_device_properties(dev).total_memory
    seen: list[str] = []
    sticky: list[bool] = []

    def allocate() -> None:
        torch.empty(too_much, dtype=torch.uint8, device=dev)

    for attempt in (allocate, lambda: measure(allocate, ctx.device, ctx.settings)):
        try:
            attempt()
        except torch.cuda.OutOfMemoryError as exc:
            seen.append(first_line(exc))
            sticky.append(is_sticky_cuda_error(exc))
        torch.cuda.empty_cache()
    after = measure(_matmul(ctx), ctx.device, ctx.settings.model_copy(update={"energy": False}))
    median = after.eager.summary.median
    check.figures = {
        "requested_bytes": too_much,
        "errors": seen,
        "sticky": sticky,
        "next_eager_median_s": median,
        "memory_allocated_bytes": torch.cuda.memory_allocated(dev),
    }
    ok = len(seen) == 2 and not any(sticky) and median > 0
    check.status = "pass" if ok else "fail"
    check.summary = (
        f"{len(seen)} of 2 allocations raised OutOfMemoryError (sticky: {any(sticky)}); "
        f"next matmul {us(median)} µs"
    )


@dataclass(frozen=True)
class CheckSpec:
    """One check: its function, what it compares, its target, its nominal duration."""

    name: str
    title: str
    target: str
    run: Callable[[Context, Check], None]
    nominal_s: Callable[[Sizes], float]


CHECKS = (
    CheckSpec(
        "counter_vs_power",
        "Counter vs integrated power (idle, large matmul)",
        "disagreement within ±3 % on each window (5 s and 10 s)",
        counter_vs_power,
        lambda s: sum(s.idle_windows_s) + sum(s.load_windows_s) + s.load_warmup_s + 1,
    ),
    CheckSpec(
        "energy_linearity",
        "Energy linearity: N vs 2N calls of the matmul",
        "per-call energy within 3 %",
        energy_linearity,
        lambda s: 1.0,
    ),
    CheckSpec(
        "eager_vs_window",
        "Eager median vs per-call time inside the energy windows (large matmul)",
        "within window_time_tolerance (3 %)",
        eager_vs_window,
        lambda s: 4 + s.window_check["trials"] * (s.window_check["energy_window_s"] + 0.7),
    ),
    CheckSpec(
        "graph_vs_eager",
        "CUDA graph vs eager for a small op",
        "graph timing present and below eager",
        graph_vs_eager,
        lambda s: 2.0,
    ),
    CheckSpec(
        "graph_failure",
        "Graph-capture failure, then the next measurement",
        "graph_unavailable flagged; the next op gets its graph timing (torch < 2.13: graph "
        "timing off for the process, said)",
        graph_failure_recovery,
        lambda s: 3.0,
    ),
    CheckSpec(
        "oom_recovery",
        "Out of memory, then the next measurement",
        "OutOfMemoryError raised (not sticky); the next measurement works",
        oom_recovery,
        lambda s: 3.0,
    ),
)


def run_checks(ctx: Context) -> list[Check]:
    """Run every check in order, within the budget; a sticky CUDA error ends the GPU work."""
    checks = []
    for spec in CHECKS:
        check = Check(spec.name, spec.title, spec.target)
        nominal = spec.nominal_s(ctx.sizes)
        left = ctx.budget.left_s()
        if ctx.context_lost is not None:
            check.reason = f"skipped: the CUDA context is lost ({ctx.context_lost})"
        elif left < nominal:
            check.reason = f"skipped: budget ({left:.0f} s left, needs about {nominal:.0f} s)"
        else:
            start = time.perf_counter()
            try:
                spec.run(ctx, check)
            except Exception as exc:  # noqa: BLE001 - a check that breaks is a finding, go on
                check.status, check.reason = "error", first_line(exc)
                if is_sticky_cuda_error(exc):
                    ctx.context_lost = first_line(exc)
            check.wall_s = time.perf_counter() - start
            if ctx.dry_run and check.status in ("pass", "fail"):
                check.figures["verdict"] = check.status
                check.status = "info"
                check.reason = (
                    f"dry run: the GPU target is not applied to these figures (they would "
                    f"{check.figures['verdict']})"
                )
        said = check.summary or check.reason or ""
        line = said if said.startswith(check.status) else f"{check.status} {said}"
        ctx.log(f"check {spec.name}: {line.rstrip()}")
        checks.append(check)
    return checks
