"""Small models for the harvester's tests (referenced as ``module:tests.harvest.models:NAME``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812 - the usual alias
from torch import nn


class SquaredReLU(nn.Module):
    """A custom activation without parameters: the harvester records its functional calls."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x) ** 2


class Scale(nn.Module):
    """A custom leaf with a parameter and a constructor the harvester cannot recover: opaque."""

    def __init__(self, config: dict[str, int]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(config["width"]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


class Attention(nn.Module):
    """Self-attention in the style of transformers: Linear modules, functional calls between."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.view(b, s, self.heads, w // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) / (w // self.heads) ** 0.5
        context = torch.matmul(scores.softmax(dim=-1), v)
        fused = F.scaled_dot_product_attention(q, k, v)
        merged = (context + fused).transpose(1, 2).reshape(b, s, w)
        return self.out(merged)


class MixedNet(nn.Module):
    """Modules and functional calls mixed: conv stem, attention blocks, shared and custom leaves."""

    def __init__(self, width: int = 32, heads: int = 4, blocks: int = 2) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, kernel_size=4, stride=4)
        self.norm = nn.LayerNorm(width)
        self.blocks = nn.ModuleList(Attention(width, heads) for _ in range(blocks))
        self.act = SquaredReLU()
        self.gelu = nn.GELU()
        self.scale = Scale({"width": width})
        self.head = nn.Linear(width, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.stem(images).flatten(2).transpose(1, 2)  # [B, tokens, width]
        for block in self.blocks:
            x = x + block(self.norm(x))  # the same LayerNorm module runs before every block
        x = self.gelu(self.act(x))
        x = self.scale(x)
        return self.head(x.mean(dim=1))


class DataDependent(nn.Module):
    """Takes a branch on a tensor's value: cannot run on the meta device."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if y.sum() > -1e30:  # always true, but only data can tell
            y = torch.relu(y)
        return y


class Raising(nn.Module):
    """Raises in its forward pass."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("this model is broken\nsecond line of details")


def mixed(width: int = 32, heads: int = 4, blocks: int = 2) -> MixedNet:
    """Factory for ``module:tests.harvest.models:mixed``."""
    return MixedNet(width, heads, blocks)


def data_dependent() -> DataDependent:
    """Factory for ``module:tests.harvest.models:data_dependent``."""
    return DataDependent()


def raising_factory() -> nn.Module:
    """A factory that raises."""
    raise RuntimeError("factory failed")


def not_a_module() -> int:
    """A factory that returns something else than a module."""
    return 3


class AtenScale(nn.Module):
    """A custom leaf with a weight whose call the builder may not run: tracing it fails."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.mm(x, self.weight).relu()


class Untraceable(nn.Module):
    """A Linear, then a custom leaf that cannot be traced, then a Linear."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.first = nn.Linear(width, width)
        self.odd = AtenScale(width)
        self.last = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(self.odd(self.first(x)))


class BigMatmul(nn.Module):
    """A custom leaf with a large weight: most of the work of :class:`MostlyCustom`."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(width, width) / width**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


class MostlyCustom(nn.Module):
    """A small Linear, then a custom leaf doing far more work (opaque if not traced)."""

    def __init__(self, width: int = 256) -> None:
        super().__init__()
        self.small = nn.Linear(width, 8)
        self.expand = nn.Linear(8, width)
        self.big = BigMatmul(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.big(self.big(self.expand(self.small(x))))


def mostly_custom(width: int = 256) -> MostlyCustom:
    """Factory for ``module:tests.harvest.models:mostly_custom``."""
    return MostlyCustom(width)
