"""Collect every leave-one-GPU-out table into /tmp/xdev/REPORT_TABLES.md from results/*.csv.

Run after: baselines.py, fit_folds.py off_rel ..., evaluate.py off_rel, fit_folds.py tile_own /
tile_nn (bmm,linear) + evaluate.py, profiles.py, fewshot_mix.py off_rel <fams>, run_logo.py.
"""
from __future__ import annotations

import glob

import numpy as np
import pandas as pd

import common as c

R = "/tmp/xdev/results"
GPUS = ["P4", "P100", "V100", "T4", "A100-40"]


def cell(x):
    if len(x) == 0:
        return "-"
    x = x.iloc[0]
    cov = "" if pd.isna(x.get("cov", np.nan)) else f" / {x['cov']:.0f}"
    return f"{x['med']:.1f} / {x['mean']:.1f}{cov}"


def block(df, label, split="test", covcol="cov"):
    lines = []
    for fam in c.FAMILIES:
        f = df[(df.fam == fam) & (df.split == split)]
        if covcol != "cov" and covcol in f:
            f = f.assign(cov=f[covcol])
        cells = [cell(f[f.held_out == g]) for g in GPUS]
        avg = f.groupby("held_out").med.first().reindex(GPUS)
        lines.append(f"| {label} | {fam} | " + " | ".join(cells) +
                     f" | {avg.mean():.1f} | {avg.max():.1f} |")
    return lines


HEAD = ("| method | family | " + " | ".join(GPUS) + " | avg med | max med |\n"
        "|---|---|" + "---|" * len(GPUS) + "---|---|")


def main():
    out = ["# Leave-one-GPU-out tables (cells: median APE / mean APE / 90 % interval coverage, %)",
           "", "Held-out GPU = column; model fitted on the other four GPUs' training and test rows.",
           "Rows scored: the held-out GPU's test rows (transformer shapes) unless marked 'train'.",
           "Few-shot rows exclude the calibration configurations.", ""]
    b = pd.read_csv(f"{R}/baselines.csv")
    out += ["## Baselines (zero-shot)", "", HEAD]
    for m in ["roofline", "nearest", "nearest_roof", "li"]:
        out += block(b[b.method == m], m)
    out += ["", "### Baselines on the held-out GPU's training rows (small random shapes)", "", HEAD]
    for m in ["roofline", "nearest", "li"]:
        out += block(b[b.method == m], m + " (train)", split="train")

    # candidates, zero-shot
    out += ["", "## Candidates, zero-shot", "", HEAD]
    ev = pd.read_csv(f"{R}/eval_off_rel.csv")
    for rule in ["mean", "median", "knn", "blend"]:
        out += block(ev[(ev["mode"] == "zero") & (ev.rule == rule)], f"offset+GBT, offset {rule}")
    for name in ["tile_own", "tile_nn"]:
        for p in glob.glob(f"{R}/eval_{name}.csv"):
            t = pd.read_csv(p)
            out += [l for l in block(t[(t["mode"] == "zero") & (t.rule == "knn")],
                                     f"{name} tile features, offset knn") if "| - | - |" not in l]
    pr = pd.concat([pd.read_csv(p) for p in glob.glob(f"{R}/eval_profiles*.csv")])
    pr = pr.drop_duplicates(subset=["fam", "mode", "rule", "k", "held_out", "split"])
    for rule in ["pavg", "pknn"]:
        out += block(pr[(pr["mode"] == "zero") & (pr.rule == rule)], f"profile {rule}")
    mx = pd.concat([pd.read_csv(p) for p in glob.glob(f"{R}/eval_mix_off_rel_*.csv")])
    z = mx[(mx["mode"] == "zero") & (mx.rule == "ens")]
    out += block(z, "ENS (recommended), pooled conformal")
    out += block(z, "ENS (recommended), union conformal", covcol="cov_union")
    for p in sorted(glob.glob(f"{R}/logo_*.csv")):
        t = pd.read_csv(p)
        out += block(t, p.split("logo_")[1][:-4])
    out += ["", "### Recommended zero-shot (ENS) on the held-out GPU's training rows", "", HEAD]
    out += block(z, "ENS (train)", split="train", covcol="cov_union")

    # few-shot
    out += ["", "## Few-shot", "",
            "k = calibration configurations of the held-out GPU in that family; design 'roof' ="
            " quantiles of log roofline time, 'space' = farthest-point in log-shape space.", "",
            HEAD]
    for k in [5, 10]:
        out += block(ev[(ev["mode"] == "few") & (ev.rule == "off") & (ev.k == k)],
                     f"offset only, roof, k={k}")
    for (rule, dz) in [("pmix", "roof"), ("pmixg_loc", "roof"), ("pmixg_loc", "space"),
                       ("pmixg_loc_gate", "space")]:
        for k in [5, 10, 15]:
            t = mx[(mx["mode"] == "few") & (mx.rule == rule) & (mx.design == dz) & (mx.k == k)]
            out += [l for l in block(t, f"{rule}, {dz}, k={k}") if "| - | - | - |" not in l]
    budget = {"bmm": ("pmixg_loc_gate", "space", 15), "linear": ("pmixg_loc_gate", "space", 12),
              "ew": ("off", "roof", 5), "ln": ("pmixg_loc_gate", "space", 8),
              "softmax": ("pmixg_loc_gate", "space", 10)}
    sel = pd.concat([mx[(mx.fam == f) & (mx["mode"] == "few") & (mx.rule == r) &
                        (mx.design == dz) & (mx.k == k)] for f, (r, dz, k) in budget.items()])
    out += ["", "### Recommended few-shot, 50 configurations (bmm 15, linear 12, softmax 10, ln 8,"
            " ew 5)", "", HEAD]
    out += block(sel, "FEW-50 test, pooled conformal")
    out += block(sel, "FEW-50 train", split="train")
    open("/tmp/xdev/REPORT_TABLES.md", "w").write("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
