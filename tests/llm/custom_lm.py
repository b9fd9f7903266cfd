"""Causal LMs whose generate() is their own: for the tests of what cannot be captured."""

from __future__ import annotations

from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tests.llm.common import LLAMA_SMALL


class OwnLoop(LlamaForCausalLM):
    """A Llama whose generate() runs the whole sequence again for each token, with no cache."""

    def generate(self, input_ids: torch.Tensor, max_new_tokens: int = 1, **_: Any) -> Any:  # type: ignore[override]
        """Append the argmax of a full forward, ``max_new_tokens`` times."""
        for _step in range(max_new_tokens):
            logits = self(input_ids=input_ids, use_cache=False).logits
            input_ids = torch.cat([input_ids, logits[:, -1:].argmax(-1)], dim=-1)
        return input_ids


def own_loop() -> OwnLoop:
    """Return the small Llama with its own generation loop."""
    return OwnLoop(LlamaConfig(**LLAMA_SMALL))
