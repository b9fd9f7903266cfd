"""The report's hardware sections: measured counters (Nsight Compute) and the chips' roofline."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from sqlalchemy.orm import Session

from operator_db.report.columns import COUNTERS_DISPLAY
from operator_db.report.document import Document, display
from operator_db.roofline.chip_plot import describe_roof, device_roofs, plot_chip_rooflines


def counters_section(doc: Document, summary: pd.DataFrame) -> None:
    """Per measured model and kind: spec FLOPs and bytes against those Nsight Compute counted."""
    doc.heading("Measured FLOPs and bytes (Nsight Compute)")
    if summary.empty:
        doc.para(
            "No configuration of the measured models has hardware counters: the roofline uses "
            "the spec's FLOPs and compulsory bytes. `opdb ncu command MODEL` prints the command "
            "that profiles them, `opdb ncu import` stores them (docs/ncu.md)."
        )
        return
    doc.para(
        "Where Nsight Compute profiled a configuration's call, the roofline (`opdb roofline`, "
        "column `source`) draws it at the measured FP FLOPs (add + mul + 2 × fma per precision) "
        "and DRAM bytes instead of the spec's FLOPs and compulsory bytes; its FLOPs stay the "
        "spec's where it ran on tensor cores, which those counters do not see. Sums of count × "
        "per call over the counted configurations. All rows: `ncu_counters.csv`."
    )
    doc.table(display(summary, COUNTERS_DISPLAY))


def chips_section(
    doc: Document, session: Session, out: Path, device_kinds: Sequence[str] | None
) -> None:
    """Draw the roofs of every chip of the spec-sheet table, with this database's devices."""
    doc.heading("Chips")
    devices = device_roofs(session, "float32", list(device_kinds) if device_kinds else None)
    plot_chip_rooflines(out / "chips_roofline.png", devices=devices)
    doc.para(
        "The float32 roofs of every chip of the spec-sheet table (`peaks.yaml`; a chip without a "
        "float32 figure is drawn at the dtype in brackets), with the measured roof (solid), the "
        "spec roof (dashed) and the cache roofs (dotted) of each device kind here that `opdb "
        "peaks` measured or a data set imported. A CPU's spec roof is scaled to the cores its "
        "measuring host's process may use; a kind whose name only partly matches a chip is "
        "drawn as the closest spec-sheet match; a GPU's L2 roof is attained by its "
        "configurations (no spec sheet gives one), drawn where it beats the DRAM roof. "
        "docs/peaks.md explains them."
    )
    doc.image("chips_roofline.png", "Roofline of the chips of the spec-sheet table")
    doc.bullets(
        [
            f"{d.kind_name}: measured {describe_roof(d.measured)}; spec ({d.spec_label}) "
            f"{describe_roof(d.spec)}" + "".join(f"; {line}" for line in d.attained_lines())
            for d in devices
        ]
        or ["No device kind here has measured peaks: run `opdb peaks` on a host to add its roof."]
    )
