"""SQLAlchemy 2.0 typed ORM tables: models, operator configurations, devices, jobs, results.

Units are in the column names: ``_s`` seconds, ``_j`` joules, ``_w`` watts, ``_bytes`` bytes,
``flops`` FLOPs (never MACs), ``_per_s`` per second.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_N_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

JsonType = JSON().with_variant(JSONB(), "postgresql")
"""Free-form JSON: JSONB on PostgreSQL, JSON text on SQLite."""

MODES = ("inference", "training")
OP_FORMS = ("module", "function", "opaque")
DEVICE_TYPES = ("gpu", "cpu", "fake")
JOB_TARGETS = ("operator", "model")


class JobStatus(StrEnum):
    """Where a job is: queued, running (under a lease), or ended (done, failed, cancelled)."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


JOB_STATUSES = tuple(s.value for s in JobStatus)
ACTIVE_JOB_STATUSES = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)
"""Statuses of a job that still holds its target: at most one such job per target and kind."""
PEAK_SOURCES = ("spec", "measured", "attained")
"""Where a peak comes from: a spec sheet, a microbenchmark here, or attained by a kind's stored
results (a GPU's L2 roof, ``roofline/attained.py``; revision 0011)."""
TIMINGS = ("eager", "graph")
PREDICTOR_TARGETS: tuple[str, ...] = ("time", "energy")


def utcnow() -> datetime:
    """Return the current time, timezone-aware, in UTC."""
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """Return a stored moment timezone-aware, in UTC.

    The store writes UTC; SQLite hands it back without a zone (RFC 3339 needs the offset), and
    PostgreSQL in the session's zone.
    """
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _enum(values: tuple[str, ...], name: str) -> Enum:
    """Return a portable enum: a VARCHAR with a named CHECK constraint (no native type)."""
    return Enum(*values, name=name, native_enum=False, create_constraint=True, length=16)


