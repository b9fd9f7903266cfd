"""A small causal LM of each family the LLM tests use: config overrides, nothing downloaded."""

from __future__ import annotations

from typing import Any

import pytest

from operator_db.config import FAST_FAKE_MEASURE
from tests.helpers import run_cli

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


def measured_tiny(
    capsys: pytest.CaptureFixture[str], db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Harvest the small Llama as ``tiny`` (batch 2, prompt 8, 4 new tokens) and measure it on
    the fake device, fast (``FAST_FAKE_MEASURE``)."""
    for name, value in FAST_FAKE_MEASURE.items():
        monkeypatch.setenv(name, value)
    harvest = ["llm", "harvest", LLAMA, *LLAMA_OVERRIDES, "-b", "2", "-p", "8", "-n", "4"]
    assert run_cli(capsys, *harvest, "--name", "tiny", "--db", db_url).code == 0
    measure = ["llm", "measure", "tiny", "--budget", "0", "--tight-budget", "0"]
    assert run_cli(capsys, *measure, "--db", db_url).code == 0
