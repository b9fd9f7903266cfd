"""A GPU's L2 roof where no spec sheet gives one: the fastest rate of its L2-resident configs.

No vendor publishes an L2 bandwidth (docs/peaks.md), yet a configuration whose compulsory bytes
fit in the L2, timed warm (its inputs reused call after call), is served from the L2 and can beat
the DRAM roof: the NeuSight data set's L4 (48 MiB of L2, 300 GB/s of GDDR6) runs a softmax of
48 MiB at 572 GB/s. Its roofline needs a roof that explains such points. The Empirical Roofline
Toolkit (ERT, Lawrence Berkeley National Laboratory) finds a cache level's roof as the best rate a
kernel reaches with a working set that fits in the level; the hierarchical roofline of Yang,
Kurth and Williams (NERSC, 2020) draws such L2 roofs beside the HBM one. Here the kind's own
configurations are the kernels: the L2 roof is the highest compulsory bytes / time of any stored
result of a configuration whose compulsory bytes fit in the chip's L2 (``l2_cache_bytes`` of
``peaks.yaml``), leaving out results above the compute roof (their work is miscounted). It is an
*attained* roof, not a spec: a lower estimate of what the L2 can deliver, which a faster
configuration would raise, and by construction no L2-resident configuration is above it. It is a
roof only where it is faster than the DRAM roof it sits beside (:func:`with_attained`); the
memory time of a configuration then serves its bytes from the L2 first, up to what the L2 can
serve (:meth:`~operator_db.roofline.bounds.Peaks.memory_time_s`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.orm import Session

from operator_db.db import queries
from operator_db.db.models import DeviceKind
from operator_db.roofline.bounds import CacheRoof, Peaks
from operator_db.roofline.chips import chip_spec

MIB = float(1 << 20)


def short_op(op: str) -> str:
    """Return an operator's name without its ``torch.nn.functional.`` / ``torch.nn.`` prefix."""
    return op.removeprefix("torch.nn.functional.").removeprefix("torch.nn.")


