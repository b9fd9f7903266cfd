"""Causal LMs' generation: an LLM, its step models (prefill, decode steps) and its generate() runs

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28 04:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0014"
down_revision: str | None = "0013"

_JSON = sa.JSON().with_variant(JSONB(), "postgresql")
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "llms",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("reference", sa.String(length=500), nullable=False),
        sa.Column("overrides", _JSON, nullable=False),
        sa.Column("dtype", sa.String(length=16), nullable=False),
        sa.Column("params", sa.BigInteger(), nullable=False),
        sa.Column("weight_bytes", sa.BigInteger(), nullable=False),
        sa.Column("kv_bytes_per_token", sa.BigInteger(), nullable=False),
        sa.Column("max_context", sa.Integer(), nullable=True),
        sa.Column("info", _JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_llms")),
        sa.UniqueConstraint("name", name=op.f("uq_llms_name")),
    )
    op.create_table(
        "llm_steps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("llm_id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column(
            "phase",
            sa.Enum(
                "prefill",
                "decode",
                name="llm_phase",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("batch", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["llm_id"], ["llms.id"], name=op.f("fk_llm_steps_llm_id_llms"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["models.id"],
            name=op.f("fk_llm_steps_model_id_models"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_llm_steps")),
        sa.UniqueConstraint(
            "llm_id",
            "phase",
            "batch",
            "tokens",
            name=op.f("uq_llm_steps_llm_id_phase_batch_tokens"),
        ),
    )
    op.create_table(
        "generation_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("llm_id", sa.Integer(), nullable=False),
        sa.Column("device_kind_id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=True),
        sa.Column("batch", sa.Integer(), nullable=False),
        sa.Column("prompt", sa.Integer(), nullable=False),
        sa.Column("new_tokens", sa.Integer(), nullable=False),
        sa.Column("dtype", sa.String(length=16), nullable=False),
        sa.Column("threads", sa.Integer(), nullable=True),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("ttft_s", sa.Float(), nullable=False),
        sa.Column("ttft_low_s", sa.Float(), nullable=False),
        sa.Column("ttft_high_s", sa.Float(), nullable=False),
        sa.Column("tpot_s", sa.Float(), nullable=True),
        sa.Column("tpot_low_s", sa.Float(), nullable=True),
        sa.Column("tpot_high_s", sa.Float(), nullable=True),
        sa.Column("total_s", sa.Float(), nullable=False),
        sa.Column("total_low_s", sa.Float(), nullable=False),
        sa.Column("total_high_s", sa.Float(), nullable=False),
        sa.Column("ci_level", sa.Float(), nullable=False),
        sa.Column("between_ttft_s", sa.Float(), nullable=True),
        sa.Column("between_step_s", sa.Float(), nullable=True),
        sa.Column("between_tail_s", sa.Float(), nullable=True),
        sa.Column("energy_j", sa.Float(), nullable=True),
        sa.Column("energy_low_j", sa.Float(), nullable=True),
        sa.Column("energy_high_j", sa.Float(), nullable=True),
        sa.Column("energy_source", sa.String(length=32), nullable=True),
        sa.Column("energy_unavailable", sa.String(length=500), nullable=True),
        sa.Column("raw", _JSON, nullable=False),
        sa.Column("provenance", _JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["device_kind_id"],
            ["device_kinds.id"],
            name=op.f("fk_generation_runs_device_kind_id_device_kinds"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["host_id"],
            ["hosts.id"],
            name=op.f("fk_generation_runs_host_id_hosts"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["llm_id"], ["llms.id"], name=op.f("fk_generation_runs_llm_id_llms"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_generation_runs")),
    )
    with op.batch_alter_table("generation_runs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_generation_runs_lookup",
            ["llm_id", "device_kind_id", "batch", "prompt", "new_tokens", "created_at"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("generation_runs", schema=None) as batch_op:
        batch_op.drop_index("ix_generation_runs_lookup")

    op.drop_table("generation_runs")
    op.drop_table("llm_steps")
    op.drop_table("llms")
