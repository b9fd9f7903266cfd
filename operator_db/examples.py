"""Small models of our own, referenced by example specs (``module:operator_db.examples:NAME``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F  # noqa: N812 - the usual name
from torch import nn


def mlp(inputs: int = 784, hidden: Sequence[int] = (256, 256), outputs: int = 10) -> nn.Sequential:
    """Return a ReLU MLP ``inputs → hidden... → outputs`` (layer sizes in features)."""
    layers: list[nn.Module] = []
    width = inputs
    for size in hidden:
        layers += [nn.Linear(width, size), nn.ReLU()]
        width = size
    layers.append(nn.Linear(width, outputs))
    return nn.Sequential(*layers)


class FunctionalBlock(nn.Module):
    """A pre-norm transformer block written with functional calls (F.linear, einsum, softmax).

    Its only leaf modules are itself: everything it does is a functional call, so the harvest sees
    each matmul, softmax and norm, and none of it hides in "time between operators".
    """

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Parameter(torch.randn(3 * width, width) / width**0.5)
        self.out = nn.Parameter(torch.randn(width, width) / width**0.5)
        self.up = nn.Parameter(torch.randn(4 * width, width) / width**0.5)
        self.down = nn.Parameter(torch.randn(width, 4 * width) / (4 * width) ** 0.5)
        self.norm1 = nn.Parameter(torch.ones(width))
        self.norm2 = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the block's output for ``x`` of shape (batch, tokens, width)."""
        b, t, w = x.shape
        h = F.layer_norm(x, (w,), self.norm1)
        q, k, v = F.linear(h, self.qkv).chunk(3, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, w // self.heads) for z in (q, k, v))
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / (w // self.heads) ** 0.5
        mixed = torch.einsum("bhqk,bkhd->bqhd", F.softmax(scores, dim=-1), v).reshape(b, t, w)
        x = x + F.linear(mixed, self.out)
        h = F.layer_norm(x, (w,), self.norm2)
        return x + F.linear(F.gelu(F.linear(h, self.up)), self.down)


def functional_transformer(width: int = 256, heads: int = 4, depth: int = 4) -> nn.Sequential:
    """Return ``depth`` functional-style transformer blocks of ``width`` features and ``heads``."""
    return nn.Sequential(*(FunctionalBlock(width, heads) for _ in range(depth)))
