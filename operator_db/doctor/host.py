"""Host checks that do not depend on the device: backend flags, settings, the database.

torch's backend flags as the worker pins them, the settings in effect, and the database
(reachable, at the code's schema revision).
"""

from __future__ import annotations

from typing import Any

from operator_db.config import Settings
from operator_db.db.migrate import schema_status
from operator_db.devices.noise import HostReader, quiet_window
from operator_db.doctor.report import Check, fail, ok, warn
from operator_db.errors import DatabaseError, MeasurementError
from operator_db.measure.backends import pin_backends


def _on(flag: Any) -> str:
    return "on" if flag is True else "off" if flag is False else str(flag)


def backends_check(settings: Settings, threads: int) -> Check:
    """Pin torch's backend flags as the worker does (``pin_backends``) and say the state read back.

    fail: torch refused a flag (the worker would not start). The flags are process-wide: the
    doctor's own load and timings then run under them, as a job would.
    """
    try:
        state = pin_backends(settings.measure, threads)
    except MeasurementError as exc:
        return fail(
            "backends",
            "backend flags",
            str(exc),
            "fix the OPDB_MEASURE__ flag settings (docs/measurement.md, torch's backend flags)",
        )
    sdp = "/".join(
        name for name in ("flash", "mem_efficient", "math", "cudnn") if state.get(f"sdp_{name}")
    )
    value = (
        f"float32 matmul {state['float32_matmul_precision']} (TF32 matmul "
        f"{_on(state['matmul_allow_tf32'])}, cuDNN {_on(state['cudnn_allow_tf32'])}), cuDNN "
        f"{_on(state['cudnn_enabled'])}, benchmark {_on(state['cudnn_benchmark'])}, "
        f"deterministic {_on(state['cudnn_deterministic'])}, deterministic algorithms "
        f"{_on(state['deterministic_algorithms'])}, SDPA {sdp or 'none'}, "
        f"{state['threads']} threads"
    )
    return ok("backends", "backend flags", f"pinned: {value}", **state)


def settings_check(settings: Settings, device: str) -> Check:
    """Say the settings that decide how measuring goes: device, energy, windows, trials, pauses.

    warn: timed energy windows shorter than 2 s, which read low (METHODOLOGY §1, thermally stable
    profiling; results are stable from 5 s on).
    """
    m = settings.measure
    plan = m.energy_plan()
    periods = (
        "" if plan.method == "aligned" else f", ≥ {m.energy_window_min_periods} counter periods"
    )
    energy = (
        f"{plan.method} energy windows ≥ {plan.window_s:g} s (≥ {m.energy_window_min_calls} "
        f"calls{periods}) × {plan.trials} trials, warm-up {plan.warmup_s:g} s, idle baseline "
        f"{m.idle_window_s:g} s every {m.idle_every_s:g} s, cooldown {m.cooldown} ≤ "
        f"{m.cooldown_s:g} s"
        if m.energy
        else "energy off"
    )
    value = (
        f"device {device}; timing {m.blocks} blocks ≥ {m.block_min_s * 1000:g} ms, whole model "
        f"≥ {m.model_min_time_s:g} s; {energy}"
    )
    data = {"device": device, "measure": m.model_dump(mode="json")}
    if m.energy and plan.method == "timed" and plan.window_s < 2:
        return warn(
            "settings",
            "settings",
            value,
            "timed energy windows under ~2 s read low: OPDB_MEASURE__ENERGY_WINDOW_S="
            f"{plan.window_s:g} (5 s is the timed default; aligned windows may be short)",
            **data,
        )
    return ok("settings", "settings", value, **data)


def database_check(url: str, *, auto_upgrade_sqlite: bool) -> Check:
    """Say whether the database is reachable and at the code's schema revision; change nothing.

    fail: unreachable; behind the code where it is not upgraded on first use (PostgreSQL, or
    SQLite with ``auto_upgrade_sqlite`` off); newer than the code. warn: a SQLite file not there
    yet, or behind but upgraded on first use.
    """
    title = "database"
    try:
        status = schema_status(url)
    except DatabaseError as exc:
        return fail(
            "database",
            title,
            str(exc),
            "start the database or fix OPDB_DATABASE_URL (or --db)",
        )
    data = {
        "url": status.url,
        "dialect": status.dialect,
        "revision": status.current,
        "head": status.head,
    }
    if not status.exists:
        return warn(
            "database",
            title,
            f"{status.url}: no file yet",
            "it is created and migrated on first use (or run `opdb db upgrade`)",
            **data,
        )
    if not status.known:
        return fail(
            "database",
            title,
            f"{status.url} is at revision {status.current}, newer than this code ({status.head})",
            "install the operator-db version that migrated it on this host",
            **data,
        )
    if status.at_head:
        return ok("database", title, f"{status.url} at revision {status.head}", **data)
    state = "empty" if status.current is None else f"at revision {status.current}"
    value = f"{status.url} is {state}; the code expects {status.head}"
    if status.dialect == "sqlite" and auto_upgrade_sqlite:
        return warn(
            "database", title, value, "upgraded on first use (or `opdb db upgrade`)", **data
        )
    return fail("database", title, value, "run `opdb db upgrade`", **data)


def quiet_check(reader: HostReader, seconds: float, device_type: str) -> Check:
    """Read the host, idle, over ``seconds``: warn where something would move the figures.

    CPU steal, other processes' load, a clock drop, thermal throttling; on a GPU its clocks,
    heat and other processes (``devices/noise.py``). A job measured under these is flagged
    ``host_noisy``.
    """
    reasons, data = quiet_window(seconds, reader)
    seen = ", ".join(
        f"{k} {v}" for k, v in data.items() if k in ("steal", "other_cpus", "gpu_sm_mhz")
    )
    if reasons:
        advice = (
            "stop other work on the host (and the GPU); on a VM, a host with dedicated vCPUs; "
            "results measured now are flagged host_noisy"
        )
        return warn("host_quiet", "host quiet", "; ".join(reasons), advice, **data)
    where = "host and GPU" if device_type == "gpu" else "host"
    return ok(
        "host_quiet", "host quiet", f"nothing moved the {where} over {seconds:g} s ({seen})", **data
    )
