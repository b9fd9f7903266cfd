"""A figure with its noise, as the API returns it."""

from __future__ import annotations

from pydantic import BaseModel, Field


class IntervalOut(BaseModel):
    """A figure with its confidence interval (``operator_db.stats.Interval``)."""

    value: float | None
    low: float | None = Field(description="Low end; null where infinite (too few samples).")
    high: float | None = Field(description="High end; null where infinite.")
    level: float = Field(description="The coverage it holds (e.g. 0.95).")
    method: str = Field(description="How it was made: order statistics, bootstrap, a sum …")
    n: int | None = Field(default=None, description="Samples it rests on; null: combined.")
