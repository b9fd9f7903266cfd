"""A small causal LM of each family the LLM tests use: config overrides, nothing downloaded."""

from __future__ import annotations

from typing import Any

LLAMA = "transformers:LlamaForCausalLM"
LLAMA_SMALL: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 64,
}
"""Llama with grouped-query attention (4 query heads, 2 key/value heads): 16 floats of K and V
per layer and token."""
LLAMA_OVERRIDES = [f"{k}={v}" for k, v in LLAMA_SMALL.items()]
