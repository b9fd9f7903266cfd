"""The pages' sign-ins, kept server-side: a cookie is a random value, revocable

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07 03:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ui_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("token_digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ui_sessions")),
        sa.UniqueConstraint("digest", name=op.f("uq_ui_sessions_digest")),
    )
    op.create_index(
        op.f("ix_ui_sessions_expires_at"), "ui_sessions", ["expires_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_ui_sessions_expires_at"), table_name="ui_sessions")
    op.drop_table("ui_sessions")
