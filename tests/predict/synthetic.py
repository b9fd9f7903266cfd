"""Configurations whose cost follows a known law, for the predictor's tests."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from operator_db.predict.model import Sample
from operator_db.roofline.bounds import Peaks

PEAKS = Peaks(flops_per_s=1e11, bytes_per_s=2e10)
OVERHEAD_S = 5e-6
"""The law's fixed cost of a call, s."""
EFFICIENCY = {"torch.matmul": 0.7, "torch.nn.functional.gelu": 0.5, "torch.nn.ReLU": 0.4}


@dataclass(frozen=True)
class Cfg:
    key: str
    op: str
    inputs: list[Any]
    outputs: list[Any]
    flops: int | None
    bytes: int | None
    args: dict[str, Any] = field(default_factory=dict)
    mode: str = "inference"
    dtype: str | None = "float32"
    flops_backward: int | None = None
    params: int = 0
    form: str = "function"


def matmul(m: int, n: int, k: int) -> Cfg:
    return Cfg(
        key=f"mm-{m}-{n}-{k}",
        op="torch.matmul",
        inputs=[{"shape": [m, k]}, {"shape": [k, n]}],
        outputs=[{"shape": [m, n]}],
        flops=2 * m * n * k,
        bytes=4 * (m * k + k * n + m * n),
    )


def elementwise(op: str, n: int, c: int) -> Cfg:
    return Cfg(
        key=f"{op}-{n}-{c}",
        op=op,
        inputs=[{"shape": [n, c]}],
        outputs=[{"shape": [n, c]}],
        flops=n * c,
        bytes=8 * n * c,
    )


def law_time_s(cfg: Cfg) -> float:
    """The known cost law: the bound over the type's efficiency, plus a fixed overhead, s."""
    bound = PEAKS.bound_s(cfg.flops, cfg.bytes)
    return bound / EFFICIENCY[cfg.op] + OVERHEAD_S


def configs(rng: random.Random, n: int) -> list[Cfg]:
    """Return ``n`` random configurations of three operator types."""
    out: list[Cfg] = []
    sizes = [2**e for e in range(3, 12)]
    while len(out) < n:
        kind = rng.randrange(3)
        if kind == 0:
            out.append(matmul(rng.choice(sizes), rng.choice(sizes), rng.choice(sizes)))
        else:
            op = "torch.nn.functional.gelu" if kind == 1 else "torch.nn.ReLU"
            out.append(elementwise(op, rng.choice(sizes), rng.choice(sizes) * 4))
    return out


def samples(cfgs: list[Cfg], rng: random.Random, noise: float = 0.05) -> list[Sample]:
    """Return the configurations measured by the law with log-normal noise of σ ``noise``."""
    return [
        Sample(c, law_time_s(c) * math.exp(rng.gauss(0.0, noise)), law_time_s(c) * 50.0)
        for c in cfgs
    ]
