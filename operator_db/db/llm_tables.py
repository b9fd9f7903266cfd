"""The tables of causal LMs' generation: an LLM, the step models it is composed of, its runs.

An LLM (``llms``) is a causal LM reference with its overrides and dtype. Its generation is
composed from step models (``llm_steps``: each a model of ``models``, the prefill of a prompt or
one decode step over a cache of a given length, at a batch size) and checked against whole
``generate()`` runs (``generation_runs``) measured on a device kind. Units are in the column names.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from operator_db.db.models import Base, _enum, utcnow

PHASES = ("prefill", "decode")


class Llm(Base):
    """A causal LM as generated from: its reference, overrides, dtype and what it holds."""

    __tablename__ = "llms"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    reference: Mapped[str] = mapped_column(String(500))
    overrides: Mapped[dict[str, Any]] = mapped_column(default=dict)
    dtype: Mapped[str] = mapped_column(String(16))
    params: Mapped[int] = mapped_column(BigInteger)
    """Parameters (elements; a tied parameter once)."""
    weight_bytes: Mapped[int] = mapped_column(BigInteger)
    """Bytes of the parameters in ``dtype``: what every decode step reads once."""
    kv_bytes_per_token: Mapped[int] = mapped_column(BigInteger)
    """Bytes the key/value cache holds per token of one sequence (every layer, K and V)."""
    max_context: Mapped[int | None] = mapped_column(Integer)
    """The longest sequence the config allows (``max_position_embeddings``), tokens."""
    info: Mapped[dict[str, Any]] = mapped_column(default=dict)
    """The config's shape (layers, heads, KV heads, head size, vocabulary) and versions."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class LlmStep(Base):
    """One step model of an LLM at ``batch`` sequences.

    Its prefill of ``tokens`` tokens, or a decode step over a cache of ``tokens`` tokens.
    """

    __tablename__ = "llm_steps"

    id: Mapped[int] = mapped_column(primary_key=True)
    llm_id: Mapped[int] = mapped_column(ForeignKey("llms.id", ondelete="CASCADE"))
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    phase: Mapped[str] = mapped_column(_enum(PHASES, "llm_phase"))
    batch: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[int] = mapped_column(Integer)

    __table_args__ = (UniqueConstraint("llm_id", "phase", "batch", "tokens"),)


class GenerationRun(Base):
    """Whole greedy ``generate()`` runs of an LLM on a device kind: the reference of its estimate.

    Each figure is the median over ``runs`` runs with its interval (``stats.median_interval``).
    ``between_*`` are the time ``generate()`` spends around the model's forwards in those runs
    (each forward timed where it runs): set-up and the first token's work (``between_ttft_s``:
    TTFT − the prefill), between two decode forwards (logits processing, argmax, the stopping
    check; ``between_step_s``), and from the last token to the return (``between_tail_s``).
    """

    __tablename__ = "generation_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    llm_id: Mapped[int] = mapped_column(ForeignKey("llms.id", ondelete="CASCADE"))
    device_kind_id: Mapped[int] = mapped_column(ForeignKey("device_kinds.id", ondelete="CASCADE"))
    host_id: Mapped[int | None] = mapped_column(ForeignKey("hosts.id", ondelete="SET NULL"))
    batch: Mapped[int] = mapped_column(Integer)
    prompt: Mapped[int] = mapped_column(Integer)
    new_tokens: Mapped[int] = mapped_column(Integer)
    dtype: Mapped[str] = mapped_column(String(16))
    threads: Mapped[int | None] = mapped_column(Integer)
    runs: Mapped[int] = mapped_column(Integer)
    ttft_s: Mapped[float] = mapped_column(Float)
    ttft_low_s: Mapped[float] = mapped_column(Float)
    ttft_high_s: Mapped[float] = mapped_column(Float)
    tpot_s: Mapped[float | None] = mapped_column(Float)
    """Median over runs of (total − TTFT) / (new tokens − 1), s; None for one new token."""
    tpot_low_s: Mapped[float | None] = mapped_column(Float)
    tpot_high_s: Mapped[float | None] = mapped_column(Float)
    total_s: Mapped[float] = mapped_column(Float)
    total_low_s: Mapped[float] = mapped_column(Float)
    total_high_s: Mapped[float] = mapped_column(Float)
    ci_level: Mapped[float] = mapped_column(Float)
    between_ttft_s: Mapped[float | None] = mapped_column(Float)
    between_step_s: Mapped[float | None] = mapped_column(Float)
    between_tail_s: Mapped[float | None] = mapped_column(Float)
    energy_j: Mapped[float | None] = mapped_column(Float)
    """Median energy of one whole run, J; None where the device reads none."""
    energy_low_j: Mapped[float | None] = mapped_column(Float)
    energy_high_j: Mapped[float | None] = mapped_column(Float)
    energy_source: Mapped[str | None] = mapped_column(String(32))
    energy_unavailable: Mapped[str | None] = mapped_column(String(500))
    raw: Mapped[dict[str, Any]] = mapped_column(default=dict)
    """``runs``: per run ``ttft_s``, ``steps_s`` (each decode step's time, in order), ``total_s``,
    ``energy_j``, ``forwards_s`` (each forward's time: the prefill, then the decode steps)."""
    provenance: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    __table_args__ = (
        Index(
            "ix_generation_runs_lookup",
            "llm_id",
            "device_kind_id",
            "batch",
            "prompt",
            "new_tokens",
            "created_at",
        ),
    )
