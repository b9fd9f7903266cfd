"""What fits in a device's memory beside a causal LM's weights: cached tokens, context, batch.

A generation's KV cache grows by ``kv_bytes_per_token`` for each token of each sequence; what the
weights leave of the memory bounds the tokens cached, the longest context at a batch and the
largest batch at a sequence length. Pure Python (``llm/compose.py`` adds it to an estimate).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fit:
    """What fits in a kind's memory beside the weights."""

    memory_bytes: int
    tokens: int
    """Cached tokens that fit (all sequences together)."""
    max_context: int
    """The longest context of each of ``batch`` sequences that fits (capped by the model's)."""
    max_batch: int
    """The most sequences of prompt + new tokens that fit."""


def fit_in_memory(
    memory_bytes: int,
    weight_bytes: int,
    kv_bytes_per_token: int,
    batch: int,
    sequence: int,
    max_context: int | None,
) -> Fit:
    """Return what fits in ``memory_bytes`` beside the weights: cached tokens, context, batch.

    Activations and the runtime's own memory are left out: the figures are upper bounds.
    """
    tokens = max(memory_bytes - weight_bytes, 0) // kv_bytes_per_token
    context = tokens // batch
    if max_context is not None:
        context = min(context, max_context)
    return Fit(memory_bytes, tokens, context, tokens // max(sequence, 1))
