"""The lookup indexes of results hold cache mode and timing: the newest result from the index

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 08:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = {
    "measurements": ("ix_measurements_lookup", "config_id"),
    "full_model_runs": ("ix_full_model_runs_lookup", "model_id"),
}


def upgrade() -> None:
    for table, (name, target) in INDEXES.items():
        with op.batch_alter_table(table) as batch:
            batch.drop_index(name)
            batch.create_index(
                name, ["device_kind_id", target, "cache_mode", "timing", "created_at"]
            )


def downgrade() -> None:
    for table, (name, target) in INDEXES.items():
        with op.batch_alter_table(table) as batch:
            batch.drop_index(name)
            batch.create_index(name, ["device_kind_id", target, "created_at"])
