"""HTTP request and response bodies of the REST API."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictBool

from api.schemas_names import KindName
from operator_db.db.models import as_utc
from operator_db.roofline.chips import MemoryType

T = TypeVar("T")


Timestamp = Annotated[datetime, AfterValidator(as_utc)]
"""A moment in UTC, written with its offset (RFC 3339 ``date-time``)."""


def _not_a_boolean(value: object) -> object:
    # JSON's true is not the number 1: a boolean where a number belongs is the client's mistake.
    if isinstance(value, bool):
        raise ValueError("a number is expected, not a boolean")
    return value


NotBool = BeforeValidator(_not_a_boolean)
"""Refuses ``true``/``false`` for a number (pydantic's lax mode would take them as 1 and 0)."""


class Page(BaseModel, Generic[T]):
    """One page of a list: its items, how many match in all, and where the page starts."""

    items: list[T]
    total: int = Field(description="How many items match the filters in all.")
    limit: int
    offset: int


class Health(BaseModel):
    """Whether the service can reach its database and at which schema revision it is."""

    status: Literal["ok"]
    database: str = Field(description="The database's kind: 'sqlite' or 'postgresql' (no URL).")
    revision: str | None
    head: str = Field(description="The revision this code expects.")
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
    warnings: list[str] = Field(
        default_factory=list,
        description="One line per known configuration whose stored FLOPs, bytes, params or "
        "outputs differ from the spec's, naming it and the fields (the stored values are kept); "
        "the first 20, then a count.",
    )


SOURCE = (
    "'measured' (operator-db's own measurement) or the name of the data set it was imported from "
    "(measured by others, with their method: `opdb import`, GET /data-sources)"
)
"""What a ``source`` field holds, for the descriptions."""


class ModelKindOut(BaseModel):
    """What a model has on one device kind: its configurations' results, its whole-model runs."""

    device_kind: str
    configs_with_results: int = Field(
        description="Its configurations with a stored result on the kind, own or imported."
    )
    configs_imported: int = Field(
        description="Of those, the ones with imported results only: their figure is a data "
        "set's, not operator-db's own (an own result counts before an imported one)."
    )
    model_runs: dict[str, int] = Field(
        description=f"Whole-model runs on the kind per source: {SOURCE}."
    )


class ModelSummaryOut(BaseModel):
    """A model with its totals per forward (or training step) and what it has on each kind."""

    name: str
    reference: str | None
    mode: str
    batch_size: int | None
    configs: int
    calls: int
    flops: int = Field(description="Σ count × forward FLOPs, in FLOPs.")
    params: int = Field(description="Σ count × parameters, in elements.")
    device_kinds: list[ModelKindOut] = Field(
        description="The device kinds it has figures on (a configuration's result or a "
        "whole-model run), by name; measured or not, a model is listed."
    )


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
    """A model and its first operator configurations in spec order (all: ``.../operators``)."""

    inputs: list[dict[str, Any]]
    dtype: str
    spec_hash: str
    operators: list[OperatorOut] = Field(
        description="The first configurations in spec order (at most 100; `configs` counts all)."
    )


class PredictorOut(BaseModel):
    """One stored cost model of an operator type on a device kind (``opdb predict train``)."""

    version: int = Field(description="Training run; estimates use the newest.")
    op: str = Field(description="Operator type, or '*' for the fallback over every type.")
    target: str = Field(description="time or energy.")
    samples: int = Field(description="Configurations it was fitted on.")
    estimator: str = Field(description="boosting, ridge, or fallback (the '*' model predicts).")
    cv_median_error: float | None = Field(description="Median |error| across its CV folds.")
    level: float = Field(description="Nominal coverage of its intervals.")
    interval_factor: float = Field(
        description="Its interval is the prediction ÷/× this factor (before the roof floor)."
    )
    data_hash: str = Field(description="SHA-256 identity of the training data.")
    trained_at: Timestamp
    library: dict[str, Any]


class EnqueueIn(BaseModel):
    """Which device kind to measure a model on, and how urgently."""

    model_config = ConfigDict(extra="forbid")

    device_kind: KindName = Field(
        description="The device kind's name, e.g. 'NVIDIA H100 80GB HBM3' (created if new): "
        "printable characters, no '/', no space at either end.",
    )
    priority: Annotated[int, NotBool] = Field(
        default=0, ge=-1_000_000, le=1_000_000, description="Higher runs first."
    )
    coverage: Annotated[float, NotBool] = Field(default=0.9, gt=0, le=1)
    model_run: StrictBool = True
    interleaved: StrictBool = Field(
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


class ConfigOut(BaseModel):
    """One operator configuration, shared by every model that runs it."""

    key: str
    op: str
    form: str
    mode: str
    dtype: str | None
    args: dict[str, Any]
    inputs: list[dict[str, Any]]
    call: dict[str, Any] | None
    outputs: list[dict[str, Any]]
    flops: int | None = Field(description="Forward FLOPs per call.")
    flops_backward: int | None = Field(description="Backward FLOPs per call (training).")
    bytes: int | None = Field(description="Compulsory bytes per call.")
    params: int


class MeasurementOut(BaseModel):
    """One stored result of a configuration on a device kind (times in s, energies in J)."""

    id: int
    device_kind: str
    timing: str
    cache_mode: str
    dtype: str
    threads: int | None
    calls_per_block: int
    blocks: int
    time_median_s: float
    time_mean_s: float
    time_iqr_s: float
    time_cv: float
    window_time_per_call_s: float | None
    host_time_per_call_s: float | None
    trials: int
    energy_source: str | None
    energy_unavailable: str | None
    energy_per_call_j: float | None
    dynamic_energy_per_call_j: float | None
    power_mean_w: float | None
    flags: list[str]
    host_id: int | None
    job_id: int | None
    created_at: Timestamp
    source: str = Field(description=f"Where the result comes from: {SOURCE}.")
    source_file: str | None = Field(
        description="An imported result: the data set's file it was read from (its provenance)."
    )
    source_line: int | None = Field(
        description="An imported result: its line in that file (the header is line 1)."
    )


class CountersOut(BaseModel):
    """A configuration's newest Nsight Compute counters on a device kind (one call; docs/ncu.md)."""

    device_kind: str
    kernels: int
    gpu_time_s: float | None
    dram_read_bytes: int | None
    dram_write_bytes: int | None
    flops_fp32: int | None = Field(description="add + mul + 2 × fma FP32 instructions.")
    flops_fp16: int | None
    flops_fp64: int | None
    tensor_instructions: int | None = Field(
        description="Tensor-pipe instructions: their FLOPs are not in the flops_* counts."
    )
    source: str
    created_at: Timestamp


class JobOut(BaseModel):
    """A job: measure a configuration, or a whole model, on a device kind."""

    id: int
    target: str
    config_key: str | None
    model: str | None
    device_kind: str
    status: str
    priority: int
    attempts: int
    max_attempts: int
    lease_owner: str | None
    lease_expires_at: Timestamp | None
    last_error: str | None
    options: dict[str, Any]
    created_at: Timestamp
    updated_at: Timestamp
    finished_at: Timestamp | None


class HostOut(BaseModel):
    """One device of one machine, as a worker registered it."""

    id: int
    hostname: str
    device_id: str
    device_kind: str
    counter_update_period_s: float | None
    idle_power_w: float | None
    first_seen: Timestamp
    last_seen: Timestamp


class PeakOut(BaseModel):
    """One peak of a device kind: compute for a dtype (FLOP/s), or bandwidth (bytes/s)."""

    source: str
    dtype: str | None
    flops_per_s: float | None
    bytes_per_s: float | None
    level: str | None = Field(
        default=None, description="A CPU cache level's bandwidth (L2, L3); null: memory's."
    )
    capacity_bytes: float | None = Field(
        default=None, description="What the cache level holds, bytes; null for memory."
    )
    reference: str | None
    host_id: int | None


class ChipSpecOut(BaseModel):
    """A chip's spec sheet (the shipped table, roofline/peaks.yaml): the vendor's figures."""

    name: str = Field(description="The chip's name with its form factor.")
    category: str = Field(description="datacenter_gpu, consumer_gpu, server_cpu, asic or soc.")
    vendor: str
    sms: int | None = Field(description="GPU: streaming multiprocessors enabled.")
    cores_per_sm: int | None = Field(description="GPU: FP32 lanes ('CUDA cores') per SM.")
    cores: int | None = Field(description="Server CPU: cores per socket.")
    boost_clock_mhz: int | None = Field(
        description="GPU: the clock the float32 peak is computed from, MHz."
    )
    base_clock_mhz: int | None
    memory_bytes: int | None = Field(description="Device memory, bytes.")
    l2_cache_bytes: int | None = Field(description="Last-level (L2) cache, bytes.")
    compute_capability: str | None = Field(description="NVIDIA GPU: CUDA compute capability.")
    board_power_w: float | None = Field(description="Board's maximum power (TDP / TBP), W.")
    memory_type: MemoryType | None = Field(description="DRAM family: HBM, GDDR, LPDDR or DDR.")
    memory_bandwidth_bytes_per_s: float
    peak_flops_per_s: dict[str, float] = Field(
        description="Dense peak per dtype, FLOP/s (int8: OP/s); tf32: float32 matmuls on "
        "tensor cores."
    )
    source: str = Field(description="The vendor document the figures come from.")
    notes: str


class KindSourceOut(BaseModel):
    """One source of a device kind's results: operator-db's own measurements, or a data set."""

    source: str = Field(description=f"{SOURCE}.")
    imported: bool = Field(description="Whether the results were imported from a data set.")
    results: int = Field(description="Per-operator results stored on the kind from it.")
    model_runs: int = Field(description="Whole-model runs stored on the kind from it.")
    title: str | None = Field(default=None, description="A data set's title.")
    version: str | None = Field(default=None, description="A data set's version or commit.")
    license: str | None = None
    url: str | None = None
    method: str | None = Field(
        default=None, description="How the data set measured its figures, in words."
    )
    device: dict[str, Any] | None = Field(
        default=None, description="The data set's own description of the device, as it ships it."
    )
    corrected: dict[str, Any] | None = Field(
        default=None, description="That description with operator-db's corrections applied."
    )
    corrections: dict[str, str] = Field(
        default_factory=dict,
        description="Each corrected field, with why and where the right figure comes from.",
    )


class DeviceKindOut(BaseModel):
    """A device kind: one model of chip; results belong to kinds."""

    name: str
    type: str
    vendor: str | None
    architecture: str | None
    memory_bytes: int | None
    spec: ChipSpecOut | None = Field(
        description="The chip's spec sheet where the shipped table has it (an exact name or an "
        "alias, e.g. the NVML name); null elsewhere."
    )
    sources: list[KindSourceOut] = Field(
        description="Where its results come from: own measurements first, then each data set "
        "that measured the kind (with its view of the device), by name."
    )


class DeviceKindDetail(DeviceKindOut):
    """A device kind with its hosts and stored peaks."""

    hosts: list[HostOut]
    peaks: list[PeakOut]


class DataSourceKindOut(BaseModel):
    """What a data set holds on one device kind."""

    device_kind: str
    results: int
    model_runs: int


class DataSourceOut(BaseModel):
    """A public data set whose results were imported (`opdb import`): its provenance and counts."""

    name: str = Field(description="Its short name: what a figure's 'source' says.")
    title: str
    url: str | None
    version: str | None = Field(description="The data set's version or commit.")
    license: str | None
    citation: str | None
    method: str | None = Field(description="How its figures were measured, in words.")
    info: dict[str, Any] = Field(description="Software versions and what else it says of itself.")
    created_at: Timestamp = Field(description="When it was first imported.")
    results: int = Field(description="Per-operator results imported from it.")
    model_runs: int = Field(description="Whole-model runs imported from it.")
    device_kinds: list[DataSourceKindOut] = Field(description="Its results per device kind.")
