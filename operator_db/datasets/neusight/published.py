"""The paper's whole-model predictions (``summary/summary.csv.gz``): NeuSight, Habitat, roofline.

One row per (model, sequence length, batch, GPU, mode, option) with the measured latency
(``label_all_e2e_latency``, ms) and each predictor's (``<name>_all_e2e_latency``, ms). Only
single-GPU runs (no ``option``: no data, tensor or pipeline parallelism) are read, keyed as the
import keys its runs: (device kind name, spec model name).
"""

from __future__ import annotations

import csv
import gzip
import math
from pathlib import Path

from operator_db.datasets.neusight.labels import Mode, spec_name

SUMMARY = Path("summary") / "summary.csv.gz"
PREDICTORS = ("neusight", "habitat", "roofline")


def published(root: Path) -> dict[tuple[str, str], dict[str, float]]:
    """Return, per (device kind, spec model name), the measured and predicted times, s.

    Keys of each value: ``measured`` and each of ``PREDICTORS`` present for the run. An empty
    mapping where the file is absent.
    """
    path = root / SUMMARY
    if not path.is_file():
        return {}
    out: dict[tuple[str, str], dict[str, float]] = {}
    with gzip.open(path, "rt", newline="") as f:
        for row in csv.DictReader(f):
            if row.get("option"):
                continue
            mode: Mode = "inference" if row["mode"] == "inf" else "training"
            name = spec_name(row["model_name"], mode, int(row["seqlen"]), int(row["batch"]))
            figures = {"measured": _ms(row.get("label_all_e2e_latency"))}
            for p in PREDICTORS:
                figures[p] = _ms(row.get(f"{p}_all_e2e_latency"))
            kept = {k: v for k, v in figures.items() if math.isfinite(v) and v > 0}
            out[(row["device"].replace("_", " "), name)] = kept
    return out


def _ms(text: str | None) -> float:
    try:
        return float(text or "nan") / 1e3
    except ValueError:
        return math.nan
