"""Vidur's token-level LLM operators as operator-db configurations, with their cost in closed form.

Vidur (MLSys 2024) timed one transformer block of each model at fp16 on ``num_tokens`` tokens,
each GEMM's output (or input) dimension split over ``num_tensor_parallel_workers`` (TP). Each of
its operators that is one PyTorch call becomes the configuration ``opdb harvest`` records for
that call on ``num_tokens`` tokens as one sequence (input ``(1, T, features)``), in float16:

=================== ===========================================================================
``emb``             ``nn.Embedding(vocab / TP, H)`` on ``(1, T)`` token ids
``input_layernorm`` ``nn.RMSNorm(H, eps=1e-6)`` on ``(1, T, H)`` (``nn.LayerNorm(H)`` for a
                    model with LayerNorm); ``post_attention_layernorm`` the same
``attn_pre_proj``   ``nn.Linear(H, (heads + 2 · KV heads) · head_dim / TP)`` (fused QKV)
``attn_post_proj``  ``nn.Linear(heads · head_dim / TP, H)``
``mlp_up_proj``     ``nn.Linear(H, F / TP)``, ``2F / TP`` where the MLP is gated (fused gate
                    and up)
``mlp_act``         ``nn.GELU()`` on ``(1, T, F / TP)`` where the MLP is not gated
``mlp_down_proj``   ``nn.Linear(F / TP, H)``
``add``             ``x + y``, both ``(1, T, H)`` (the residual add)
=================== ===========================================================================

Two operators are vLLM's fused kernels, not one PyTorch call, and are not imported (each row a
skipped row that says so): ``attn_rope`` (rotary embedding of q and k in place) and a gated
``mlp_act`` (SiLU of one half times the other). Biases follow the model (``TRAITS``): Vidur's
``use_bias`` and ``use_qkv_bias``, which its CSVs do not carry.

The closed forms give the FLOPs, bytes, parameters and outputs ``ops.cost.op_cost`` gives
(``tests/datasets/test_vidur.py`` harvests each call and compares), at microseconds a
configuration for some 90,000.
"""

from __future__ import annotations

from dataclasses import dataclass

from operator_db.specs.schema import OperatorSpec, TensorSpec

F16 = 2
"""Bytes per float16 element."""
I64 = 8
"""Bytes per token id (int64)."""
RMS_EPS = 1e-6
"""vLLM's RMSNorm epsilon, which Vidur's block uses."""


@dataclass(frozen=True)
class Traits:
    """What a model's block has that Vidur's CSV columns do not say."""

    bias: bool = False
    """Every linear layer has a bias (Vidur's ``use_bias``)."""
    qkv_bias: bool = False
    """The fused QKV projection has a bias (``use_qkv_bias``)."""
    layer_norm: bool = False
    """LayerNorm, not RMSNorm."""


TRAITS: dict[str, Traits] = {
    "phi-2": Traits(bias=True, qkv_bias=True, layer_norm=True),
    "Qwen-72B": Traits(qkv_bias=True),
}
"""Models whose block differs from Llama's (no biases, RMSNorm), by their folder's name
(Vidur's model configs)."""


@dataclass(frozen=True)
class Block:
    """One row's block: the model's shape, its tokens and its tensor-parallel split."""

    heads: int
    kv_heads: int
    hidden: int
    ffn: int
    vocab: int
    gated: bool
    tokens: int
    tp: int
    traits: Traits = Traits()

    @property
    def head_dim(self) -> int:
        """Elements of one head: hidden / heads."""
        return self.hidden // self.heads


def _t(*shape: int, dtype: str = "float16") -> TensorSpec:
    return TensorSpec(shape=list(shape), dtype=dtype)  # type: ignore[arg-type]


def _split(value: int, tp: int, what: str) -> int:
    if value % tp:
        raise ValueError(f"{what} {value} does not split over {tp} tensor-parallel workers")
    return value // tp


def linear(tokens: int, n_in: int, n_out: int, bias: bool) -> OperatorSpec:
    """Return ``nn.Linear(n_in, n_out, bias)`` at fp16 on ``(1, tokens, n_in)``, costed."""
    params = n_in * n_out + (n_out if bias else 0)
    return OperatorSpec(
        op="torch.nn.Linear",
        form="module",
        args={"in_features": n_in, "out_features": n_out, "bias": bias},
        dtype="float16",
        inputs=[_t(1, tokens, n_in)],
        outputs=[_t(1, tokens, n_out)],
        flops=2 * tokens * n_in * n_out,
        flop_rule="matmul",
        bytes=F16 * (tokens * n_in + params + tokens * n_out),
        params=params,
    )


