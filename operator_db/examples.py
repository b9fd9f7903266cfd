"""Small models of our own, referenced by example specs (``module:operator_db.examples:NAME``)."""

from __future__ import annotations

from collections.abc import Sequence

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
