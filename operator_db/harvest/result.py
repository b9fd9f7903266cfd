"""What a harvest gives back: the spec, and what was opaque, skipped or traced, and where."""

from __future__ import annotations

import datetime as dt
import platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from pydantic import JsonValue

from operator_db import __version__
from operator_db.harvest.capture import CustomLeaves, Listed
from operator_db.harvest.refs import ModelRef
from operator_db.ops.flops import counted_by_flop_counter
from operator_db.specs.io import write_spec
from operator_db.specs.schema import Spec

PROVENANCE_LINES = 40
"""Lines kept per list (traced, opaque, skipped) in a spec's provenance, each of at most
``PROVENANCE_LINE_BYTES``: the three fit in its 64 KiB of JSON (specs/limits.py)."""
PROVENANCE_LINE_BYTES = 400


@dataclass(frozen=True)
class OpaqueOp:
    """An operator recorded but not rebuildable (never measured): what, where, how often, why."""

    op: str
    locations: list[str]
    count: int
    reason: str


@dataclass(frozen=True)
class SkippedCall:
    """Calls a spec cannot describe (not in the spec, never measured): what, where, how often, why.

    Their cost is real: in a measured model's hollow run they count as time between operators.
    """

    op: str
    locations: list[str]
    count: int
    reason: str


@dataclass(frozen=True)
class TracedLeaf:
    """A custom leaf module recorded as the functional calls it makes (its class, where, why)."""

    op: str
    locations: list[str]
    count: int
    reason: str
    """Why it is not one module call: why it cannot be rebuilt."""


def listed(found: dict[tuple[str, str], Listed]) -> list[tuple[str, list[str], int, str]]:
    """Return the recorder's listed calls as (op, locations, count, reason), in order seen."""
    return [(item.op, item.locations, item.count, item.reason) for item in found.values()]


@dataclass(frozen=True)
class HarvestResult:
    """A harvested spec and what the user should know about how it was obtained."""

    spec: Spec
    device: str
    """Where the model ran: ``meta`` (shapes only) or ``cpu`` (it needed data)."""
    fallback: str | None
    """Why the model ran on the CPU, when it did."""
    opaque: list[OpaqueOp] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    """Wall time of the harvest (run, capture, costs), excluding building the model."""
    skipped: list[SkippedCall] = field(default_factory=list)
    """Calls left out of the spec because it cannot describe them, with where and why."""
    traced: list[TracedLeaf] = field(default_factory=list)
    """Custom leaf modules recorded as their functional calls."""

    @property
    def configurations(self) -> int:
        """Distinct operator configurations."""
        return len(self.spec.operators)

    @property
    def calls(self) -> int:
        """Operator calls in one forward pass: Σ count."""
        return sum(op.count for op in self.spec.operators)

    @property
    def flops(self) -> int:
        """Forward FLOPs of the model: Σ count × flops."""
        return sum(op.count * (op.flops or 0) for op in self.spec.operators)

    @property
    def flops_backward(self) -> int:
        """Backward FLOPs of the model: Σ count × flops_backward (0 for inference specs)."""
        return sum(op.count * (op.flops_backward or 0) for op in self.spec.operators)

    @property
    def counter_flops(self) -> int:
        """The part of :attr:`flops` FlopCounterMode counts (matmul, convolution, attention)."""
        return sum(
            op.count * (op.flops or 0)
            for op in self.spec.operators
            if counted_by_flop_counter(op.flop_rule)
        )

    def write(self, path: str | Path) -> Path:
        """Write the spec as YAML to ``path``; return the path."""
        path = Path(path)
        write_spec(self.spec, path)
        return path


def where(locations: Sequence[str], shown: int = 3) -> str:
    """Return the first ``shown`` locations (``(model)`` for the model itself), with `` ...``."""
    text = ", ".join(x or "(model)" for x in locations[:shown])
    return text + (" ..." if len(locations) > shown else "")


def _lines(items: Sequence[OpaqueOp | SkippedCall | TracedLeaf]) -> list[JsonValue]:
    lines: list[JsonValue] = [
        f"{o.op} ×{o.count} at {where(o.locations)}: {o.reason}".encode()[
            :PROVENANCE_LINE_BYTES
        ].decode(errors="ignore")
        for o in items
    ]
    more = [f"and {len(lines) - PROVENANCE_LINES} more"] if len(lines) > PROVENANCE_LINES else []
    return [*lines[:PROVENANCE_LINES], *more]


def provenance(
    ref: ModelRef | None,
    device: str,
    fallback: str | None,
    custom: CustomLeaves,
    opaque: list[OpaqueOp],
    skipped: list[SkippedCall],
    traced: list[TracedLeaf],
) -> dict[str, JsonValue]:
    """Return a harvested spec's provenance: versions, reference, device, and the lists above."""
    found: dict[str, JsonValue] = {
        "tool": f"operator-db {__version__} harvest",
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    transformers = sys.modules.get("transformers")
    if transformers is not None:
        found["transformers"] = str(getattr(transformers, "__version__", "unknown"))
    found |= {
        "reference": ref.text if ref else None,
        "device": device,
        "custom_leaves": custom,
        "date": dt.datetime.now(dt.UTC).date().isoformat(),
    }
    if fallback:
        found["fallback"] = fallback
    if traced:
        found["traced"] = _lines(traced)
    if opaque:
        found["opaque"] = _lines(opaque)
    if skipped:
        found["skipped"] = _lines(skipped)
    return found
