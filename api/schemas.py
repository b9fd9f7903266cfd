"""HTTP request and response bodies of the REST API."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class Health(BaseModel):
    """Whether the service can reach its database and at which schema revision it is."""

    status: Literal["ok"]
    database: str
    revision: str | None
    version: str


class IngestedSpec(BaseModel):
    """What storing one uploaded spec did."""

    source: str
    model: str
    status: Literal["new", "unchanged", "replaced"]
    operators: int
    new_configs: int
    known_configs: int
    disagreeing_configs: int


class ModelSummaryOut(BaseModel):
    """A model with its totals per forward (or training step)."""

    name: str
    reference: str | None
    mode: str
    batch_size: int | None
    configs: int
    calls: int
    flops: int = Field(description="Σ count × forward FLOPs, in FLOPs.")
    params: int = Field(description="Σ count × parameters, in elements.")


class OperatorOut(BaseModel):
    """One configuration of a model, with the model's count and locations."""

    key: str
    op: str
    form: str
    inputs: list[dict[str, Any]]
    count: int
    flops: int | None = Field(description="Forward FLOPs per call.")
    bytes: int | None = Field(description="Compulsory bytes per call.")
    params: int
    locations: list[str]


class ModelDetail(ModelSummaryOut):
    """A model and its operator configurations in spec order."""

    inputs: list[dict[str, Any]]
    dtype: str
    spec_hash: str
    operators: list[OperatorOut]


class EstimateOut(BaseModel):
    """A model's composed cost on a device kind (times in s, energies in J)."""

    model: str
    device_kind: str
    mode: str
    timing: str
    energy: str
    cache_mode: str = Field(description="warm or cold: which results are composed.")
    time_s: float
    between_ops_s: float | None
    host_time_s: float | None = Field(
        description="GPU: the host's stage of the pipeline estimate (issue time), in s."
    )
    bound_by: str | None = Field(
        description="GPU: which stage bounds the estimate, 'device' or 'host'; null elsewhere."
    )
    total_time_s: float
    energy_j: float | None
    coverage: float
    coverage_roofline: float | None
    unmeasured: int
    opaque: int
    full_run_time_s: float | None
    full_run_energy_j: float | None
    time_error: float | None
    operators_time_error: float | None
    energy_error: float | None
    roofline_time_s: float | None
    peaks: dict[str, Any] | None
    notes: list[str]
    by_op: list[dict[str, Any]]
    configurations: list[dict[str, Any]]


class EnqueueIn(BaseModel):
    """Which device kind to measure a model on, and how urgently."""

    device_kind: str = Field(
        min_length=1,
        max_length=200,
        description="The device kind's name, e.g. 'NVIDIA H100 80GB HBM3' (created if new).",
    )
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000, description="Higher runs first.")
    coverage: float = Field(default=0.9, gt=0, le=1)
    model_run: bool = True
    interleaved: bool = Field(
        default=False,
        description="One job measuring the model and all its configurations in interleaved "
        "rounds on one host (needs model_run).",
    )


class EnqueueOut(BaseModel):
    """What enqueueing did."""

    model: str
    device_kind: str
    queued_configs: int
    already_measured: int
    already_queued: int
    opaque: int
    queued_model_run: bool
