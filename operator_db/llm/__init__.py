"""LLM generation: prefill and decode steps over a KV cache, generate() runs, per-token cost."""
