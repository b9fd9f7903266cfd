"""The confidence interval of each result's time and energy, filled for stored own results

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 03:00:00
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("measurements", "full_model_runs")
COLUMNS = (
    "time_low_s",
    "time_high_s",
    "time_ci_level",
    "energy_low_j",
    "energy_high_j",
    "energy_ci_level",
)


def _samples(raw: Any, calls: int) -> list[float]:
    """Return the eager per-call times kept in a result's ``raw`` (empty where none)."""
    if isinstance(raw, str):
        import json

        raw = json.loads(raw)
    if not isinstance(raw, dict):
        return []
    for timing in raw.get("timings") or []:
        if timing.get("method") == "eager" and timing.get("block_s"):
            per = int(timing.get("calls_per_block") or calls or 1)
            return [float(b) / per for b in timing["block_s"]]
    return []


def upgrade() -> None:
    from operator_db.stats import median_interval

    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            for name in COLUMNS:
                batch.add_column(sa.Column(name, sa.Float(), nullable=True))
    bind = op.get_bind()
    for table in TABLES:
        rows = bind.execute(
            sa.text(
                f"SELECT id, raw, calls_per_block FROM {table} "
                "WHERE source_id IS NULL AND timing = 'eager'"
            )
        )
        updates = []
        for row in rows:
            samples = _samples(row.raw, row.calls_per_block)
            if samples:
                ci = median_interval(samples)
                updates.append({"id": row.id, "lo": ci.low, "hi": ci.high, "lv": ci.level})
        if updates:
            bind.execute(
                sa.text(
                    f"UPDATE {table} SET time_low_s = :lo, time_high_s = :hi, "
                    "time_ci_level = :lv WHERE id = :id"
                ),
                updates,
            )


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            for name in reversed(COLUMNS):
                batch.drop_column(name)
