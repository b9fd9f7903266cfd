"""The estimate's HTTP response body: a model composed on a device kind (api/schemas.py's)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from api.schemas import SOURCE
from api.schemas_noise import IntervalOut


class EstimateOut(BaseModel):
    """A model's composed cost on a device kind (times in s, energies in J)."""

    model: str
    device_kind: str
    mode: str
    timing: str
    pipeline: dict[str, float | int | str] | None = None
    """GPU, a spec with its call order: the two stages simulated over the calls in order."""
    host_cpu: str | None = None
    """GPU: the CPU of the host whose run gave the host stage."""
    static_energy_j: float | None = None
    """The static part of the total energy: idle power × the estimated time, J."""
    context: str = "alone"
    """``replay`` where some configurations' times come from a replay of the model's calls."""
    energy: str
    cache_mode: str = Field(description="warm or cold: which results are composed.")
    time_s: float | None = Field(
        description="Σ count × per-call time of the configurations with a figure, s; null where "
        "none has one (no_estimate)."
    )
    between_ops_s: float | None
    between_ops_share: float | None = Field(
        description="The time between operators as a share of total_time_s, where it is added "
        "to it (a CPU); null elsewhere."
    )
    host_time_s: float | None = Field(
        description="GPU: the host's stage of the pipeline estimate (issue time), in s."
    )
    bound_by: str | None = Field(
        description="GPU: which pipeline stage bounds the estimate, 'device' or 'host'; null "
        "elsewhere (the roofline's bound is roofline_bound)."
    )
    roofline_bound: Literal["compute", "memory"] | None = Field(
        default=None,
        description="Which roof bounds most of the model's roofline time on the kind, as the "
        "comparison across kinds gives it; null where the kind has no peaks.",
    )
    total_time_s: float | None = Field(
        description="The estimate of the model's time, s; null (never 0) where no configuration "
        "has a figure on the kind: no_estimate says why, and the whole-model run is the figure."
    )
    energy_j: float | None
    coverage: float
    coverage_roofline: float | None
    unmeasured: int
    opaque: int
    full_run_time_s: float | None
    full_run_energy_j: float | None
    full_run_source: str | None = Field(
        description=f"Where full_run_time_s comes from: {SOURCE}; null without a run."
    )
    sources: dict[str, int] = Field(
        description="Configurations per source of their figure: 'measured' (operator-db's own), "
        "a data set's name (imported: measured by others, with their method, never passed for "
        "operator-db's own), 'predicted' (predict=true); configurations without a figure are "
        "not counted."
    )
    time_error: float | None
    time_interval: IntervalOut | None = Field(
        default=None, description="total_time_s with its 95 % interval (measurement.md)."
    )
    full_run_interval: IntervalOut | None = Field(default=None, description="The run's, the same.")
    time_error_interval: IntervalOut | None = Field(
        default=None, description="time_error with both sides' noise: holding 0, within noise."
    )
    within_noise: bool | None = Field(default=None, description="time_error_interval holds 0.")
    figures_without_interval: int | None = Field(
        default=None, description="Measured figures without an interval, taken as exact."
    )
    operators_time_error: float | None
    energy_error: float | None
    energy_interval: IntervalOut | None = Field(
        default=None,
        description="energy_j with its 95 % interval: the configurations' energy "
        "trials in quadrature, the static part at the time's interval.",
    )
    full_run_energy_interval: IntervalOut | None = Field(
        default=None, description="The run's energy with its interval over its trials."
    )
    energy_error_interval: IntervalOut | None = Field(
        default=None, description="energy_error with both sides' noise: holding 0, within noise."
    )
    energy_within_noise: bool | None = Field(
        default=None, description="energy_error_interval holds 0."
    )
    roofline_time_s: float | None
    peaks: dict[str, Any] | None
    predicted: int = Field(
        description="Configurations whose cost is predicted (predict=true), not measured."
    )
    coverage_predicted: float = Field(description="Predicted calls / all calls of the model.")
    predicted_time_s: float = Field(description="The predicted part of time_s, in s.")
    time_low_s: float | None = Field(
        description="With predictions: time_s with each predicted configuration at its "
        "interval's low end, in s."
    )
    time_high_s: float | None = Field(description="The same at the high end, in s.")
    total_time_low_s: float | None = Field(description="total_time_s at time_low_s, in s.")
    total_time_high_s: float | None = Field(description="total_time_s at time_high_s, in s.")
    predictor: dict[str, Any] | None = Field(
        description="The predictor used: version, device kind, trained_at, samples, data_hash, "
        "level; the cross-device model adds method ('across devices'), mode (zero-shot, "
        "few-shot, own, moved) and from_kinds; null without predictions."
    )
    no_estimate: str | None = Field(
        default=None,
        description="Why there is no estimate (no configuration measured on the kind): then "
        "total_time_s, time_s, energy_j and the errors are null; null where there is one.",
    )
    warnings: list[str] = Field(
        description="What makes the figure rest on something else than measured operators: a "
        "coverage gap (configurations not measured yet, opaque ones) or time between operators "
        "over OPDB_ESTIMATE_BETWEEN_OPS_WARN of the estimate. Empty when the estimate is whole."
    )
    notes: list[str]
    by_op: list[dict[str, Any]]
    configurations: list[dict[str, Any]] = Field(
        description="A page of the configurations, costliest (count × per-call time) first; "
        "'source' says where a row's figure comes from: 'measured' (operator-db's own), a data "
        "set's name (imported), 'predicted', or null where it has none."
    )
    configurations_total: int = Field(description="How many configurations the model has.")
