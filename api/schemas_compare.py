"""Response bodies of ``GET /models/{name}/compare``: one model on every device kind.

Beside ``api/schemas.py`` (at the 500 lines a module may have), in its style.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class CompareRowOut(BaseModel):
    """The model on one device kind: its time and energy there, and how they are known."""

    device_kind: str
    how: Literal["measured", "measured run", "predicted"] = Field(
        description="'measured': composed from the kind's own (or imported) results of its "
        "configurations; 'measured run': only the whole model was measured there; 'predicted': "
        "by the cross-device model."
    )
    time_s: float | None = Field(description="Per forward (training: step) of the model, s.")
    low_s: float | None = Field(
        description="The interval's low end, s; null where measured without one."
    )
    high_s: float | None = Field(
        description="The interval's high end, s; null where measured without one."
    )
    energy_j: float | None = Field(description="Per forward (training: step), J, where known.")
    bound_by: str | None = Field(
        description="What bounds the model on the kind's roofline (compute or memory); null "
        "where no roof is known."
    )
    coverage: float = Field(
        description="Share of the model's calls with a figure on the kind, measured or predicted."
    )
    source: str = Field(description="Where the figures come from, in words.")
    full_run_s: float | None = Field(
        description="A measured run of the whole model on the kind, s."
    )
    level: float | None = Field(description="Nominal coverage of the interval (0.9: 90 %).")


class CompareOut(BaseModel):
    """One model on every device kind it has figures on or can be predicted on, fastest first."""

    model: str
    rows: list[CompareRowOut] = Field(
        description="One per device kind: the kinds it has results on (measured), then every GPU "
        "of the chips table the newest cross-device model can place (predicted); fastest first."
    )
