"""Response bodies of ``GET /models/{name}/compare``: one model on every device kind.

Beside ``api/schemas.py`` (at the 500 lines a module may have), in its style.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class CompareRowOut(BaseModel):
    """The model on one device kind: its time and energy there, and how they are known."""

    device_kind: str
    how: Literal["measured", "imported", "measured run", "imported run", "predicted"] = Field(
        description="Who gave the figure. 'measured': composed from operator-db's own results "
        "of the model's configurations on the kind; 'imported': from a data set's results "
        "(named in 'source'; whichever gave more configurations); 'measured run' / 'imported "
        "run': only the whole model was measured there, here or in a data set; 'predicted': by "
        "the cross-device model."
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
    rank_s: float | None = Field(
        default=None,
        description="What ranks the kind, s: its whole-model run where one is measured, else "
        "its estimate. The rows come fastest first by it.",
    )
    run_error: float | None = Field(
        default=None,
        description="(estimate − run) / run, a signed fraction, where the kind has both.",
    )
    run_error_low: float | None = Field(
        default=None,
        description="The error's 95 % interval, low end; null where the estimate or the run is "
        "a single figure without spread (imported as one number).",
    )
    run_error_high: float | None = Field(default=None, description="The interval's high end.")
    run_verdict: Literal["within noise", "beyond noise", "no interval"] | None = Field(
        default=None,
        description="Whether the estimate and the run agree within both sides' noise; 'no "
        "interval' where a side has no spread; null without a run.",
    )
    run_error_text: str | None = Field(
        default=None,
        description="The error against the run in words, as the CLI and the page give it.",
    )
    flips_with: list[str] = Field(
        default_factory=list,
        description="Kinds whose whole-model runs are in the other order than the two estimates "
        "put them: the estimate alone would rank these two wrong.",
    )


class LeftOutOut(BaseModel):
    """A device kind left out of the comparison, and why."""

    device_kind: str
    why: str = Field(
        description="Why, in words: measured too little of the model (and no whole-model run), "
        "no estimate, or not predicted by the cross-device model."
    )


class CompareOut(BaseModel):
    """One model on every device kind it has figures on or can be predicted on, fastest first."""

    model: str
    rows: list[CompareRowOut] = Field(
        description="One per device kind: the kinds it has results on (measured), then every GPU "
        "of the chips table the newest cross-device model can place (predicted); fastest first."
    )
    left_out: list[LeftOutOut] = Field(
        default_factory=list,
        description="Device kinds with figures of the model, or GPUs the cross-device model was "
        "asked for, that are not in the rows, each with why.",
    )
