"""Where a whole model's time goes beyond Σ its operators: NeuSight's runs against their traces.

For every imported whole-model run: the estimate composed from the data set's own per-node
figures on its GPU (Σ count × per-call time, as ``opdb import`` prints it), the run, and the two
things between them, from the run's trace summary (``datasets/neusight/runs.py``):

- **unmapped nodes**: calls of the data set's transformers-4.x model that operator-db's 5.x spec
  does not make (trace coverage = Σ mapped nodes / Σ all nodes);
- **trace against run**: Σ all nodes (first layer repeated) / the run. Below 1, the run holds
  time that no node does (launches, synchronisation, the allocator, clocks held lower over a
  long run); above 1, the nodes were timed slower than they ran in the model.

It then scores, leaving each GPU out, corrections that could be known for a GPU never measured:
one factor over all runs, one per architecture (and mode), the unmapped share per architecture
from the other GPUs' traces. Usage::

    python research/cross-device/gap.py --db sqlite:///neusight.sqlite
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
import pandas as pd
from sqlalchemy import select

from operator_db.db.models import DeviceKind, FullModelRun, Model
from operator_db.db.store import Store
from operator_db.estimate.compose import estimate_model
from operator_db.estimate.options import EstimateOptions


def runs_frame(url: str) -> pd.DataFrame:
    """Return one row per imported run with a trace: GPU, model, mode, estimate, run, trace."""
    rows = []
    with Store.open(url) as store, store.transaction(read_only=True) as session:
        found = session.execute(
            select(FullModelRun, Model.name, DeviceKind.name)
            .join(Model, Model.id == FullModelRun.model_id)
            .join(DeviceKind, DeviceKind.id == FullModelRun.device_kind_id)
        ).all()
        for run, model, kind in found:
            trace = (run.provenance or {}).get("trace")
            if not trace or not trace.get("total_ms"):
                continue
            est = estimate_model(
                session, model, kind, EstimateOptions(aggregate="median", peaks="best")
            )
            rows.append(
                {
                    "gpu": kind,
                    "model": model,
                    "arch": model.split("-")[1],
                    "mode": "training" if "-train-" in model else "inference",
                    "estimate_s": est.total_time_s,
                    "run_s": run.time_median_s,
                    "trace_coverage": trace["coverage"],
                    "trace_over_run": trace["total_ms"] / 1e3 / run.time_median_s,
                    "nodes": trace["nodes"],
                    "unmapped": trace["unmapped"],
                }
            )
    return pd.DataFrame(rows)


def per_gpu(name: str, d: pd.DataFrame, predicted: np.ndarray) -> None:
    """Print the signed error % of ``predicted`` against the runs: overall and per GPU."""
    e = (predicted / d["run_s"].to_numpy() - 1) * 100
    by = pd.Series(e).groupby(d["gpu"].to_numpy()).median()
    cells = " ".join(
        f"{k.replace('NVIDIA ', '').replace('Tesla ', '')[:10]} {v:+.1f}" for k, v in by.items()
    )
    print(f"{name:34s} median {np.median(e):+5.1f} |med| {np.median(np.abs(e)):4.1f} | {cells}")


def logo(d: pd.DataFrame, rule: Callable[[pd.Series, pd.DataFrame], float]) -> np.ndarray:
    """Return each run's estimate × ``rule(run, the other GPUs' runs)``."""
    return np.array([r["estimate_s"] * rule(r, d[d["gpu"] != r["gpu"]]) for _, r in d.iterrows()])


def main() -> None:
    """Print the decomposition and the leave-one-GPU-out corrections."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    d = runs_frame(parser.parse_args().db)
    ratio = d["run_s"] / d["estimate_s"]
    d["ratio"] = ratio
    print(
        f"{len(d)} runs with a trace on {d['gpu'].nunique()} GPUs; error % (estimate / run − 1)\n"
    )
    per_gpu("Σ mapped nodes (the composition)", d, d["estimate_s"].to_numpy())
    per_gpu(
        "÷ own trace coverage (an oracle)", d, (d["estimate_s"] / d["trace_coverage"]).to_numpy()
    )
    per_gpu(
        "÷ own coverage ÷ own trace/run (oracle)",
        d,
        (d["estimate_s"] / d["trace_coverage"] / d["trace_over_run"]).to_numpy(),
    )
    print("\nleaving each GPU out:")
    per_gpu("× median run/estimate, all", d, logo(d, lambda r, o: float(o["ratio"].median())))
    per_gpu(
        "× median run/estimate, architecture",
        d,
        logo(d, lambda r, o: float(o[o["arch"] == r["arch"]]["ratio"].median())),
    )
    per_gpu(
        "÷ architecture's trace coverage",
        d,
        logo(d, lambda r, o: 1 / float(o[o["arch"] == r["arch"]]["trace_coverage"].median())),
    )
    print("\nper GPU, median trace coverage and Σ trace / run:")
    print(d.groupby("gpu")[["trace_coverage", "trace_over_run"]].median().round(3).to_string())


if __name__ == "__main__":
    main()
