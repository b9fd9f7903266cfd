"""An estimate: a model's composed cost on a device kind, its breakdowns, coverage and error.

:func:`operator_db.estimate.compose.estimate_model` makes it; this module holds what it is and
what it derives (the total on a CPU or a GPU pipeline, the errors, their intervals, the
JSON-ready summary).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from operator_db.estimate.noise import Noise, energy_noise, operators_noise, total_interval
from operator_db.estimate.options import CacheChoice, ContextChoice, EnergyChoice, TimingChoice
from operator_db.estimate.pipeline import Pipeline
from operator_db.estimate.rows import (
    BY_OP_COLUMNS,
    CONFIG_COLUMNS,
    count_sources,
    finite_values,
    sum_known,
)
from operator_db.roofline.bounds import Peaks
from operator_db.stats import Interval, error_interval

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
    idle_power_w: float | None = None
    """The device's idle power at the measured run (its worker's baseline), W; None where not
    known."""
    host_cpu: str | None = None
    """GPU: the CPU of the host whose model run gave the host stage (``hosts.info``); the same
    GPU's host stage moves with the host's CPU. None where unknown or on a CPU."""
    pipeline: Pipeline | None = None
    """GPU, a spec with its call order: the two stages simulated over the calls in order
    (``estimate/pipeline.py``); None elsewhere (then ``max(host, device)``)."""
    replay_total: dict[str, Any] | None = None
    """The model run's replay total (its median pass) with its interval (``noise.py``)."""
    full_run_interval: Interval | None = None
    """The measured run's time with its interval, s (exact where none was stored)."""
    full_run_energy_interval: Interval | None = None
    """The measured run's energy (``energy``) with its interval over trials, J."""

    @cached_property
    def noise(self) -> Noise | None:
        """The interval of the operators' sum and how many figures had none (``noise.py``)."""
        level = (self.predictor or {}).get("level")
        return operators_noise(self.config_rows, self.replay_total, level)

    @property
    def time_interval(self) -> Interval | None:
        """``total_time_s`` with its interval (95 %), s; None where nothing is measured."""
        if self.noise is None:
            return None
        return total_interval(
            self.noise.operators, self.time_s, self.total_time_s, self.adds_between
        )

    @property
    def time_error_interval(self) -> Interval | None:
        """``time_error`` with its interval (95 %): both sides' noise; holds 0 within noise.

        None where either side has no interval, or neither has a spread (figures imported as
        one number each): a zero-width interval would call any error beyond noise.
        """
        return _error_interval(self.time_interval, self.full_run_interval)

    @property
    def energy_interval(self) -> Interval | None:
        """``energy_j`` with its interval (95 %), J; None without energy.

        Each configuration's energy trials in quadrature, with the static part (idle power ×
        the estimate's time) at the time's interval.
        """
        if self.energy_j is None:
            return None
        static = None
        t = self.time_interval
        if self.static_energy_j is not None and t is not None and self.total_time_s > 0:
            static = t.scaled(self.static_energy_j / self.total_time_s)
        noise = energy_noise(self.config_rows, static)
        if noise is None:
            return None
        shift = self.energy_j - noise.value  # the rows hold total energy; the sum, dynamic
        return Interval(
            self.energy_j, noise.low + shift, noise.high + shift, noise.level, noise.method
        )

    @property
    def energy_error_interval(self) -> Interval | None:
        """``energy_error`` with its interval (95 %): both sides' trials; holds 0 within noise."""
        if self.energy_error is None:
            return None
        return _error_interval(self.energy_interval, self.full_run_energy_interval)

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
        for column in ("time_s", "energy_j", "time_share"):  # unknown: NaN, not None
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
    def roofline_bound(self) -> Literal["compute", "memory"] | None:
        """Which roof bounds most of the model's roofline time on the kind; None without peaks.

        Each configuration's count × roofline time goes to the roof that bounds it (its
        intensity against the ridge); the larger share names the model's bound. The one answer
        the CLI, the pages and the API give to "bound by" on the roofline.
        """
        if self.peaks is None:
            return None
        shares = {"compute": 0.0, "memory": 0.0}
        for r in self.config_rows:
            flops, nbytes = float(r.get("flops") or 0), float(r.get("bytes") or 0)
            if flops or nbytes:
                shares[self.peaks.bound_type(flops, nbytes)] += float(r.get("roofline_time_s") or 0)
        if not any(shares.values()):
            return None
        return "compute" if shares["compute"] >= shares["memory"] else "memory"

    @property
    def composed(self) -> bool:
        """Whether any configuration has a figure (measured or predicted): else no estimate."""
        return any(r["time_s"] is not None for r in self.config_rows)

    @property
    def no_estimate(self) -> str | None:
        """Why there is no estimate (no configuration has a figure on the kind); None if one.

        Then ``summary()`` gives no total (null, never 0 s) and no error: a sum of nothing is
        not the model's time.
        """
        if self.composed:
            return None
        run = (
            ""
            if self.full_run_time_s is None
            else f"; only its whole-model run is measured ({self.full_run_time_s * 1e3:.3g} ms)"
        )
        return (
            f"no operator of {self.model} is measured on {self.device_kind}{run}: "
            f"nothing to compose (opdb measure {self.model})"
        )

    @property
    def time_error(self) -> float | None:
        """(estimate − measured full run) / measured full run, for time (``total_time_s``).

        None without a run, or where nothing is composed (``no_estimate``).
        """
        return self._error(self.total_time_s)

    @property
    def operators_time_error(self) -> float | None:
        """(Σ operators − measured full run) / measured full run, without the time between."""
        return self._error(self.time_s)

    def _error(self, estimate_s: float) -> float | None:
        if self.full_run_time_s is None or self.full_run_time_s <= 0 or not self.composed:
            return None
        return (estimate_s - self.full_run_time_s) / self.full_run_time_s

    @property
    def energy_error(self) -> float | None:
        """(estimate − measured full run) / measured full run, for energy."""
        run = self.full_run_energy_j
        if not self.composed or self.energy_j is None or run is None or run <= 0:
            return None
        return (self.energy_j - run) / run

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
        """Return the headline figures as a JSON-ready dict.

        Where nothing is composed (``no_estimate`` says why) the totals and errors are None.
        """
        composed = self.composed
        return {
            "model": self.model,
            "device_kind": self.device_kind,
            "mode": self.mode,
            "timing": self.timing,
            "context": self.context,
            "energy": self.energy,
            "cache_mode": self.cache_mode,
            "time_s": self.time_s if composed else None,
            "between_ops_s": self.between_ops_s,
            "between_ops_share": self.between_ops_share if composed else None,
            "host_time_s": self.host_time_s,
            "bound_by": self.bound_by,
            "roofline_bound": self.roofline_bound,
            "pipeline": None if self.pipeline is None else self.pipeline.as_dict(),
            "host_cpu": self.host_cpu,
            "total_time_s": self.total_time_s if composed else None,
            "energy_j": self.energy_j if composed else None,
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
            **_noise_fields(
                ("time_interval", "full_run_interval", "time_error_interval", "within_noise"),
                self.time_interval,
                self.full_run_interval,
                self.time_error_interval,
            ),
            "figures_without_interval": None if self.noise is None else self.noise.exact_rows,
            "operators_time_error": self.operators_time_error,
            "energy_error": self.energy_error,
            **_noise_fields(
                (
                    "energy_interval",
                    "full_run_energy_interval",
                    "energy_error_interval",
                    "energy_within_noise",
                ),
                self.energy_interval,
                self.full_run_energy_interval,
                self.energy_error_interval,
            ),
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
            "no_estimate": self.no_estimate,
            "warnings": self.warnings,
            "notes": self.notes,
        }


def _error_interval(mine: Interval | None, run: Interval | None) -> Interval | None:
    """Return ``mine``'s error against ``run`` with its interval; None without one of width."""
    if mine is None or run is None or mine.value <= 0 or run.value <= 0:
        return None
    if mine.high <= mine.low and run.high <= run.low:
        return None
    return error_interval(mine, run)


def _noise_fields(
    names: tuple[str, str, str, str],
    mine: Interval | None,
    run: Interval | None,
    error: Interval | None,
) -> dict[str, Any]:
    """Return the summary's intervals of one figure (``Interval.as_dict``), named by ``names``.

    ``names``: the estimate's, the run's, the error's, then whether the error's holds 0.
    """
    out: dict[str, Any] = {
        name: None if iv is None else finite_values(iv.as_dict())
        for name, iv in zip(names[:3], (mine, run, error), strict=True)
    }
    out[names[3]] = None if error is None else error.holds(0.0)
    return out
