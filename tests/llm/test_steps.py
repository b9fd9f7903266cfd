"""Harvesting a generation: the prefill and decode steps as generate() runs them."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from operator_db.errors import HarvestError
from operator_db.harvest.inputs import ModelInputs
from operator_db.llm.harvest import harvest_llm, plan_contexts, step_name
from operator_db.llm.steps import generate_calls, step
from operator_db.specs.keys import operator_key
from tests.llm.common import LLAMA, LLAMA_SMALL


def test_plan_contexts_spans_the_decode_steps() -> None:
    # 64 new tokens from 128: one prefill, then 63 decode steps over caches of 128 … 190.
    assert plan_contexts(128, 64, 2) == [128, 190]
    assert plan_contexts(128, 64, 3) == [128, 159, 190]
    assert plan_contexts(10, 2, 3) == [10]  # one decode step
    assert plan_contexts(10, 1, 3) == []  # the prefill alone


def test_generate_calls_are_what_generate_passes() -> None:
    with torch.device("meta"):
        lm = step(LLAMA, LLAMA_SMALL, "prefill", 2, 8).lm
    calls = generate_calls(lm, 2, 8, 3)
    assert [tuple(c["input_ids"].shape) for c in calls] == [(2, 8), (2, 1), (2, 1)]
    assert all(c["use_cache"] is True and c["logits_to_keep"] == 1 for c in calls)
    assert len({id(c["cache"]) for c in calls}) == 1  # one cache object, carried over


def test_harvest_llm_shares_what_does_not_depend_on_the_context() -> None:
    found = harvest_llm(LLAMA, LLAMA_SMALL, batches=[2], prompts=[8, 16], new_tokens=5, points=2)
    assert [(s.phase, s.tokens) for s in found.steps] == [
        ("prefill", 8),
        ("prefill", 16),
        ("decode", 8),
        ("decode", 11),
        ("decode", 16),
        ("decode", 19),
    ]
    assert found.steps[0].result.spec.model.name == step_name("llamaforcausallm", "prefill", 2, 8)
    # 2 layers × 2 (K, V) × 2 KV heads × 16 per head × 4 bytes.
    assert found.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4
    assert found.weight_bytes == found.params * 4 and found.max_context == 64
    decodes = [s.result.spec for s in found.steps if s.phase == "decode"]
    seen = Counter(operator_key(op, "inference") for spec in decodes for op in spec.operators)
    per_context = {k for k, n in seen.items() if n == 1}
    shared = {k for k, n in seen.items() if n == len(decodes)}
    assert len(per_context) + len(shared) == len(seen)  # a configuration is either
    by_key = {operator_key(op, "inference"): op for spec in decodes for op in spec.operators}
    # What grows with the context: the cache's append and the attention over it, per context.
    assert Counter(by_key[k].op for k in per_context) == Counter(
        {"torch.cat": 4, "torch.nn.functional.scaled_dot_product_attention": 4}
    )


def test_a_decode_step_attends_over_its_cache_and_appends_to_it() -> None:
    found = harvest_llm(LLAMA, LLAMA_SMALL, batches=[2], prompts=[8], new_tokens=2, points=1)
    decode = next(s.result.spec for s in found.steps if s.phase == "decode")
    ops = {op.op: op for op in decode.operators if op.op != "torch.cat" or op.count == 4}
    append = ops["torch.cat"]
    assert [t.shape for t in append.inputs] == [[2, 2, 8, 16], [2, 2, 1, 16]]  # K/V: C + 1
    attention = ops["torch.nn.functional.scaled_dot_product_attention"]
    assert [t.shape for t in attention.inputs] == [[2, 4, 1, 16], [2, 2, 9, 16], [2, 2, 9, 16]]
    assert {tuple(t.shape) for t in decode.model.inputs} == {(2, 1)}
    positions = next(t for t in decode.model.inputs if t.name == "position_ids")
    assert positions.value_range == (8, 9)  # the position generate() gives the new token


def test_the_prefill_computes_the_lm_head_on_the_last_position_only() -> None:
    found = harvest_llm(LLAMA, LLAMA_SMALL, batches=[2], prompts=[8], new_tokens=1)
    prefill = found.steps[0].result.spec
    head = [op for op in prefill.operators if op.outputs[0].shape[-1] == 256]
    assert [op.outputs[0].shape for op in head] == [[2, 1, 256]]


def test_a_step_runs_the_same_call_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    with torch.device("cpu"):
        decode = step(LLAMA, LLAMA_SMALL, "decode", 2, 8).eval()
    _, kwargs = ModelInputs.of(decode.example_inputs()).materialize(torch.device("cpu"), None)
    with torch.no_grad():
        first = decode(**kwargs)
        second = decode(**kwargs)
    assert first.shape == (2, 1, 256)
    assert torch.equal(first, second)  # the cache went back to 8 tokens in between
    assert decode.cache_bytes() == 2 * 2 * 2 * 8 * 2 * 16 * 4  # layers, K/V, batch, C, heads, d


def test_a_context_past_the_maximum_is_refused_in_one_line() -> None:
    with pytest.raises(HarvestError, match=r"^a context of 70 tokens is longer than .* 64"):
        harvest_llm(LLAMA, LLAMA_SMALL, prompts=[60], new_tokens=10)


def test_a_model_that_is_not_a_causal_lm_is_refused_in_one_line() -> None:
    with pytest.raises(HarvestError, match="not a causal LM: it has no generate"):
        harvest_llm("transformers:BertModel", {"num_hidden_layers": 1}, prompts=[8])


def test_a_generation_loop_that_cannot_be_captured_is_one_line() -> None:
    with pytest.raises(HarvestError, match=r"^generate\(\) of OwnLoop passes no cache"):
        harvest_llm("module:tests.llm.custom_lm:own_loop", prompts=[8], new_tokens=2)


def test_tied_embeddings_harvest_in_half_precision() -> None:
    # Llama-3.2-1B ties its LM head to its embeddings: one tensor under two names, which
    # functional_call refused when given both ("multiple values for keys ... which are tied").
    tied = {**LLAMA_SMALL, "tie_word_embeddings": True}
    found = harvest_llm(
        LLAMA, tied, batches=[1], prompts=[8], new_tokens=2, points=1, dtype=torch.bfloat16
    )
    untied = harvest_llm(LLAMA, LLAMA_SMALL, batches=[1], prompts=[8], new_tokens=2, points=1)
    assert untied.params - found.params == 256 * 64  # the head's weight counted once
    head = [
        op
        for op in found.steps[0].result.spec.operators
        if op.op == "torch.nn.Linear" and op.outputs[0].shape[-1] == 256
    ]
    assert [op.inputs[0].dtype for op in head] == ["bfloat16"]
