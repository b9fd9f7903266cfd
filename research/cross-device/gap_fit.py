"""Is a run's time beyond Σ its traced nodes per kernel (launches) or per unit of work (clocks)?

For every NeuSight label with a trace: the run (e2e ms), Σ the tensor nodes' times and their
count, Σ the Python nodes' times (sizes, attributes: no kernel; timed at the timer's floor) and
their count, the first layer repeated ``num_layer`` times as the data set's README does. Then per
GPU and mode a least-squares fit ``run = k · Σ tensor nodes + g · tensor nodes`` over its runs:
``k`` above 1 says the run does the same work slower than the nodes timed alone (clocks a long
run sustains), ``g`` the time per node the run adds (negative: each node timed alone carried a
floor that the pipelined run hides). Usage::

    python research/cross-device/gap_fit.py ../shared/data/neusight
"""

from __future__ import annotations

import json
import gzip
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from operator_db.datasets.neusight.labels import label_files, parse_label
from operator_db.datasets.neusight.trace import read_trace


def rows(root: Path) -> pd.DataFrame:
    out = []
    for file in label_files(root):
        label = parse_label(file)
        if label is None or label.skip_reason or not (root / label.trace).is_file():
            continue
        with gzip.open(root / file, "rt") if file.endswith(".gz") else open(root / file) as h:
            data = json.load(h)
        layers = int(data.get("num_layer") or 0)
        nodes = read_trace(pd.read_csv(root / label.trace, dtype=str, keep_default_na=False))
        if isinstance(nodes, str):
            continue
        tk = tp = 0.0
        nk = np_ = 0
        for n in nodes:
            if n.op in ("placeholder", "get_attr", "output"):
                continue
            rep = layers if layers > 0 and n.in_layer0 else 1
            ms = (n.fw_ms if label.mode == "inference" else n.latency_ms) * rep
            if n.output_shape is None:
                tp += ms
                np_ += rep
            else:
                tk += ms
                nk += rep
        out.append(dict(gpu=label.device.replace("NVIDIA ", "").replace("Tesla ", ""),
                        model=f"{label.model}-{label.seqlen}-{label.batch}", mode=label.mode,
                        run=float(data["e2e_latency"]), tk=tk, tp=tp, nk=nk, np=np_))
    return pd.DataFrame(out)


def main() -> None:
    d = rows(Path(sys.argv[1]))
    d["sum_over_run"] = (d.tk + d.tp) / d.run
    d["tk_over_run"] = d.tk / d.run
    d["py_share"] = d.tp / (d.tk + d.tp)
    d["us_per_node"] = (d.run - d.tk) / d.nk * 1e3
    pd.set_option("display.width", 200)
    print(d.sort_values(["mode", "gpu", "model"]).round(3).to_string(index=False))
    print("\nper GPU and mode: run = k·Σ tensor nodes + g·nodes (least squares)")
    for (gpu, mode), g in d.groupby(["gpu", "mode"]):
        a = np.c_[g.tk.to_numpy(), g.nk.to_numpy()]
        if len(g) >= 2 and np.linalg.matrix_rank(a) == 2:
            (k, gap), *_ = np.linalg.lstsq(a, g.run.to_numpy(), rcond=None)
            fit = a @ np.array([k, gap])
            res = np.median(np.abs(fit / g.run - 1)) * 100
            print(f"{gpu:22s} {mode:9s} n={len(g):2d}  k={k:5.3f}  g={gap*1e3:+7.1f} µs/node  "
                  f"|res| {res:4.1f} %   (k alone: {np.median(g.run / g.tk):5.3f})")
        else:
            print(f"{gpu:22s} {mode:9s} n={len(g):2d}  (k alone: {np.median(g.run / g.tk):5.3f})")


if __name__ == "__main__":
    main()
