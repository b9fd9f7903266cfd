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

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.estimate.energy import energy_of, static_note, with_static_power
from operator_db.estimate.options import (
    CacheChoice,
    ContextChoice,
    EnergyChoice,
    EstimateOptions,
    TimingChoice,
)
from operator_db.estimate.pipeline import Pipeline, gpu_notes, host_stage, model_pipeline
from operator_db.estimate.predicted import predicted_fields
from operator_db.estimate.rows import (
    BY_OP_COLUMNS,
    CONFIG_COLUMNS,
    between_ops,
    between_warnings,
    by_op,
    count_sources,
    coverage_warnings,
    finite_values,
    source_notes,
    sum_if_all_known,
    sum_known,
)
from operator_db.roofline.bounds import Peaks
from operator_db.roofline.peaks import best_peaks, kind_peaks

if TYPE_CHECKING:  # pandas only where a table is asked for: `opdb estimate` prints the rows
    import pandas as pd


@dataclass
class Estimate:
    """A model's composed cost on a device kind, its breakdowns, coverage and error."""

    model: str
    device_kind: str
    mode: str
    timing: TimingChoice
    energy: EnergyChoice
    config_rows: list[dict[str, Any]]
    """One row per configuration in spec order, by ``CONFIG_COLUMNS``, None where unknown; times in
    s, energies in J. ``configs`` is the same as a table."""
    op_rows: list[dict[str, Any]]
    """Per operator type, costliest first, by ``BY_OP_COLUMNS``, None where unknown (an energy
    where no configuration of the type has one). ``by_op`` is the same as a table."""
    time_s: float
    """Σ count × per-call time over the measured configurations, in s (the operators)."""
    energy_j: float | None
    """Σ count × per-call energy (total or dynamic, see ``energy``), in J; None without energy."""
    coverage: float
    """Measured calls / all calls of the model (opaque ones included: they are never measured)."""
    coverage_roofline: float | None
    """Share of the model's roofline-bound time that is measured (None without peaks); opaque
    configurations count with their live-counted FLOPs and bytes where the spec has them."""
    unmeasured: list[str]
    opaque: int
    full_run_time_s: float | None
    full_run_energy_j: float | None
    full_run_source: str | None = None
    """Where the full-model run comes from: ``measured`` (operator-db's own) or the name of the
    data set it was imported from (``opdb import``); None without a run."""
    peaks: Peaks | None = None
    notes: list[str] = field(default_factory=list)
    between_ops_s: float | None = None
    """Time the model spends outside its recorded operators, in s: its hollow run (every recorded
    module returns its recorded output) minus Σ count × per-call time of its functional operators
    (which the hollow run still runs). None where no hollow run or functional time is known."""
    cache_mode: CacheChoice = "warm"
    """Which results it composes: measured with warm caches (inputs reused) or cold ones."""
    adds_between: bool = False
    """Whether ``total_time_s`` adds ``between_ops_s``: on a synchronous device (a CPU), where the
    host's work between operators is on the critical path; on a GPU it overlaps the kernels."""
    host_time_s: float | None = None
    """GPU: the host's stage of the model as a two-stage pipeline, in s: the hollow run's issue
    time (the Python and launches outside the recorded modules, functional operators included)
    plus Σ count × host issue time of the recorded modules. None where not recorded (a CPU, or
    results from before revision 0004)."""
    warnings: list[str] = field(default_factory=list)
    """What makes the figure rest on something else than measured operators: a coverage gap
    (configurations not measured yet, opaque ones), or time between operators above the
    ``between_ops_warn`` share of the estimate. Empty when the estimate is whole."""
    predicted: int = 0
    """Configurations whose cost is predicted, not measured (``predict/``)."""
    coverage_predicted: float = 0.0
    """Predicted calls / all calls of the model."""
    predicted_time_s: float = 0.0
    """The predicted configurations' share of ``time_s``, in s."""
    time_low_s: float | None = None
    time_high_s: float | None = None
    """With predictions: the interval of ``time_s`` (measured part as it is, each predicted
    configuration at its interval's end), in s; None without predictions."""
    predictor: dict[str, Any] | None = None
    """The predictor used (version, training data, level), None without predictions."""
    static_energy_j: float | None = None
    """The static part of ``energy_j`` (total energy): the device's idle power × the estimated
    time of the model, in J (host-bound stretches included); None where it is Σ count × total
    energy per call (no idle power known, or dynamic energy asked)."""
    host_cpu: str | None = None
    """GPU: the CPU of the host whose model run gave the host stage (``hosts.info``); the same
    GPU's host stage moves with the host's CPU. None where unknown or on a CPU."""
    pipeline: Pipeline | None = None
    """GPU, a spec with its call order: the two stages simulated over the calls in order
    (``estimate/pipeline.py``); None elsewhere (then ``max(host, device)``)."""

    @property
    def between_ops_share(self) -> float | None:
        """The time between operators as a share of ``total_time_s`` where it is added to it."""
        if not self.adds_between or self.between_ops_s is None or self.total_time_s <= 0:
            return None
        return max(self.between_ops_s, 0.0) / self.total_time_s

    @cached_property
    def configs(self) -> pd.DataFrame:
        """One row per configuration (see ``CONFIG_COLUMNS``); times in s, energies in J."""
        import pandas as pd

        table = pd.DataFrame.from_records(self.config_rows, columns=CONFIG_COLUMNS)
        table["time_share"] = table["time_share"].astype(float)  # unknown: NaN, not None
        return table

    @cached_property
    def by_op(self) -> pd.DataFrame:
        """Per operator type: configurations, calls, time (s), energy (J), FLOPs, time share."""
        import pandas as pd

        table = pd.DataFrame.from_records(self.op_rows, columns=BY_OP_COLUMNS)
        for column in ("energy_j", "time_share"):  # unknown: NaN, not None
            table[column] = table[column].astype(float)
        return table

    @property
    def total_time_s(self) -> float:
        """Return the estimate of the model's time, in s.

        On a synchronous device (a CPU): the operators, plus the time between them where it is
        known (a negative measurement counts as 0). On a GPU the host issues work while the
        device runs it, so the model is a two-stage pipeline whose longer stage bounds it:
        max(device stage = the operators, host stage = ``host_time_s``) where the host stage is
        known, else the operators.
        """
        if self.adds_between:
            return self.time_s + max(self.between_ops_s or 0.0, 0.0)
        if self.pipeline is not None:
            return self.pipeline.time_s
        if self.host_time_s is not None:
            return max(self.time_s, self.host_time_s)
        return self.time_s

    @property
    def total_time_bounds_s(self) -> tuple[float | None, float | None]:
        """With predictions: ``total_time_s`` at the ends of the operators' interval, in s."""
        if self.time_low_s is None or self.time_high_s is None:
            return None, None
        ends = [replace(self, time_s=t).total_time_s for t in (self.time_low_s, self.time_high_s)]
        return ends[0], ends[1]

    @property
    def bound_by(self) -> Literal["device", "host"] | None:
        """GPU: which pipeline stage bounds the estimate; None where there is no pipeline."""
        if self.adds_between or self.host_time_s is None:
            return None
        if self.pipeline is not None:
            return self.pipeline.bound_by
        return "host" if self.host_time_s > self.time_s else "device"

    @property
    def time_error(self) -> float | None:
        """(estimate − measured full run) / measured full run, for time (``total_time_s``)."""
        return self._error(self.total_time_s)

    @property
    def operators_time_error(self) -> float | None:
        """(Σ operators − measured full run) / measured full run, without the time between."""
        return self._error(self.time_s)

    def _error(self, estimate_s: float) -> float | None:
        if self.full_run_time_s is None or self.full_run_time_s <= 0:
            return None
        return (estimate_s - self.full_run_time_s) / self.full_run_time_s

    @property
    def energy_error(self) -> float | None:
        """(estimate − measured full run) / measured full run, for energy."""
        if self.energy_j is None or self.full_run_energy_j is None or self.full_run_energy_j <= 0:
            return None
        return (self.energy_j - self.full_run_energy_j) / self.full_run_energy_j

    @property
    def sources(self) -> dict[str, int]:
        """Return the configurations per source of their figure (``rows.count_sources``)."""
        return count_sources(self.config_rows)

    @property
    def roofline_time_s(self) -> float | None:
        """Σ count × max(FLOPs / peak FLOP/s, bytes / peak bandwidth), in s (a lower bound)."""
        if self.peaks is None:
            return None
        return sum_known(r["roofline_time_s"] for r in self.config_rows)

    @property
    def context(self) -> ContextChoice:
        """``replay`` where any configuration's time is from a replay of the model's calls."""
        return "replay" if any(r["timing"] == "replay" for r in self.config_rows) else "alone"

    def ranked_config_rows(self) -> list[dict[str, Any]]:
        """Return ``config_rows`` costliest first, the unmeasured last, ties in spec order."""
        return sorted(self.config_rows, key=lambda r: (r["time_s"] is None, -(r["time_s"] or 0.0)))

    def as_dict(self) -> dict[str, Any]:
        """Return the summary, ``by_op`` and the configurations (spec order) as JSON-ready data.

        A NaN or infinite figure is None (JSON has neither).
        """
        return {
            **finite_values(self.summary()),
            "by_op": [finite_values(r) for r in self.op_rows],
            "configurations": [finite_values(r) for r in self.config_rows],
        }

    def summary(self) -> dict[str, Any]:
        """Return the headline figures as a JSON-ready dict."""
        return {
            "model": self.model,
            "device_kind": self.device_kind,
            "mode": self.mode,
            "timing": self.timing,
            "context": self.context,
            "energy": self.energy,
            "cache_mode": self.cache_mode,
            "time_s": self.time_s,
            "between_ops_s": self.between_ops_s,
            "between_ops_share": self.between_ops_share,
            "host_time_s": self.host_time_s,
            "bound_by": self.bound_by,
            "pipeline": None if self.pipeline is None else self.pipeline.as_dict(),
            "host_cpu": self.host_cpu,
            "total_time_s": self.total_time_s,
            "energy_j": self.energy_j,
            "static_energy_j": self.static_energy_j,
            "coverage": self.coverage,
            "coverage_roofline": self.coverage_roofline,
            "unmeasured": len(self.unmeasured),
            "opaque": self.opaque,
            "full_run_time_s": self.full_run_time_s,
            "full_run_energy_j": self.full_run_energy_j,
            "full_run_source": self.full_run_source,
            "sources": self.sources,
            "time_error": self.time_error,
            "operators_time_error": self.operators_time_error,
            "energy_error": self.energy_error,
            "roofline_time_s": self.roofline_time_s,
            "peaks": None if self.peaks is None else self.peaks.as_dict(),
            "predicted": self.predicted,
            "coverage_predicted": self.coverage_predicted,
            "predicted_time_s": self.predicted_time_s,
            "time_low_s": self.time_low_s,
            "time_high_s": self.time_high_s,
            "total_time_low_s": self.total_time_bounds_s[0],
            "total_time_high_s": self.total_time_bounds_s[1],
            "predictor": self.predictor,
            "warnings": self.warnings,
            "notes": self.notes,
        }


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
    records: list[dict[str, Any]] = []
    dynamic: list[float | None] = []
    for cfg in links:
        m = measured.get((cfg.id, kind.id, "eager"))
        graph = measured.get((cfg.id, kind.id, "graph")) if timing == "graph" else None
        used = "graph" if graph is not None else "eager"
        chosen = graph or m
        time_per_call = chosen.time_median_s if chosen is not None else None
        if m is not None and cfg.id in replayed:
            used, time_per_call = "replay", replayed[cfg.id]
        energy_per_call = energy_of(m, energy)
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
                "time_low_per_call_s": None,
                "time_high_per_call_s": None,
                "time_s": None if time_per_call is None else cfg.count * time_per_call,
                "host_time_per_call_s": replayed_host.get(cfg.id)
                if m is not None and cfg.id in replayed_host
                else (None if chosen is None else chosen.host_time_per_call_s),
                "energy_per_call_j": energy_per_call,
                "energy_j": None if energy_per_call is None else cfg.count * energy_per_call,
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
        full_run_source=None if run is None else source_names.get(run.source_id or 0, "measured"),
        full_run_energy_j=energy_of(run, energy),
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
        est = replace(est, energy_j=total, static_energy_j=static)
        est.notes += static_note(total, static, idle_w, est.total_time_s)
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
