"""Response bodies of ``/llms``: a causal LM's generation composed per token (docs/llm.md).

Beside ``api/schemas.py`` (at the 500 lines a module may have), in its style. Times in s, energy in
J, sizes in bytes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from api.schemas_noise import IntervalOut


class PlanOut(BaseModel):
    """A (batch, prompt, new tokens) the LLM was harvested for."""

    batch: int
    prompt: int
    new_tokens: int


class LlmOut(BaseModel):
    """A stored causal LM: what it is, its size, and its step models."""

    name: str
    reference: str = Field(description="Its model reference, e.g. transformers:LlamaForCausalLM.")
    overrides: dict[str, object] = Field(description="Config overrides it was built with.")
    dtype: str
    params: int = Field(description="Parameters.")
    weight_bytes: int
    kv_bytes_per_token: int = Field(description="Key/value cache bytes per cached token.")
    max_context: int | None = Field(description="The longest context its config allows, tokens.")
    shape: dict[str, object] = Field(description="Its config's layers, heads, sizes, vocabulary.")
    plans: list[PlanOut]
    steps: list[str] = Field(description="Its step models' names (prefill and decode steps).")


class ContextPointOut(BaseModel):
    """TPOT at one context: the decode step over it plus the time between forwards."""

    context: int = Field(description="Tokens in the cache the step attends over.")
    time_s: IntervalOut
    how: Literal["measured", "interpolated", "extrapolated", "flat"] = Field(
        description="Whether a step model at this context was measured, or how it was derived."
    )


class BetweenOut(BaseModel):
    """generate()'s own time around the forwards, from its hollow runs."""

    ttft_s: IntervalOut
    step_s: IntervalOut
    tail_s: IntervalOut
    at: list[int] = Field(description="The (batch, prompt, new tokens) of the runs it is from.")


class MeasuredOut(BaseModel):
    """The measured generate() runs at the same (batch, prompt, new tokens)."""

    ttft_s: IntervalOut
    tpot_s: IntervalOut | None
    total_s: IntervalOut
    energy_j: IntervalOut | None = Field(description="A whole run's energy, J, where measured.")
    joules_per_token: float | None = Field(description="energy_j / (batch × new tokens).")
    runs: int
    tokens_per_s: float
    steps_s: list[float] = Field(
        description="Each decode step's median time over the runs, in order: the step over a "
        "cache of prompt + i tokens is the i-th."
    )


class ErrorOut(IntervalOut):
    """The estimate's relative error against the measured runs, with its interval."""

    verdict: str = Field(description="'within noise' where the interval holds 0.")


class DecodeRooflineOut(BaseModel):
    """TPOT ≥ (weights + batch × (context + 1) × KV bytes per token) / bandwidth."""

    bound_tpot_s: float | None = Field(description="The bound, mean over the contexts, s.")
    bandwidth_bytes_per_s: float | None
    share_attained: float | None = Field(description="The bound over the estimated TPOT.")


class FitOut(BaseModel):
    """What fits in the kind's memory beside the weights (activations left out)."""

    memory_bytes: int
    tokens: int = Field(description="Cached tokens that fit, all sequences together.")
    max_context: int = Field(description="The longest context of each sequence at this batch.")
    max_batch: int = Field(description="The most sequences of prompt + new tokens.")


class GenerationOut(BaseModel):
    """A greedy generation composed on a kind, against its measured generate() runs."""

    llm: str
    device_kind: str
    batch: int
    prompt: int
    new_tokens: int
    ttft_s: IntervalOut | None = Field(description="Time to the first token.")
    tpot_s: IntervalOut | None = Field(description="(total − TTFT) / (new tokens − 1).")
    total_s: IntervalOut | None
    tokens_per_s: float | None
    energy_j: IntervalOut | None = Field(
        description="The whole generation's energy, where measured: the forwards', plus idle "
        "power × generate()'s time between them where that power is known."
    )
    energy_between_j: IntervalOut | None = Field(
        description="Of energy_j: idle power × generate()'s time between forwards."
    )
    joules_per_token: IntervalOut | None
    tpot_by_context: list[ContextPointOut]
    between_steps: BetweenOut | None
    measured: MeasuredOut | None
    errors: dict[str, ErrorOut] = Field(description="Per figure: ttft, tpot, total, energy.")
    roofline: DecodeRooflineOut
    kv_bytes_per_token: int
    weight_bytes: int
    fit: FitOut | None
    notes: list[str] = Field(description="What is interpolated, extrapolated or missing.")


class LlmCompareOut(GenerationOut):
    """The generation on one device kind, and how it is known."""

    how: Literal["measured", "predicted"] = Field(
        description="'measured': the kind's own step figures; 'predicted': by the cross-device "
        "model, the forwards alone (generate()'s time between them is not known there)."
    )
    source: str = Field(description="Where the step figures come from, in words.")