@dataclass(frozen=True)
class AttainedRoof:
    """A cache level's roof derived from the kind's results, with its derivation."""

    level: str
    """``L2``."""
    capacity_bytes: float
    """What the level holds (the chip's spec sheet), bytes."""
    bytes_per_s: float
    """The fastest compulsory bytes / time of a configuration that fits in the level."""
    configs: int
    """Configurations of the kind that fit in the level (each with at least one result)."""
    op: str
    """The operator of the configuration that sets the roof."""
    nbytes: float
    """Its compulsory bytes per call."""
    time_s: float
    """Its fastest per-call time, s."""
    key: str
    """Its configuration key."""

    @property
    def derivation(self) -> str:
        """How the roof was found.

        E.g. ``attained: fastest of 392 L2-resident configurations (Softmax, 48 MiB in 88 µs);
        no spec figure``.
        """
        return (
            f"attained: fastest of {self.configs} {self.level}-resident configurations "
            f"({short_op(self.op)}, {self.nbytes / MIB:.3g} MiB in {self.time_s * 1e6:.3g} µs); "
            "no spec figure"
        )

    @property
    def cache(self) -> CacheRoof:
        """The roof as a cache level of a :class:`~operator_db.roofline.bounds.Peaks`."""
        return CacheRoof(self.level, self.capacity_bytes, self.bytes_per_s, self.derivation)

    def describe(self, memory_bytes_per_s: float | None = None) -> str:
        """Return a line for people: the roof, what the level holds and its derivation.

        Against ``memory_bytes_per_s`` (the DRAM roof, where given): how much faster it is, or
        that it is no roof.
        """
        rate = f"{self.bytes_per_s / 1e9:.4g} GB/s"
        ratio = self.bytes_per_s / memory_bytes_per_s if memory_bytes_per_s else None
        if ratio is not None and ratio <= 1:
            return (
                f"no {self.level} roof: the fastest of {self.configs} {self.level}-resident "
                f"configurations ({short_op(self.op)}, {self.nbytes / MIB:.3g} MiB in "
                f"{self.time_s * 1e6:.3g} µs) reached {rate}, {ratio:.0%} of the DRAM roof"
            )
        faster = "" if ratio is None else f", {ratio:.2f}× the DRAM roof"
        return (
            f"{self.level} roof {rate}{faster} (holds {self.capacity_bytes / MIB:g} MiB; "
            f"{self.derivation})"
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttainedRoof:
        """Return the roof :meth:`as_dict` wrote (a stored peak's ``reference``)."""
        return cls(
            str(data["level"]),
            float(data["capacity_bytes"]),
            float(data["bytes_per_s"]),
            int(data["configs"]),
            str(data["op"]),
            float(data["bytes"]),
            float(data["time_s"]),
            str(data["key"]),
        )

    def as_dict(self) -> dict[str, Any]:
        """Return the roof and its derivation as plain values (JSON)."""
        return {
            "level": self.level,
            "capacity_bytes": self.capacity_bytes,
            "bytes_per_s": self.bytes_per_s,
            "configs": self.configs,
            "op": self.op,
            "bytes": self.nbytes,
            "time_s": self.time_s,
            "key": self.key,
            "derivation": self.derivation,
        }


ComputePeak = Callable[[str], float | None]
"""The highest compute peak known for a dtype, FLOP/s (None: none known)."""

PAGE = 64
"""Results read at a time, fastest first, until one is not above its compute roof."""


def attained_roofs(
    session: Session,
    kind: DeviceKind | None,
    kind_name: str,
    *,
    measured_levels: Sequence[str],
    compute_peak: ComputePeak,
) -> tuple[AttainedRoof, ...]:
    """Return the attained L2 roof of a GPU kind, or ().

    Only for a stored GPU kind whose chip's spec sheet gives its L2 (``chip_spec``: the chip
    itself, never a closest match) and which has no measured L2 roof (``measured_levels``), and
    only where a configuration that fits in the L2 has a result. A result whose FLOP/s are above
    every compute peak known for its dtype (``compute_peak``) sets nothing: its time or its FLOPs
    are not what they seem (a Winograd convolution runs fewer FLOPs than counted), and it is
    counted as unexplained (:mod:`.explain`). No other result can pass the DRAM roof but by
    being memory-bound, so none that could set the roof is left out.
    """
    if kind is None or kind.type != "gpu" or "L2" in measured_levels:
        return ()
    chip = chip_spec(kind_name)
    if chip is None or chip.l2_cache_bytes is None:
        return ()
    capacity = chip.l2_cache_bytes
    offset = 0
    while True:  # one statement, unless the fastest PAGE are all above their compute roof
        page = queries.fastest_within(
            session, kind.id, max_bytes=capacity, limit=PAGE, offset=offset
        )
        for row in page.rows:
            peak = compute_peak(row.dtype)
            if peak is not None and (row.flops or 0) / row.time_s > peak:
                continue
            roof = AttainedRoof(
                "L2",
                capacity,
                row.bytes_per_s,
                page.configs,
                row.op,
                row.bytes,
                row.time_s,
                row.key,
            )
            return (roof,)
        if len(page.rows) < PAGE:
            return ()
        offset += PAGE


def with_attained(peaks: Peaks, roofs: Sequence[AttainedRoof]) -> Peaks:
    """Return ``peaks`` with each attained roof faster than its memory bandwidth as a cache level.

    A level the roof already has (a measured one) is kept; an attained roof no faster than the
    DRAM roof is no roof. The source says which levels were added (``, L2 roof attained``).
    """
    have = {c.level for c in peaks.caches}
    extra = tuple(
        r.cache for r in roofs if r.level not in have and r.bytes_per_s > peaks.bytes_per_s
    )
    if not extra:
        return peaks
    levels = " and ".join(c.level for c in extra)
    return replace(
        peaks, caches=(*peaks.caches, *extra), source=f"{peaks.source}, {levels} roof attained"
    )
