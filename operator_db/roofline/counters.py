"""Stored Nsight Compute counters in use: the roofline's measured work, the report's table.

The counters come from ``opdb ncu import`` (:mod:`operator_db.roofline.ncu`, docs/ncu.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from operator_db.db import queries
from operator_db.db.queries import CounterFigures

if TYPE_CHECKING:
    import pandas as pd
    from sqlalchemy.orm import Session


def counters_table(session: Session, model_name: str, device_kind: str) -> pd.DataFrame:
    """Return the model's configurations with ncu counters on the kind, next to the spec's work.

    One row per configuration that has counters (spec order): op, inputs, count, the spec's
    FLOPs and compulsory bytes, the measured FP FLOPs (and per precision), DRAM bytes, tensor
    instructions, kernels and the profiled call's GPU time (s).

    Raises:
        NotFoundError: unknown model or kind.
    """
    import pandas as pd

    model = queries.get_model(session, model_name)
    kind = queries.get_device_kind(session, device_kind)
    counters = queries.model_counters(session, model.id, kind.id)
    rows = []
    for cfg in queries.model_config_costs(session, model.id):
        row = counters.get(cfg.key)
        if row is None:
            continue
        figures = CounterFigures.of(row)
        rows.append(
            {
                "key": cfg.key,
                "op": cfg.op,
                "inputs": " ".join("x".join(map(str, t["shape"])) for t in cfg.inputs),
                "count": cfg.count,
                "spec_flops": cfg.flops,
                "ncu_flops": figures.fp_flops,
                "flops_fp32": figures.flops_fp32,
                "flops_fp16": figures.flops_fp16,
                "flops_fp64": figures.flops_fp64,
                "tensor_instructions": figures.tensor_instructions,
                "spec_bytes": cfg.bytes,
                "dram_bytes": figures.dram_bytes,
                "kernels": figures.kernels,
                "gpu_time_s": figures.gpu_time_s,
                "source": row.source,
            }
        )
    return pd.DataFrame.from_records(rows, columns=COUNTER_COLUMNS)


COUNTER_COLUMNS = [
    "key",
    "op",
    "inputs",
    "count",
    "spec_flops",
    "ncu_flops",
    "flops_fp32",
    "flops_fp16",
    "flops_fp64",
    "tensor_instructions",
    "spec_bytes",
    "dram_bytes",
    "kernels",
    "gpu_time_s",
    "source",
]

WorkSource = Literal["spec", "ncu", "ncu bytes", "ncu FLOPs"]


def roofline_work(
    flops: float, nbytes: float, counters: CounterFigures | None
) -> tuple[float, float, WorkSource]:
    """Return the FLOPs and bytes a roofline draws a configuration at, and where they come from.

    Measured DRAM bytes replace the spec's compulsory bytes where ncu counted them; measured FP
    FLOPs replace the spec's where ncu counted them and the call ran nothing on the tensor pipe
    (whose work the FP counters miss; unknown counts as used). ``source``: ``ncu`` (both
    measured), ``ncu bytes``, ``ncu FLOPs`` or ``spec`` (neither).
    """
    if counters is None:
        return flops, nbytes, "spec"
    measured_bytes = counters.dram_bytes
    measured_flops = counters.fp_flops if counters.tensor_instructions == 0 else None
    sources: dict[tuple[bool, bool], WorkSource] = {
        (True, True): "ncu",
        (False, True): "ncu bytes",
        (True, False): "ncu FLOPs",
        (False, False): "spec",
    }
    source = sources[(measured_flops is not None, measured_bytes is not None)]
    return (
        float(measured_flops) if measured_flops is not None else flops,
        float(measured_bytes) if measured_bytes is not None else nbytes,
        source,
    )


COUNTER_SUMMARY_COLUMNS = [
    "model",
    "device_kind",
    "counted",
    "configs",
    "spec_flops",
    "ncu_flops",
    "tensor_configs",
    "spec_bytes",
    "dram_bytes",
]


def _weighted(table: pd.DataFrame, column: str) -> float | None:
    """Σ count × ``column`` over the rows, None where any value is unknown."""
    values = table[column]
    if values.isna().any():
        return None
    return float((table["count"] * values).sum())


def counters_study(
    session: Session, pairs: Iterable[tuple[str, str]]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Return, for each (model, kind) with counters, a summary row; and every counted row.

    Summary: configurations counted of the measurable ones, and over the counted ones Σ count ×
    the spec's FLOPs and bytes against Σ count × the measured FP FLOPs and DRAM bytes (per
    forward or step), with how many ran on the tensor pipe (whose FLOPs ncu's FP counters miss).
    Rows: :func:`counters_table`'s with the model and kind.
    """
    import pandas as pd

    summaries = []
    tables = []
    for model, kind in pairs:
        table = counters_table(session, model, kind)
        if table.empty:
            continue
        found = queries.get_model(session, model)
        measurable = [
            c for c in queries.model_config_costs(session, found.id) if c.form != "opaque"
        ]
        summaries.append(
            {
                "model": model,
                "device_kind": kind,
                "counted": len(table),
                "configs": len(measurable),
                "spec_flops": _weighted(table, "spec_flops"),
                "ncu_flops": _weighted(table, "ncu_flops"),
                "tensor_configs": int((table["tensor_instructions"].fillna(1) > 0).sum()),
                "spec_bytes": _weighted(table, "spec_bytes"),
                "dram_bytes": _weighted(table, "dram_bytes"),
            }
        )
        tables.append(table.assign(model=model, device_kind=kind))
    rows = (
        pd.concat(tables, ignore_index=True)
        if tables
        else pd.DataFrame(columns=[*COUNTER_COLUMNS, "model", "device_kind"])
    )
    return pd.DataFrame.from_records(summaries, columns=COUNTER_SUMMARY_COLUMNS), rows
