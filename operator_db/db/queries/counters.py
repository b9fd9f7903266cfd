"""Hardware counters of configurations from Nsight Compute (``ncu_counters``, docs/ncu.md).

Each import adds rows; the newest row of a configuration on a device kind is its counters (as
the newest result is its time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from operator_db.db.models import DeviceKind, ModelOperator, NcuCounter, OperatorConfig


@dataclass(frozen=True)
class CounterFigures:
    """The counters of one call of a configuration: bytes, FLOPs (None where not profiled)."""

    kernels: int
    """Kernels the call ran (profiled)."""
    gpu_time_s: float | None
    """Σ of the kernels' durations, s."""
    dram_read_bytes: int | None
    dram_write_bytes: int | None
    flops_fp32: int | None
    flops_fp16: int | None
    flops_fp64: int | None
    tensor_instructions: int | None
    """Warp instructions on the tensor pipe: their FLOPs are not in the ``flops_*``."""

    @property
    def dram_bytes(self) -> int | None:
        """DRAM bytes read and written, or None where either was not profiled."""
        if self.dram_read_bytes is None or self.dram_write_bytes is None:
            return None
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def fp_flops(self) -> int | None:
        """FLOPs of the FP32, FP16 and FP64 instructions together (None where none profiled)."""
        known = [f for f in (self.flops_fp32, self.flops_fp16, self.flops_fp64) if f is not None]
        return sum(known) if known else None

    @classmethod
    def of(cls, row: NcuCounter) -> CounterFigures:
        """Return the figures of a stored row."""
        return cls(
            kernels=row.kernels,
            gpu_time_s=row.gpu_time_s,
            dram_read_bytes=row.dram_read_bytes,
            dram_write_bytes=row.dram_write_bytes,
            flops_fp32=row.flops_fp32,
            flops_fp16=row.flops_fp16,
            flops_fp64=row.flops_fp64,
            tensor_instructions=row.tensor_instructions,
        )

    def as_dict(self) -> dict[str, Any]:
        """Return the figures as a JSON-ready dict (``dram_bytes`` and ``fp_flops`` too)."""
        return {**asdict(self), "dram_bytes": self.dram_bytes, "fp_flops": self.fp_flops}


def add_counters(
    session: Session, kind_id: int, figures: dict[int, CounterFigures], *, source: str
) -> list[NcuCounter]:
    """Store counters of configurations (by config id) on kind ``kind_id``, read from ``source``.

    New rows are added (earlier imports stay, the newest counts). Flushes; the caller commits.
    """
    rows = [
        NcuCounter(config_id=config_id, device_kind_id=kind_id, source=source[:500], **asdict(f))
        for config_id, f in sorted(figures.items())
    ]
    session.add_all(rows)
    session.flush()
    return rows


def _newest(where: Sequence[Any]) -> Any:
    """Select the newest row of each (configuration, kind) among those ``where`` keeps."""
    newest = (
        select(
            NcuCounter.config_id,
            NcuCounter.device_kind_id,
            func.max(NcuCounter.created_at).label("created_at"),
        )
        .where(*where)
        .group_by(NcuCounter.config_id, NcuCounter.device_kind_id)
        .subquery("newest")
    )
    return (
        select(NcuCounter, OperatorConfig.key)
        .join(
            newest,
            and_(
                NcuCounter.config_id == newest.c.config_id,
                NcuCounter.device_kind_id == newest.c.device_kind_id,
                NcuCounter.created_at == newest.c.created_at,
            ),
        )
        .join(OperatorConfig, OperatorConfig.id == NcuCounter.config_id)
        .order_by(NcuCounter.id)
    )


def model_counters(session: Session, model_id: int, kind_id: int) -> dict[str, NcuCounter]:
    """Return the newest counters of each configuration of a model on a kind, by config key.

    A configuration without counters on the kind has no entry.
    """
    of_model = select(ModelOperator.config_id).where(ModelOperator.model_id == model_id)
    rows = session.execute(
        _newest([NcuCounter.device_kind_id == kind_id, NcuCounter.config_id.in_(of_model)])
    )
    return {key: row for row, key in rows}  # ties on created_at: the later id wins


def config_counters(session: Session, config_id: int) -> list[tuple[NcuCounter, str]]:
    """Return the newest counters of a configuration on each kind, with the kind's name."""
    rows = session.execute(
        select(NcuCounter, DeviceKind.name)
        .join(DeviceKind, DeviceKind.id == NcuCounter.device_kind_id)
        .where(NcuCounter.config_id == config_id)
        .order_by(DeviceKind.name, NcuCounter.created_at.desc(), NcuCounter.id.desc())
    )
    newest: dict[str, NcuCounter] = {}
    for row, kind in rows:
        newest.setdefault(kind, row)
    return [(row, kind) for kind, row in newest.items()]
