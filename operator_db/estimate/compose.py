"""Compose a model's time and energy from its operators: Σ count × per-call cost.

The estimate of a model on a device kind sums, over the model's configurations, the number of
calls per forward (or training step) times the latest per-call measurement of that configuration on
that kind. It says what it used (eager or CUDA-graph time, total or dynamic energy), what is not
measured (coverage, also weighted by roofline-bound time: configurations not measured yet and opaque
ones, which never can be), and compares itself with the latest measured full-model run. What makes
the figure rest on something else than measured operators is a warning: a coverage gap, or time
between operators that is a large share of the estimate (opaque work runs there in a hollow run).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.estimate.energy import (
    energy_interval_of,
    energy_of,
    positive_energy,
    run_energy_interval,
    static_note,
    with_static_power,
)
from operator_db.estimate.noise import run_interval
from operator_db.estimate.options import (
    EstimateOptions,
)
from operator_db.estimate.pipeline import gpu_notes, host_stage, model_pipeline
from operator_db.estimate.predicted import predicted_fields
from operator_db.estimate.result import Estimate as Estimate
from operator_db.estimate.rows import (
    between_ops,
    between_warnings,
    by_op,
    coverage_warnings,
    noisy_host_warnings,
    source_notes,
    sum_if_all_known,
    sum_known,
)
from operator_db.roofline.peaks import best_peaks, kind_peaks
from operator_db.stats import LEVEL

if TYPE_CHECKING:  # pandas only where a table is asked for: `opdb estimate` prints the rows
    pass


def estimate_model(
    session: Session,
    model_name: str,
    device_kind: str,
    options: EstimateOptions | None = None,
) -> Estimate:
    """Compose the cost of ``model_name`` on ``device_kind`` from its measured operators.

    ``options`` holds every choice (:class:`EstimateOptions`; the defaults without it):
    ``aggregate="median"`` takes the median of every stored result of a configuration (and of the
    model) on the kind — several passes, several hosts — instead of the newest one, so that a
    burst of machine noise during one job does not decide the figure.
    ``timing="graph"`` uses the CUDA-graph time of a configuration where one was measured (fast
    ops) and the eager time elsewhere. ``energy="dynamic"`` subtracts idle power.
    ``cache_mode="cold"`` composes the results measured with the caches flushed before every call
    (``OPDB_MEASURE__CACHE_MODE=cold``; time only) instead of the warm ones. ``peaks`` draw the
    roofline; ``"best"`` takes the kind's best-known ones for the model's dtype
    (:func:`~operator_db.roofline.peaks.best_peaks`), None none.
    ``between_ops_warn`` is the share of the estimate above which the time between operators is
    a warning (``OPDB_ESTIMATE_BETWEEN_OPS_WARN``). ``predicted`` fills the configurations not
    measured on the kind with those per-call costs (``estimate/predicted.py``; a predictor's, from
    ``operator_db.predict.mix.predicted_costs``).
    ``context="replay"`` (eager timing) composes, for each configuration the model's run timed in
    a replay of the model's call order (a CPU: ``measure/replay.py``), that time per call — the
    operator in the model's context — and the time looped alone elsewhere; ``"alone"`` always the
    time looped alone. The rows' ``timing`` says which (``replay`` or ``eager``).

    Raises:
        NotFoundError: unknown model or device kind.
    """
    o = options or EstimateOptions()
    timing, energy, aggregate, cache_mode = o.timing, o.energy, o.aggregate, o.cache_mode
    peaks, predicted = o.peaks, o.predicted
    model = queries.get_model(session, model_name)
    kind = queries.get_device_kind(session, device_kind)
    if peaks == "best":
        peaks = best_peaks(kind_peaks(session, kind, kind.name), model.dtype)
    links = queries.model_config_costs(session, model.id)
    measured = queries.model_config_figures(
        session, model.id, [kind.id], aggregate=aggregate, cache_mode=cache_mode
    )
    runs = queries.model_figures(
        session, [model.id], [kind.id], aggregate=aggregate, cache_mode=cache_mode
    )
    run = runs.get((model.id, kind.id, "graph" if timing == "graph" else "eager")) or runs.get(
        (model.id, kind.id, "eager")
    )
    imported = {f.source_id for f in (*measured.values(), *runs.values()) if f.source_id}
    source_names = queries.data_source_names(session) if imported else {}
    in_context = run is not None and o.context == "replay" and timing == "eager"
    replayed = (run.replay_per_call_s if run is not None and in_context else None) or {}
    replayed_host = (run.replay_host_per_call_s if run is not None and in_context else None) or {}
    replayed_ci = (run.replay_interval_s if run is not None and in_context else None) or {}
    records: list[dict[str, Any]] = []
    dynamic: list[float | None] = []
    for cfg in links:
        m = measured.get((cfg.id, kind.id, "eager"))
        graph = measured.get((cfg.id, kind.id, "graph")) if timing == "graph" else None
        used = "graph" if graph is not None else "eager"
        chosen = graph or m
        time_per_call = chosen.time_median_s if chosen is not None else None
        ci = None if chosen is None else (chosen.time_low_s, chosen.time_high_s)
        ci_level = None if chosen is None else chosen.time_ci_level
        if m is not None and cfg.id in replayed:
            used, time_per_call = "replay", replayed[cfg.id]
            ci, ci_level = replayed_ci.get(cfg.id), LEVEL
        energy_per_call = energy_of(m, energy)
        energy_ci = energy_interval_of(m, energy)
        if m is not None:
            per_call_j = energy_of(m, "dynamic")
            dynamic.append(None if per_call_j is None else cfg.count * per_call_j)
        roof = None
        if peaks is not None and (cfg.form != "opaque" or None not in (cfg.flops, cfg.bytes)):
            roof = peaks.bound_s(cfg.flops, cfg.bytes)  # opaque: its cost counted live
        records.append(
            {
                "key": cfg.key,
                "op": cfg.op,
                "form": cfg.form,
                "inputs": " ".join("x".join(map(str, t["shape"])) for t in cfg.inputs),
                "count": cfg.count,
                "flops": cfg.flops,
                "bytes": cfg.bytes,
                "params": cfg.params,
                "measured": time_per_call is not None,
                "source": None
                if chosen is None
                else source_names.get(chosen.source_id or 0, "measured"),
                "timing": used if time_per_call is not None else None,
                "time_per_call_s": time_per_call,
                "time_low_per_call_s": None if ci is None else ci[0],
                "time_high_per_call_s": None if ci is None else ci[1],
                "time_ci_level": ci_level if ci is not None and None not in ci else None,
                "time_s": None if time_per_call is None else cfg.count * time_per_call,
                "host_time_per_call_s": replayed_host.get(cfg.id)
                if m is not None and cfg.id in replayed_host
                else (None if chosen is None else chosen.host_time_per_call_s),
                "energy_per_call_j": energy_per_call,
                "energy_j": None if energy_per_call is None else cfg.count * energy_per_call,
                "energy_low_per_call_j": None if energy_ci is None else energy_ci[0],
                "energy_high_per_call_j": None if energy_ci is None else energy_ci[1],
                "energy_ci_level": None if energy_ci is None or m is None else m.energy_ci_level,
                "roofline_time_per_call_s": roof,
                "roofline_time_s": None if roof is None else cfg.count * roof,
                "flags": ",".join(sorted(set((m.flags if m else []) or []))),
            }
        )
    # The figures come from the rows in plain Python (an API request's cost is mostly here; the
    # tables are built only when asked for), with pandas' rules: a sum skips unknowns (None).
    # Coverage counts every call, opaque ones too: they are never measured.
    total_time = sum_known(r["time_s"] for r in records)
    for r in records:
        known = r["time_s"] is not None and total_time > 0
        r["time_share"] = r["time_s"] / total_time if known else None
    measurable = [r for r in records if r["form"] != "opaque"]
    done = [r for r in records if r["measured"]]
    counted = sum(r["count"] for r in records)
    coverage = sum(r["count"] for r in done) / counted if counted else 0.0
    coverage_roofline = None
    if peaks is not None and records:
        total_roof = sum_known(r["roofline_time_s"] for r in records)
        if total_roof > 0:
            coverage_roofline = sum_known(r["roofline_time_s"] for r in done) / total_roof
    energies = [r["energy_j"] for r in records if r["measured"]]
    energy_total = sum_if_all_known(energies)
    op_rows = by_op(records, total_time)
    notes = []
    in_replay = sum(1 for r in records if r["timing"] == "replay")
    if in_replay:
        rest = " (the rest looped alone)" if in_replay < len(done) else ""
        notes.append(
            f"in context: {in_replay} of {len(measurable)} configurations timed in a replay of "
            f"the model's call order{rest}"
        )
    if cache_mode == "cold":
        notes.append("cold caches: results measured with the caches flushed before every call")
    notes += source_notes(records, run, source_names)
    unmeasured = [r["key"] for r in measurable if not r["measured"]]
    opaque_rows = [r for r in records if r["form"] == "opaque"]
    opaque = len(opaque_rows)
    warnings = coverage_warnings(coverage, coverage_roofline, unmeasured, opaque_rows)
    warnings += noisy_host_warnings(records, run.flags if run is not None else [])
    if energy_total is None and len(energies):
        notes.append("energy unavailable for some configurations: no energy estimate")
    hollow_host = run.hollow_host_time_s if run is not None else None
    between = between_ops(run.hollow_time_s if run is not None else None, records)
    adds_between = kind.type != "gpu"
    graph_mode = timing == "graph" and not adds_between  # one launch: no host stage
    host = None if adds_between or graph_mode else host_stage(hollow_host, records)
    pipe = None if host is None else model_pipeline(records, model.calls, model.syncs, hollow_host)
    notes += gpu_notes(adds_between or graph_mode, between, host, total_time, pipe)
    if graph_mode:
        notes.append(
            "graph mode: the model as one CUDA graph, whose launch is the host's only work: the "
            "device stage (CUDA-graph times where measured) is the estimate, compared with the "
            "model's graph-mode run where there is one"
        )
    host_cpu = None if host is None or run is None else queries.host_cpu_label(session, run.host_id)
    if host_cpu is not None:
        notes.append(f"host stage measured on {host_cpu}")
    if model.mode == "training":
        notes.append(
            "training step: Σ forward+backward per operator; the optimizer step is not "
            "an operator and is only in the full run"
        )
    if adds_between and between is not None:
        warnings += between_warnings(between, total_time, o.between_ops_warn)
    est = Estimate(
        model=model.name,
        device_kind=kind.name,
        mode=model.mode,
        timing=timing,
        energy=energy,
        config_rows=records,
        op_rows=op_rows,
        time_s=total_time,
        energy_j=energy_total,
        coverage=coverage,
        coverage_roofline=coverage_roofline,
        unmeasured=unmeasured,
        opaque=opaque,
        full_run_time_s=run.time_median_s if run else None,
        full_run_interval=None
        if run is None
        else run_interval(run.time_median_s, run.time_low_s, run.time_high_s, run.time_ci_level),
        replay_total=run.replay_total if run is not None and in_context else None,
        full_run_source=None if run is None else source_names.get(run.source_id or 0, "measured"),
        full_run_energy_j=energy_of(run, energy),
        full_run_energy_interval=run_energy_interval(run, energy),
        peaks=peaks,
        notes=notes,
        between_ops_s=between,
        adds_between=adds_between,
        host_time_s=host,
        pipeline=pipe,
        host_cpu=host_cpu,
        cache_mode=cache_mode,
        warnings=warnings,
    )
    if energy == "total" and energy_total is not None and not predicted:
        idle_w = run.idle_power_w if run is not None else None
        total, static = with_static_power(
            energy_total, sum_if_all_known(dynamic), idle_w, est.total_time_s
        )
        est = replace(est, energy_j=total, static_energy_j=static, idle_power_w=idle_w)
        est.notes += static_note(total, static, idle_w, est.total_time_s)
    energy_j, no_energy = positive_energy(est.energy_j, "the operators' energy")
    if no_energy:
        est = replace(est, energy_j=energy_j, static_energy_j=None, notes=est.notes + no_energy)
    if predicted is None:
        return est
    return replace(
        est,
        **predicted_fields(
            records,
            predicted,
            coverage=coverage,
            coverage_roofline=coverage_roofline,
            unmeasured=unmeasured,
            warnings=warnings,
        ),
    )
