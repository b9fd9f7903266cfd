"""A model's energy: each operator's dynamic energy, plus what the device draws idle all along.

Σ count × total energy per call adds each operator's energy as if the model were one long
kernel: the idle (static) power the device draws while it waits for the host — between kernels
of a host-bound model, at batch 1 — is in no operator's back-to-back loop. On an NVIDIA H200 an
MLP at batch 8 that the host bounds composed to −16 % of its measured energy that way. So the
total composes as Σ count × dynamic energy per call (idle power removed) + idle power × the
estimated time of the model (``Estimate.total_time_s``: on a GPU the pipeline's pass, host-bound
stretches included), and says which part is static.
"""

from __future__ import annotations

from typing import Literal

from operator_db.db.queries import Figure
from operator_db.stats import LEVEL, Interval, exact


def energy_of(m: Figure | None, energy: Literal["total", "dynamic"]) -> float | None:
    """Return a figure's energy per call, total or dynamic (idle power removed), in J."""
    if m is None:
        return None
    return m.dynamic_energy_per_call_j if energy == "dynamic" else m.energy_per_call_j


def energy_interval_of(
    m: Figure | None, energy: Literal["total", "dynamic"]
) -> tuple[float, float] | None:
    """Return the interval of :func:`energy_of` over its trials, J (None where none is stored).

    The stored interval is the total energy per call's; the dynamic energy (idle power × the
    call's time removed, a constant of the figure) keeps its widths.
    """
    value = energy_of(m, energy)
    if m is None or value is None or m.energy_per_call_j is None:
        return None
    if m.energy_low_j is None or m.energy_high_j is None:
        return None
    return (
        value - (m.energy_per_call_j - m.energy_low_j),
        value + (m.energy_high_j - m.energy_per_call_j),
    )


def run_energy_interval(run: Figure | None, energy: Literal["total", "dynamic"]) -> Interval | None:
    """Return a measured run's energy per call with its interval, J (exact where none stored)."""
    value = energy_of(run, energy)
    if run is None or value is None:
        return None
    ci = energy_interval_of(run, energy)
    if ci is None:
        return exact(value, "run without an energy interval")
    held = run.energy_ci_level if run.energy_ci_level is not None else LEVEL
    return Interval(value, ci[0], ci[1], held, "median of energy trials")


def with_static_power(
    total_j: float | None,
    dynamic_j: float | None,
    idle_power_w: float | None,
    time_s: float,
) -> tuple[float | None, float | None]:
    """Return (the model's total energy, its static part), in J.

    ``dynamic_j`` + ``idle_power_w`` × ``time_s`` where both are known (``time_s``: the
    estimate's time of the model, in s); else ``total_j`` (Σ count × total energy per call) and
    no static part.
    """
    if dynamic_j is None or idle_power_w is None or idle_power_w < 0:
        return total_j, None
    static = idle_power_w * time_s
    return dynamic_j + static, static


def positive_energy(total_j: float | None, what: str) -> tuple[float | None, list[str]]:
    """Return ``total_j`` (J) where it is unknown or above 0 J, else None and a note saying why.

    A composed energy sums measured figures, some of them dynamic energies (total − idle power ×
    time) that are noise around zero for short operators; the sum can fall to 0 J or below, which
    no device draws. Such a figure is no energy, never a negative one. ``what`` names the sum in
    the note ("the operators' energy").
    """
    if total_j is None or total_j > 0:
        return total_j, []
    return None, [f"no energy: {what} composed to {total_j:.4g} J"]


def static_note(
    total_j: float | None, static_j: float | None, idle_power_w: float | None, time_s: float
) -> list[str]:
    """Say how the total energy splits into dynamic and static (idle power × time), if it does."""
    if static_j is None or idle_power_w is None:
        return []
    return [
        f"energy: operators' dynamic energy {(total_j or 0) - static_j:.4g} J + static "
        f"{static_j:.4g} J (idle power {idle_power_w:.4g} W × the estimated "
        f"{time_s * 1e3:.3f} ms)"
    ]