def norm(tokens: int, hidden: int, layer_norm: bool) -> OperatorSpec:
    """Return the block's norm (RMSNorm, or LayerNorm) at fp16 on ``(1, tokens, hidden)``."""
    n = tokens * hidden
    if layer_norm:
        return OperatorSpec(
            op="torch.nn.LayerNorm",
            form="module",
            args={
                "normalized_shape": [hidden],
                "eps": 1e-05,
                "elementwise_affine": True,
                "bias": True,
            },
            dtype="float16",
            inputs=[_t(1, tokens, hidden)],
            outputs=[_t(1, tokens, hidden)],
            flops=7 * n,
            flop_rule="normalization",
            bytes=F16 * (2 * n + 2 * hidden),
            params=2 * hidden,
        )
    return OperatorSpec(
        op="torch.nn.RMSNorm",
        form="module",
        args={"normalized_shape": [hidden], "eps": RMS_EPS, "elementwise_affine": True},
        dtype="float16",
        inputs=[_t(1, tokens, hidden)],
        outputs=[_t(1, tokens, hidden)],
        flops=4 * n + 2 * tokens,
        flop_rule="elementwise+reduction",
        bytes=F16 * (2 * n + hidden),
        params=hidden,
    )


def add(tokens: int, hidden: int) -> OperatorSpec:
    """Return ``x + y`` at fp16, both ``(1, tokens, hidden)``."""
    n = tokens * hidden
    return OperatorSpec(
        op="torch.Tensor.add",
        form="function",
        inputs=[_t(1, tokens, hidden), _t(1, tokens, hidden)],
        outputs=[_t(1, tokens, hidden)],
        flops=n,
        flop_rule="elementwise",
        bytes=F16 * 3 * n,
    )


def gelu(tokens: int, width: int) -> OperatorSpec:
    """Return ``nn.GELU()`` at fp16 on ``(1, tokens, width)``."""
    n = tokens * width
    return OperatorSpec(
        op="torch.nn.GELU",
        form="module",
        args={"approximate": "none"},
        inputs=[_t(1, tokens, width)],
        outputs=[_t(1, tokens, width)],
        flops=n,
        flop_rule="elementwise",
        bytes=F16 * 2 * n,
    )


def embedding(tokens: int, rows: int, hidden: int) -> OperatorSpec:
    """Return ``nn.Embedding(rows, hidden)`` at fp16 on ``(1, tokens)`` token ids."""
    return OperatorSpec(
        op="torch.nn.Embedding",
        form="module",
        args={
            "num_embeddings": rows,
            "embedding_dim": hidden,
            "padding_idx": None,
            "max_norm": None,
            "norm_type": 2.0,
            "scale_grad_by_freq": False,
            "sparse": False,
        },
        dtype="float16",
        inputs=[TensorSpec(shape=[1, tokens], dtype="int64", value_range=(0, rows))],
        outputs=[_t(1, tokens, hidden)],
        flops=0,
        flop_rule="none",
        bytes=I64 * tokens + F16 * (min(tokens, rows) * hidden + tokens * hidden),
        params=rows * hidden,
    )


FUSED = {
    "attn_rope": "vLLM's fused rotary-embedding kernel (q and k in place): no one PyTorch call",
    "mlp_act": "vLLM's fused SiLU-and-multiply kernel: no one PyTorch call",
}
"""Vidur's operators that are not imported, and why (``mlp_act`` only where gated)."""


def config(op: str, b: Block) -> OperatorSpec | str:
    """Return the configuration of Vidur's operator ``op`` in block ``b``, or why there is none.

    Raises:
        ValueError: a dimension that does not split over ``b.tp`` workers.
        pydantic.ValidationError: a shape past the spec format's limits.
    """
    t, h, tp = b.tokens, b.hidden, b.tp
    bias = b.traits.bias
    if op == "emb":
        return embedding(t, _split(b.vocab, tp, "vocabulary"), h)
    if op in ("input_layernorm", "post_attention_layernorm"):
        return norm(t, h, b.traits.layer_norm)
    if op == "attn_pre_proj":
        qkv = (b.heads + 2 * b.kv_heads) * b.head_dim
        return linear(t, h, _split(qkv, tp, "QKV width"), bias or b.traits.qkv_bias)
    if op == "attn_post_proj":
        return linear(t, _split(b.heads * b.head_dim, tp, "attention width"), h, bias)
    if op == "mlp_up_proj":
        return linear(t, h, _split(b.ffn * (2 if b.gated else 1), tp, "MLP width"), bias)
    if op == "mlp_down_proj":
        return linear(t, _split(b.ffn, tp, "MLP width"), h, bias)
    if op == "mlp_act" and not b.gated:
        return gelu(t, _split(b.ffn, tp, "MLP width"))
    if op == "add":
        return add(t, h)
    return FUSED.get(op, f"unknown operator {op[:40]!r}")
