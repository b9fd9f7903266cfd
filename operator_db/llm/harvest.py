"""Harvest a causal LM's generation: the prefill and decode steps as specs, and what it holds.

A generation of ``new_tokens`` tokens from a prompt of ``prompt`` tokens is one prefill (the
prompt into an empty cache) and ``new_tokens − 1`` decode steps, over caches of ``prompt`` …
``prompt + new_tokens − 2`` tokens. Decode steps differ only in the context: the projections,
norms and the LM head are the same configurations at every step (one per batch size), the
attention over the cache and the cache's append grow with it. So a few contexts are harvested
(:func:`plan_contexts`: the first, the last and points between) and the others are interpolated
when the generation is composed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from pydantic import JsonValue

from operator_db.errors import HarvestError
from operator_db.harvest.core import harvest, load_reference
from operator_db.harvest.refs import model_name_part, parse_reference
from operator_db.harvest.result import HarvestResult
from operator_db.llm.steps import (
    STEP_REFERENCE,
    Phase,
    check_context,
    max_context,
    text_config,
)
from operator_db.ops.encoding import dtype_name

DEFAULT_POINTS = 3
"""Decode contexts harvested per prompt: the first, the middle and the last step's."""


def plan_contexts(prompt: int, new_tokens: int, points: int = DEFAULT_POINTS) -> list[int]:
    """Return the cache lengths of the decode steps to harvest for one generation.

    The decode steps of ``new_tokens`` tokens from ``prompt`` run over caches of ``prompt`` to
    ``prompt + new_tokens − 2`` tokens; ``points`` of them evenly spaced, both ends included
    (fewer where there are fewer steps).
    """
    steps = new_tokens - 1
    if steps < 1:
        return []
    last = prompt + steps - 1
    if points <= 1 or steps == 1:
        return [prompt] if points >= 1 else []
    return sorted({round(prompt + i * (last - prompt) / (points - 1)) for i in range(points)})


@dataclass(frozen=True)
class StepHarvest:
    """One step model: what it computes and its harvest."""

    phase: Phase
    batch: int
    tokens: int
    result: HarvestResult


@dataclass(frozen=True)
class LlmHarvest:
    """An LLM and its step models, harvested."""

    name: str
    reference: str
    overrides: dict[str, JsonValue]
    dtype: str
    params: int
    weight_bytes: int
    kv_bytes_per_token: int
    max_context: int | None
    info: dict[str, Any]
    steps: list[StepHarvest] = field(default_factory=list)


def step_name(name: str, phase: Phase, batch: int, tokens: int) -> str:
    """Return the model name of a step: ``NAME-b8-prefill-p512``, ``NAME-b8-decode-c543``."""
    return f"{name}-b{batch}-{phase}-{'p' if phase == 'prefill' else 'c'}{tokens}"


def _shape(lm: torch.nn.Module) -> dict[str, Any]:
    """Return the config's shape (layers, heads, sizes, vocabulary), where it says them."""
    config = text_config(lm)
    names = {
        "layers": ("num_hidden_layers", "n_layer"),
        "hidden": ("hidden_size", "n_embd"),
        "heads": ("num_attention_heads", "n_head"),
        "kv_heads": ("num_key_value_heads",),
        "head_dim": ("head_dim",),
        "vocab": ("vocab_size",),
        "sliding_window": ("sliding_window",),
    }
    found: dict[str, Any] = {"class": type(lm).__name__}
    for key, fields in names.items():
        for name in fields:
            value = getattr(config, name, None)
            if isinstance(value, int):
                found[key] = value
                break
    return found


def harvest_llm(
    reference: str,
    overrides: Mapping[str, JsonValue] | None = None,
    *,
    batches: Sequence[int] = (1,),
    prompts: Sequence[int] = (128,),
    new_tokens: int = 64,
    points: int = DEFAULT_POINTS,
    dtype: torch.dtype | None = None,
    name: str | None = None,
) -> LlmHarvest:
    """Harvest the prefill of each prompt and the decode steps at :func:`plan_contexts`' contexts.

    ``reference`` names a causal LM (``transformers:LlamaForCausalLM``, a ``module:`` factory of
    one), built with ``overrides`` on the meta device (random weights, nothing downloaded);
    ``dtype`` is the dtype it runs in (its own when None). Each step is harvested as a model of
    its own (``operator_db.llm.steps``), named by :func:`step_name`.

    Raises:
        HarvestError: not a causal LM, a context past the model's maximum, bad sizes, or
            ``generate()`` cannot be captured (one line each).
    """
    if not batches or any(b < 1 for b in batches):
        raise HarvestError(f"bad batch sizes {list(batches)}: expected positive integers")
    if not prompts or any(p < 1 for p in prompts):
        raise HarvestError(f"bad prompt lengths {list(prompts)}: expected positive integers")
    if new_tokens < 1:
        raise HarvestError(f"bad number of new tokens {new_tokens}: expected at least 1")
    ref = parse_reference(reference, dict(overrides or {}))
    lm = load_reference(ref)
    from operator_db.llm.steps import GenerationStep, check_causal_lm

    check_causal_lm(lm, ref.text)
    for prompt in prompts:
        check_context(lm, prompt + new_tokens, ref.text)
    run_dtype = dtype or next(lm.parameters()).dtype
    params = sum(p.numel() for p in lm.parameters())
    element = torch.empty((), dtype=run_dtype).element_size()
    probe_tokens = min(max(prompts), (max_context(lm) or 2**31) - 1)
    probe = GenerationStep(lm, "decode", 1, probe_tokens)
    cache_elements = sum(b.numel() for n, b in probe.named_buffers() if n.startswith("cache_"))
    llm_name = name or model_name_part(ref.target.rsplit(":", 1)[-1]) or "llm"
    found = LlmHarvest(
        name=llm_name,
        reference=ref.text,
        overrides=dict(ref.overrides),
        dtype=dtype_name(run_dtype),
        params=params,
        weight_bytes=params * element,
        kv_bytes_per_token=round(cache_elements * element / probe_tokens),
        max_context=max_context(lm),
        info={**_shape(lm), "transformers": _transformers_version()},
    )
    for batch in dict.fromkeys(batches):
        plan: list[tuple[Phase, int]] = [("prefill", p) for p in dict.fromkeys(prompts)]
        contexts = sorted({c for p in prompts for c in plan_contexts(p, new_tokens, points)})
        plan += [("decode", c) for c in contexts]
        for phase, tokens in plan:
            found.steps.append(_harvest_step(found, phase, batch, tokens, dtype))
    return found


def _harvest_step(
    llm: LlmHarvest, phase: Phase, batch: int, tokens: int, dtype: torch.dtype | None
) -> StepHarvest:
    step_ref = parse_reference(
        STEP_REFERENCE,
        {
            "model": llm.reference,
            "overrides": llm.overrides,
            "phase": phase,
            "batch": batch,
            "tokens": tokens,
        },
    )
    module = load_reference(step_ref)
    what = f"prompt of {tokens} tokens" if phase == "prefill" else f"one token over {tokens} cached"
    result = harvest(
        module,
        module.example_inputs(),  # type: ignore[operator]
        reference=step_ref,
        name=step_name(llm.name, phase, batch, tokens),
        dtype=dtype,
        description=f"{llm.reference} generating: {phase}, {what}, batch {batch}",
    )
    return StepHarvest(phase, batch, tokens, result)


def _transformers_version() -> str | None:
    try:
        import transformers
    except ImportError:
        return None
    return str(transformers.__version__)