class Base(DeclarativeBase):
    """Declarative base with a naming convention, so every constraint has a stable name."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JsonType, list[Any]: JsonType}


class Model(Base):
    """A model as described by one spec: its reference, inputs and mode."""

    __tablename__ = "models"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    reference: Mapped[str | None] = mapped_column(String(500))
    overrides: Mapped[dict[str, Any]] = mapped_column(default=dict)
    mode: Mapped[str] = mapped_column(_enum(MODES, "mode"))
    dtype: Mapped[str] = mapped_column(String(16))
    batch_size: Mapped[int | None] = mapped_column(Integer)
    inputs: Mapped[list[Any]] = mapped_column(default=list)
    description: Mapped[str | None] = mapped_column(Text)
    spec_version: Mapped[int] = mapped_column(Integer)
    spec_hash: Mapped[str] = mapped_column(String(64))
    provenance: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    calls: Mapped[list[Any] | None] = mapped_column(JsonType)
    """The model's calls in order, as positions of its operators (``ModelOperator.position``);
    None for a spec without them (before spec version 3, or a model of over a million calls)."""
    syncs: Mapped[list[Any] | None] = mapped_column(JsonType)
    """Positions in ``calls`` before which the model makes the host wait for the device (spec
    version 3's ``syncs``); None or empty where it never does."""

    operators: Mapped[list[ModelOperator]] = relationship(
        back_populates="model", cascade="all, delete-orphan", passive_deletes=True
    )


class OperatorConfig(Base):
    """One distinct operator configuration, shared by every model that runs it."""

    __tablename__ = "operator_configs"

    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    op: Mapped[str] = mapped_column(String(300), index=True)
    form: Mapped[str] = mapped_column(_enum(OP_FORMS, "op_form"))
    """How it is run: ``module``, ``function`` or ``opaque`` (see ``specs.schema.OpForm``)."""
    mode: Mapped[str] = mapped_column(_enum(MODES, "mode"))
    args: Mapped[dict[str, Any]] = mapped_column(default=dict)
    dtype: Mapped[str | None] = mapped_column(String(16))
    inputs: Mapped[list[Any]] = mapped_column(default=list)
    call: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    outputs: Mapped[list[Any]] = mapped_column(default=list)
    flops: Mapped[int | None] = mapped_column(BigInteger)
    flops_backward: Mapped[int | None] = mapped_column(BigInteger)
    flop_rule: Mapped[str | None] = mapped_column(String(100))
    bytes: Mapped[int | None] = mapped_column(BigInteger)
    params: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ModelOperator(Base):
    """How often a model runs a configuration per forward (or training step), and where."""

    __tablename__ = "model_operators"

    model_id: Mapped[int] = mapped_column(
        ForeignKey("models.id", ondelete="CASCADE"), primary_key=True
    )
    config_id: Mapped[int] = mapped_column(
        ForeignKey("operator_configs.id", ondelete="RESTRICT"), primary_key=True, index=True
    )
    position: Mapped[int] = mapped_column(Integer)
    count: Mapped[int] = mapped_column(Integer)
    locations: Mapped[list[Any]] = mapped_column(default=list)

    model: Mapped[Model] = relationship(back_populates="operators")
    config: Mapped[OperatorConfig] = relationship()

    __table_args__ = (CheckConstraint("count >= 1", name="count_positive"),)


class DeviceKind(Base):
    """A kind of device (an H100 SXM, a CPU model); measurements belong to kinds, not hosts."""

    __tablename__ = "device_kinds"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    type: Mapped[str] = mapped_column(_enum(DEVICE_TYPES, "device_type"))
    vendor: Mapped[str | None] = mapped_column(String(100))
    architecture: Mapped[str | None] = mapped_column(String(100))
    memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    info: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class DataSource(Base):
    """A public data set whose results were imported (``opdb import``): where figures come from.

    A result with no source (``source_id`` None) is operator-db's own measurement; one with a
    source was measured by others, with their method (``method``), and imported.
    """

    __tablename__ = "data_sources"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    """Short stable name, e.g. ``neusight``."""
    title: Mapped[str] = mapped_column(String(300))
    url: Mapped[str | None] = mapped_column(String(500))
    version: Mapped[str | None] = mapped_column(String(100))
    """The data set's version or commit."""
    license: Mapped[str | None] = mapped_column(String(100))
    citation: Mapped[str | None] = mapped_column(Text)
    method: Mapped[str | None] = mapped_column(Text)
    """How its figures were measured, in words (timer, repetitions, what a figure includes)."""
    info: Mapped[dict[str, Any]] = mapped_column(default=dict)
    """Software versions and anything else the data set says of itself."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Host(Base):
    """One device on one machine, as registered by a worker."""

    __tablename__ = "hosts"

    id: Mapped[int] = mapped_column(primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255))
    device_id: Mapped[str] = mapped_column(String(100))
    device_kind_id: Mapped[int] = mapped_column(ForeignKey("device_kinds.id", ondelete="RESTRICT"))
    info: Mapped[dict[str, Any]] = mapped_column(default=dict)
    counter_update_period_s: Mapped[float | None] = mapped_column(Float)
    idle_power_w: Mapped[float | None] = mapped_column(Float)
    first_seen: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    device_kind: Mapped[DeviceKind] = relationship()

    __table_args__ = (UniqueConstraint("hostname", "device_id"),)


_ACTIVE = "status IN (" + ", ".join(f"'{s}'" for s in ACTIVE_JOB_STATUSES) + ")"
"""SQL for 'the job is active' in the partial unique indexes below."""


class Job(Base):
    """Measure an operator configuration, or a whole model, on a device kind."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    target: Mapped[str] = mapped_column(_enum(JOB_TARGETS, "job_target"))
    config_id: Mapped[int | None] = mapped_column(
        ForeignKey("operator_configs.id", ondelete="CASCADE")
    )
    model_id: Mapped[int | None] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    device_kind_id: Mapped[int] = mapped_column(ForeignKey("device_kinds.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(
        _enum(JOB_STATUSES, "job_status"), default=JobStatus.QUEUED.value
    )
    priority: Mapped[int] = mapped_column(Integer, default=0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)
    options: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint(
            "(target = 'operator' AND config_id IS NOT NULL AND model_id IS NULL) OR "
            "(target = 'model' AND model_id IS NOT NULL AND config_id IS NULL)",
            name="target_matches",
        ),
        Index("ix_jobs_claim", "device_kind_id", "status", "priority", "id"),
        # At most one queued or running job per target and device kind.
        Index(
            "uq_jobs_active_config",
            "config_id",
            "device_kind_id",
            unique=True,
            sqlite_where=text(f"{_ACTIVE} AND config_id IS NOT NULL"),
            postgresql_where=text(f"{_ACTIVE} AND config_id IS NOT NULL"),
        ),
        Index(
            "uq_jobs_active_model",
            "model_id",
            "device_kind_id",
            unique=True,
            sqlite_where=text(f"{_ACTIVE} AND model_id IS NOT NULL"),
            postgresql_where=text(f"{_ACTIVE} AND model_id IS NOT NULL"),
        ),
    )


class _Result:
    """Columns shared by per-operator measurements and full-model runs.

    Statistics are derived from ``raw`` (kept so that they can be recomputed); per-call figures are
    the window or block totals divided by the number of calls.
    """

    dtype: Mapped[str] = mapped_column(String(16))
    timing: Mapped[str] = mapped_column(_enum(TIMINGS, "timing"), default="eager")
    cache_mode: Mapped[str] = mapped_column(String(16), default="warm")
    threads: Mapped[int | None] = mapped_column(Integer)
    calls_per_block: Mapped[int] = mapped_column(Integer)
    blocks: Mapped[int] = mapped_column(Integer)
    time_median_s: Mapped[float] = mapped_column(Float)
    time_mean_s: Mapped[float] = mapped_column(Float)
    time_iqr_s: Mapped[float] = mapped_column(Float)
    time_cv: Mapped[float] = mapped_column(Float)
    time_low_s: Mapped[float | None] = mapped_column(Float)
    time_high_s: Mapped[float | None] = mapped_column(Float)
    """The confidence interval of ``time_median_s`` over the blocks, s: the exact
    order-statistic interval of a median (``operator_db.stats.median_interval``); None where
    the samples are not known (imported results, results from before revision 0013)."""
    time_ci_level: Mapped[float | None] = mapped_column(Float)
    """The coverage that interval holds (≥ 0.95 from 6 blocks on; less with fewer)."""
    energy_low_j: Mapped[float | None] = mapped_column(Float)
    energy_high_j: Mapped[float | None] = mapped_column(Float)
    """The interval of ``energy_per_call_j`` over the energy trials, J (same method)."""
    energy_ci_level: Mapped[float | None] = mapped_column(Float)
    """The coverage of the energy interval (few trials: below 0.95, said so)."""
    trials: Mapped[int] = mapped_column(Integer, default=0)
    window_s: Mapped[float | None] = mapped_column(Float)
    calls_per_window: Mapped[int | None] = mapped_column(Integer)
    window_time_per_call_s: Mapped[float | None] = mapped_column(Float)
    """Median over energy trials of the per-call time inside the windows, in s: the time in the
    regime (clocks, heat) the energy was read in (revision 0004)."""
    host_time_per_call_s: Mapped[float | None] = mapped_column(Float)
    """GPU: median per-call time the host took to issue the calls (enqueue), in s; the device's
    time is ``time_median_s``. None where the host waits for each call (CPU). Revision 0004."""
    energy_source: Mapped[str | None] = mapped_column(String(32))
    energy_unavailable: Mapped[str | None] = mapped_column(Text)
    energy_per_call_j: Mapped[float | None] = mapped_column(Float)
    dynamic_energy_per_call_j: Mapped[float | None] = mapped_column(Float)
    energy_iqr_j: Mapped[float | None] = mapped_column(Float)
    power_mean_w: Mapped[float | None] = mapped_column(Float)
    idle_power_w: Mapped[float | None] = mapped_column(Float)
    energy_disagreement: Mapped[float | None] = mapped_column(Float)
    flags: Mapped[list[Any]] = mapped_column(default=list)
    raw: Mapped[dict[str, Any]] = mapped_column(default=dict)
    provenance: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    source_ref: Mapped[str | None] = mapped_column(String(64))
    """Imported results: the identity of the row within its source (a digest of what it says),
    so that an import run twice adds nothing (revision 0010); None for own measurements."""


class Measurement(_Result, Base):
    """Per-call time and energy of one operator configuration on one device kind."""

    __tablename__ = "measurements"

    id: Mapped[int] = mapped_column(primary_key=True)
    config_id: Mapped[int] = mapped_column(ForeignKey("operator_configs.id", ondelete="CASCADE"))
    device_kind_id: Mapped[int] = mapped_column(ForeignKey("device_kinds.id", ondelete="CASCADE"))
    host_id: Mapped[int | None] = mapped_column(ForeignKey("hosts.id", ondelete="SET NULL"))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    source_id: Mapped[int | None] = mapped_column(ForeignKey("data_sources.id", ondelete="CASCADE"))
    """The data set it was imported from; None: measured by operator-db (revision 0010)."""

    __table_args__ = (
        UniqueConstraint("source_id", "source_ref"),
        # "All measurements of a model's configurations on a device kind": model_operators gives
        # the configurations (by model_id), this index their measurements (by config and kind).
        # It holds every column that finds the newest result of a configuration, kind, cache mode
        # and timing, own measurements first, so that search reads the index alone
        # (queries.results, revisions 0005 and 0010).
        Index(
            "ix_measurements_lookup",
            "device_kind_id",
            "config_id",
            "cache_mode",
            "timing",
            "created_at",
            "source_id",
        ),
    )


class FullModelRun(_Result, Base):
    """Per-call time and energy of a whole model (forward, or a training step) on a device kind."""

    __tablename__ = "full_model_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    device_kind_id: Mapped[int] = mapped_column(ForeignKey("device_kinds.id", ondelete="CASCADE"))
    host_id: Mapped[int | None] = mapped_column(ForeignKey("hosts.id", ondelete="SET NULL"))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    source_id: Mapped[int | None] = mapped_column(ForeignKey("data_sources.id", ondelete="CASCADE"))
    """The data set it was imported from; None: measured by operator-db (revision 0010)."""
    hollow_time_s: Mapped[float | None] = mapped_column(Float)
    """Median per-call time of the model's hollow run, in s: every recorded module returns its
    recorded output without computing, functional operators still run (inference only)."""
    hollow_host_time_s: Mapped[float | None] = mapped_column(Float)
    """GPU: the host's per-call time to issue the hollow run, in s: the Python and launches the
    model spends outside its recorded modules (revision 0004)."""
    replay: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    """CPU, inference: the model's operators timed in a replay of its call order
    (``measure.replay``, revision 0009): ``per_call_s`` (configuration id as text → median time
    per call inside the replay, in s), ``time_s`` (a whole pass), ``passes``, ``calls``,
    ``chained`` (share of calls fed the previous output) and ``copies``. None where not run."""

    __table_args__ = (
        UniqueConstraint("source_id", "source_ref"),
        Index(
            "ix_full_model_runs_lookup",
            "device_kind_id",
            "model_id",
            "cache_mode",
            "timing",
            "created_at",
            "source_id",
        ),
    )


class DevicePeak(Base):
    """A peak of a device kind: spec-sheet or measured; compute per dtype, or a bandwidth.

    A bandwidth is memory's (``level`` None) or, measured on a CPU, a cache level's.
    """

    __tablename__ = "device_peaks"

    id: Mapped[int] = mapped_column(primary_key=True)
    device_kind_id: Mapped[int] = mapped_column(
        ForeignKey("device_kinds.id", ondelete="CASCADE"), index=True
    )
    source: Mapped[str] = mapped_column(_enum(PEAK_SOURCES, "peak_source"))
    dtype: Mapped[str | None] = mapped_column(String(16))
    flops_per_s: Mapped[float | None] = mapped_column(Float)
    bytes_per_s: Mapped[float | None] = mapped_column(Float)
    level: Mapped[str | None] = mapped_column(String(8))
    """Bandwidth of a cache level (``L2``, ``L3``: a CPU's, measured); None: memory (DRAM, HBM)."""
    capacity_bytes: Mapped[float | None] = mapped_column(Float)
    """What the cache ``level`` holds for the cores measured, bytes; None for memory."""
    reference: Mapped[str | None] = mapped_column(Text)
    host_id: Mapped[int | None] = mapped_column(ForeignKey("hosts.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class NcuCounter(Base):
    """Hardware counters of one call of a configuration on a device kind, from Nsight Compute.

    Summed over the kernels of the one call profiled (``ncu --nvtx``, docs/ncu.md). ``None``
    where the profile did not hold the metric. FLOPs are counted from the FP instructions per
    precision (``add + mul + 2 × fma``); tensor-core work is not in them, hence
    ``tensor_instructions``. Several imports of a configuration and kind keep their rows; the
    newest counts.
    """

    __tablename__ = "ncu_counters"

    id: Mapped[int] = mapped_column(primary_key=True)
    config_id: Mapped[int] = mapped_column(ForeignKey("operator_configs.id", ondelete="CASCADE"))
    device_kind_id: Mapped[int] = mapped_column(ForeignKey("device_kinds.id", ondelete="CASCADE"))
    kernels: Mapped[int] = mapped_column(Integer)
    """Kernels profiled in the configuration's range (one call)."""
    gpu_time_s: Mapped[float | None] = mapped_column(Float)
    """Σ of the kernels' ``gpu__time_duration.sum``, s (under the profiler: its clocks, its
    cache flushes)."""
    dram_read_bytes: Mapped[int | None] = mapped_column(BigInteger)
    dram_write_bytes: Mapped[int | None] = mapped_column(BigInteger)
    flops_fp32: Mapped[int | None] = mapped_column(BigInteger)
    flops_fp16: Mapped[int | None] = mapped_column(BigInteger)
    flops_fp64: Mapped[int | None] = mapped_column(BigInteger)
    tensor_instructions: Mapped[int | None] = mapped_column(BigInteger)
    """Warp instructions on the tensor pipe (``sm__inst_executed_pipe_tensor.sum``): > 0 means
    FLOPs the FP counters do not see."""
    source: Mapped[str] = mapped_column(String(500))
    """The file imported (its name)."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    """When it was imported."""

    __table_args__ = (Index("ix_ncu_counters_lookup", "device_kind_id", "config_id", "created_at"),)
