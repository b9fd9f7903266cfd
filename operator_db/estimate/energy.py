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


def energy_of(m: Figure | None, energy: Literal["total", "dynamic"]) -> float | None:
    """Return a figure's energy per call, total or dynamic (idle power removed), in J."""
    if m is None:
        return None
    return m.dynamic_energy_per_call_j if energy == "dynamic" else m.energy_per_call_j


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
